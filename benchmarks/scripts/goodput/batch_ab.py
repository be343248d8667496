"""Interleaved A/B of batch cells in one process, on the batching benchmark's prompts (16 prompts, 64 new tokens,
`specdec.benchmarks.batching.load_prompts`): per batch size, `none` and every cell run in turn for each round, and a
figure is `none`'s median process CPU time over the cell's. Static batches by default (the prompts in groups of B);
`--continuous` runs all prompts at once with max_batch_size=B.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/scripts/goodput/batch_ab.py --sizes 2 4 8 --rounds 3 --continuous \\
        draft_model draft_model+BATCH_PREPARE_STEPS=1e9

A cell is `drafter[+NAME=value...]`: each NAME is a module constant of `specdec.controller` set to the value for the
cell's runs (here: a prepare spread over all the row's tokens left, as before stop 48). Cells share one model, so
one cost model and pooled estimates, as the batching benchmark's cells do: run a cell's variants side by side.
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import ExitStack
from unittest import mock

import torch
from specdec.benchmarks.batching import load_prompts

import specdec
from specdec import controller as goodput
from specdec.target import context_length


def _parse(cell: str) -> tuple[str, dict[str, float]]:
    name, *settings = cell.split("+")
    values = {}
    for setting in settings:
        key, _, value = setting.partition("=")
        if not hasattr(goodput, key):
            raise SystemExit(f"specdec.controller has no constant {key!r}")
        values[key] = float(value)
    return name, values


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cells", nargs="+")
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--continuous", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    pair = specdec.load_default()
    prompts = load_prompts(pair.tokenizer, context_length(pair.target), 16, 64, 384)
    options = dict(max_new_tokens=64, verifier="exact", eos_token_id=[])

    def run(batch: int, cell: str) -> tuple[float, int]:
        name, values = _parse(cell)
        with ExitStack() as stack:
            for key, value in values.items():
                stack.enter_context(mock.patch.object(goodput, key, value))
            started = time.process_time()
            if args.continuous:
                outs = [specdec.generate(pair.target, prompts, drafter=name, max_batch_size=batch, **options)]
            else:
                outs = [specdec.generate(pair.target, prompts[i:i + batch], drafter=name, **options)
                        for i in range(0, len(prompts), batch)]
            return time.process_time() - started, sum(out.stats.batch_steps for out in outs)

    cells = ["none", *args.cells]
    for batch in args.sizes:  # warm-up: cost curves and first-call setup
        for cell in cells:
            run(batch, cell)
    print(f"# {'continuous' if args.continuous else 'static'} batches, {args.rounds} rounds, 16 prompts, 64 new "
          "tokens; none's median CPU time over each cell's (batch steps per round)")
    for batch in args.sizes:
        results: dict[str, list[tuple[float, int]]] = {cell: [] for cell in cells}
        for _ in range(args.rounds):
            for cell in cells:
                results[cell].append(run(batch, cell))
        reference = statistics.median(seconds for seconds, _ in results["none"])
        print(f"B={batch}: " + " | ".join(
            f"{cell} {reference / statistics.median(s for s, _ in runs):.3f} ({[steps for _, steps in runs]})"
            for cell, runs in results.items() if cell != "none"))


if __name__ == "__main__":
    main()
