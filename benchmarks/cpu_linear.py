"""Verification cost against width, MKL's fp32 linear layers vs oneDNN's prepacked ones (`specdec.cpu_linear`).

    OMP_NUM_THREADS=1 python -m specdec.benchmarks.cpu_linear --out benchmarks/results/cpu_linear

For each batch size, one runner per kernel holds the same prompts (300 cached tokens per row); the two
are timed in alternation (CPU time, median of rounds) verifying a chain of k = 1..16 tokens per row, so
load changes hit both alike. Also checks that both give the same greedy tokens at every position.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

import specdec
from specdec.target import TargetRunner

WIDTHS = (1, 2, 3, 4, 6, 8, 12, 16)


def _forward_seconds(runner: TargetRunner, ids: torch.Tensor, repeats: int) -> float:
    batch, steps = ids.shape
    depths = torch.arange(steps)[None].expand(batch, steps)
    visible = torch.ones(steps, steps, dtype=torch.bool).tril()[None].expand(batch, steps, steps)
    started = time.process_time()
    for _ in range(repeats):
        runner.verify_forward(ids, depths, visible)
    return (time.process_time() - started) / repeats


def measure(model: torch.nn.Module, batch: int, rounds: int, repeats: int) -> dict:
    generator = torch.Generator().manual_seed(batch)
    prompts = torch.randint(1, 8000, (batch, 300), generator=generator)
    runners = {}
    for kernel in ("mkl", "onednn"):
        runner = TargetRunner(model, batch, 300 + max(WIDTHS) + 4)
        if kernel == "mkl":
            runner.forward_model = model  # transformers' own layers
        elif runner.forward_model is model:
            raise SystemExit("oneDNN packed linear layers are not available on this machine")
        runner.prefill(prompts, torch.full((batch,), 300))
        runners[kernel] = runner
    times: dict[str, dict[int, list[float]]] = {kernel: {k: [] for k in WIDTHS} for kernel in runners}
    same = True
    with torch.inference_mode():
        for width in WIDTHS:
            ids = torch.randint(1, 8000, (batch, width), generator=generator)
            depths = torch.arange(width)[None].expand(batch, width)
            visible = torch.ones(width, width, dtype=torch.bool).tril()[None].expand(batch, width, width)
            tokens = [runners[k].verify_forward(ids, depths, visible).argmax(-1) for k in runners]
            same &= bool(torch.equal(*tokens))
            for runner in runners.values():
                _forward_seconds(runner, ids, 2)  # warm up this width
            for _ in range(rounds):
                for kernel, runner in runners.items():
                    times[kernel][width].append(_forward_seconds(runner, ids, repeats))
    median = {kernel: {k: sorted(v)[len(v) // 2] for k, v in per.items()} for kernel, per in times.items()}
    return {"batch": batch, "greedy_tokens_identical": same,
            "ms": {kernel: {k: round(v * 1e3, 3) for k, v in per.items()} for kernel, per in median.items()},
            "vs_one_input": {kernel: {k: round(v / per[1], 3) for k, v in per.items()} for kernel, per in median.items()},
            "onednn_over_mkl": {k: round(median["onednn"][k] / median["mkl"][k], 3) for k in WIDTHS}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = specdec.load_default().target
    results = [measure(model, batch, args.rounds, args.repeats) for batch in args.batches]
    args.out.mkdir(parents=True, exist_ok=True)
    machine = {"cpu": platform.processor() or platform.machine(), "torch": torch.__version__, "threads": 1}
    (args.out / "verify_cost.json").write_text(json.dumps({"machine": machine, "results": results}, indent=1))
    lines = ["| B | kernel | " + " | ".join(f"k={k}" for k in WIDTHS) + " |", "|---|---|" + "---|" * len(WIDTHS)]
    for result in results:
        for kernel in ("mkl", "onednn"):
            cells = " | ".join(f"{result['ms'][kernel][k]:.2f} ({result['vs_one_input'][kernel][k]:.2f}x)" for k in WIDTHS)
            lines.append(f"| {result['batch']} | {kernel} | {cells} |")
    table = "\n".join(lines)
    (args.out / "verify_cost.md").write_text("CPU ms per verification forward (ratio to the same kernel's k=1)\n\n"
                                            + table + "\n")
    print(table)
    print("greedy tokens identical:", [r["greedy_tokens_identical"] for r in results])


if __name__ == "__main__":
    main()
