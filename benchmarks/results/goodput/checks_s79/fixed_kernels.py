"""What a verification forward costs on the kernels a seeded call runs (`packed_view(timed=False)`: every
packed layer on oneDNN from `fixed_crossover()` rows) against the timed choice and MKL alone, on the default target.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s79/fixed_kernels.py > OUT.txt

One runner per kernel choice holds the same prompts (300 cached tokens per row); they are timed in alternation
(CPU time, median of rounds), verifying a chain of k tokens per row, as `specdec.benchmarks.cpu_linear` does.
"""

from __future__ import annotations

import subprocess
import sys

import torch
from specdec.benchmarks.cpu_linear import _forward_seconds

import specdec
from specdec import cpu_linear
from specdec.attention import attention_view
from specdec.target import TargetRunner

WIDTHS = (1, 2, 4, 8, 16)
ROUNDS, REPEATS = 7, 10


def main() -> None:
    torch.set_num_threads(1)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"# library {commit}: {cpu_linear._cpu_vendor()}, fixed crossover {cpu_linear.fixed_crossover()}, "
          f"torch {torch.__version__}, 1 thread")
    model = specdec.load_default().target
    for batch in (1, 4):
        generator = torch.Generator().manual_seed(batch)
        prompts = torch.randint(1, 8000, (batch, 300), generator=generator)
        runners = {"mkl": TargetRunner(model, batch, 320), "timed": TargetRunner(model, batch, 320),
                   "fixed": TargetRunner(model, batch, 320, reproducible=True)}
        runners["mkl"].forward_model = attention_view(model)  # transformers' own linear layers
        if batch == 1:
            timed = cpu_linear._VIEWS[attention_view(model)].crossovers
            print("timed crossovers (outputs, inputs, bias): rows from which oneDNN runs:",
                  {f"{o}x{i}": rows for (o, i, _), rows in sorted(timed.items())})
        for runner in runners.values():
            runner.prefill(prompts, torch.full((batch,), 300))
        times: dict[str, dict[int, list[float]]] = {name: {k: [] for k in WIDTHS} for name in runners}
        with torch.inference_mode():
            for width in WIDTHS:
                ids = torch.randint(1, 8000, (batch, width), generator=generator)
                for runner in runners.values():
                    _forward_seconds(runner, ids, 2)
                for _ in range(ROUNDS):
                    for name, runner in runners.items():
                        times[name][width].append(_forward_seconds(runner, ids, REPEATS))
        median = {name: {k: sorted(v)[len(v) // 2] for k, v in per.items()} for name, per in times.items()}
        print(f"\nbatch {batch}: ms per verification forward (median of {ROUNDS} rounds of {REPEATS})")
        print("width " + "".join(f"{name:>9}" for name in runners) + "   fixed/timed")
        for width in WIDTHS:
            row = "".join(f"{median[name][width] * 1e3:9.2f}" for name in runners)
            print(f"{width:5d} {row}   {median['fixed'][width] / median['timed'][width]:8.3f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
