"""Stop 75: the shape of the batch verify curve (seconds of a verification forward over a plain step's, by extra inputs
beyond one per row), three ways, at batch B on the bundled target: measured on rows of one length (`measure_verify`
before stop 75), on rows of different lengths (`ragged_contexts`, how `CostModel.ensure` measures since), and on the
batching benchmark's first B prompts 32 tokens into their answers (what its steps pay). Each the fastest of ROUNDS
interleaved rounds; which attention layout the runtime took (dense, row by row, packed inputs) is printed.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s75/verify_shape.py 16
"""
import sys
import time

import numpy as np
import torch
from specdec.benchmarks.batching import load_prompts

import specdec
from specdec.costs import EXTRA_GRID, measure_verify, ragged_contexts
from specdec.draft import tree_layout
from specdec.target import TargetRunner

ROUNDS = 6
torch.set_num_threads(1)
batch = int(sys.argv[1])
pair = specdec.load_default()
target = pair.target
grid = tuple(e for e in EXTRA_GRID if e <= 2 * batch)


def chains(extra: int) -> tuple[int, torch.Tensor, torch.Tensor, np.ndarray]:
    """`measure_verify`'s layout: `extra` inputs spread over the rows, the first rows first."""
    widths = torch.tensor([1 + extra // batch + (row < extra % batch) for row in range(batch)])
    steps = int(widths.max())
    parents = (torch.arange(steps) - 1).clamp(min=0).expand(batch, steps).contiguous()
    depths, visible = tree_layout(parents)
    return steps, depths, visible, (torch.arange(steps)[None, :] < widths[:, None]).numpy()


def timed_on(lengths: np.ndarray) -> tuple[list[float], list[str]]:
    runner = TargetRunner(target, batch, int(lengths.max()) + 2 * batch + 2)
    generator = torch.Generator().manual_seed(0)
    layouts = {extra: chains(extra) for extra in grid}
    times: dict[int, list[float]] = {extra: [] for extra in grid}
    with torch.inference_mode():
        runner.prefill(torch.randint(0, 8000, (batch, int(lengths.max())), generator=generator), lengths)
        for round_index in range(ROUNDS + 1):
            for extra in grid:
                steps, depths, visible, valid = layouts[extra]
                ids = torch.randint(0, 8000, (batch, steps), generator=generator)
                started = time.perf_counter()
                runner.verify_forward(ids, depths, visible, valid=valid, chain=True)
                if round_index:
                    times[extra].append(time.perf_counter() - started)
        kinds = []
        for extra in grid:
            steps, _, _, valid = layouts[extra]
            layout = runner._layout(runner.write_start, valid if extra else None, batch, steps, 1)
            kinds.append("dense" if layout is None else ("rows" if layout.rows is not None else "dense")
                         + ("+packed" if layout.flat is not None else ""))
    return [min(times[extra]) for extra in grid], kinds


prompts = load_prompts(pair.tokenizer, target.config.max_position_embeddings, 16, 64, 384)
benchmark = np.array([len(p) + 32 for p in prompts[:batch]])
mean = int(round(benchmark.mean()))
print(f"B={batch}: benchmark rows {sorted(benchmark.tolist())} (mean {mean}); measuring rows "
      f"{ragged_contexts(batch, mean, 1000).tolist()}")
for label, lengths in (("rows of one length", np.full(batch, mean)),
                       ("ragged_contexts", ragged_contexts(batch, mean, 1000)),
                       ("benchmark prompts", benchmark)):
    seconds, kinds = timed_on(lengths)
    print(f"{label:20s} plain {seconds[0] * 1e3:6.2f} ms; " + "  ".join(
        f"+{extra}: {s / seconds[0]:.2f} ({kind})" for extra, s, kind in zip(grid, seconds, kinds) if extra))
curve = measure_verify(target, batch, grid, True, False, mean, rounds=3, most=1000)
print("measure_verify (3 rounds, as ensure): " + "  ".join(f"+{e}: {s / curve[0]:.2f}" for e, s in zip(grid, curve) if e))
