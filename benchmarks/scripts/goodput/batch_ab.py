"""Interleaved A/B of batch cells in one process, on the batching benchmark's prompts (16 prompts, 64 new tokens,
`specdec.benchmarks.batching.load_prompts`): per batch size and round, every group of B prompts runs under `none` and
every cell in turn (the order reversed every other group), and a figure is `none`'s summed process CPU time over the
cell's. Static batches by default (the prompts in groups of B); `--continuous` runs all prompts at once with
max_batch_size=B.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/scripts/goodput/batch_ab.py --sizes 2 4 --rounds 2 \\
        draft_model+POOLED_RELAX=0 draft_model draft_model:schedule=constant

A cell is `drafter[:key=value,...][+NAME=value...][+switch...]`: drafter options (draft_model gets the bundled draft),
module constants of `specdec.controller` set for the cell's runs (here: pooled estimates handed on unrelaxed, as
before stop 49), and switches: `alike` (before stop 51: while any prompt waits, every token counts alike, the last
wave of a continuous batch too). The switches `even` and `fair` of stops 49-58 (tied rows sharing a static batch's
end equally; weights scaled by the batch's recent step cost) were dropped at stop 63, when `controller.row_weights`
itself came to share the end by each row's chance of being last: run them at 41e0015 or before. Each cell
keeps a cost model of its own across its warm-up, rounds and batch sizes (as the batching benchmark's cells do):
sharing the model's, a cell's decisions followed from what the cells before it taught the pooled estimates.
Stop 48's A/Bs (`benchmarks/results/goodput/variant_ab_s48/`) ran this script as it was at 3d16ae0: cells sharing
the model's cost model, every cell over all prompts in turn, the median of the rounds.

Besides each cell's figure and batch steps it prints the share of its row-steps that verified no draft and its
drafters' seconds: cells that decode plainly do `none`'s work, and their figure is this machine's spread.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from typing import Any
from unittest import mock

import torch
from specdec.benchmarks.batching import load_prompts

import specdec
from specdec import controller as goodput
from specdec.costs import CostModel, device_key
from specdec.target import context_length, model_device

_WEIGHTS = goodput.GoodputController._weights


def _alike_weights(self, row_ids, max_depth, waiting, parts):
    """Before stop 51: while any prompt waits, every token counts alike (the last wave included)."""
    return _WEIGHTS(self, row_ids, max_depth, bool(waiting), parts)


SWITCHES: dict[str, Callable[[], list[AbstractContextManager]]] = {
    "alike": lambda: [mock.patch.object(goodput.GoodputController, "_weights", _alike_weights)],
}


def _parse(cell: str) -> tuple[str, dict[str, str], dict[str, float], list[str]]:
    spec, *extras = cell.split("+")
    name, _, text = spec.partition(":")
    options = dict(item.split("=", 1) for item in text.split(",")) if text else {}
    values, switches = {}, []
    for extra in extras:
        key, _, value = extra.partition("=")
        if value:
            if not hasattr(goodput, key):
                raise SystemExit(f"specdec.controller has no constant {key!r}")
            values[key] = float(value)
        elif key in SWITCHES:
            switches.append(key)
        else:
            raise SystemExit(f"unknown switch {key!r}; known: {sorted(SWITCHES)}")
    return name, options, values, switches


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cells", nargs="+")
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--continuous", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    pair = specdec.load_default()
    prompts = load_prompts(pair.tokenizer, context_length(pair.target), 16, 64, 384)
    device = device_key(model_device(pair.target))
    cells = ["none", *args.cells]
    setups: dict[str, tuple[str, dict[str, Any], dict[str, float], list[str], CostModel]] = {}
    for cell in cells:
        name, options, values, switches = _parse(cell)
        if name == "draft_model":
            options["model"] = pair.draft
        setups[cell] = (name, options, values, switches, CostModel(device))

    def run(cell: str, group: list[list[int]], batch: int) -> tuple[float, specdec.GenerationStats, list[list[int]]]:
        name, options, values, switches, costs = setups[cell]
        with ExitStack() as stack:
            for key, value in values.items():
                stack.enter_context(mock.patch.object(goodput, key, value))
            for switch in switches:
                for patch in SWITCHES[switch]():
                    stack.enter_context(patch)
            started = time.process_time()
            out = specdec.generate(pair.target, group, drafter=name, drafter_options=options, max_new_tokens=64,
                                   verifier="exact", eos_token_id=[], cost_model=costs,
                                   max_batch_size=batch if args.continuous else None)
            return time.process_time() - started, out.stats, out.sequences

    print(f"# {'continuous' if args.continuous else 'static'} batches, {args.rounds} rounds, 16 prompts, 64 new "
          "tokens, cells interleaved per group of prompts; none's CPU time over each cell's (batch steps, share of "
          "row-steps with no draft, drafters' seconds)")
    for batch in args.sizes:
        groups = [prompts] if args.continuous else [prompts[i:i + batch] for i in range(0, len(prompts), batch)]
        for cell in cells:  # warm-up: this batch size's cost curves and first-call setup
            run(cell, groups[0], batch)
        seconds = dict.fromkeys(cells, 0.0)
        steps = dict.fromkeys(cells, 0)
        plain = dict.fromkeys(cells, 0)
        row_steps = dict.fromkeys(cells, 0)
        drafting = dict.fromkeys(cells, 0.0)
        equal = dict.fromkeys(cells, True)
        for round_index in range(args.rounds):
            for index, group in enumerate(groups):
                outputs = {}
                for cell in cells if (index + round_index) % 2 == 0 else cells[::-1]:
                    spent, stats, outputs[cell] = run(cell, group, batch)
                    seconds[cell] += spent
                    steps[cell] += stats.batch_steps
                    plain[cell] += stats.no_draft_row_steps
                    row_steps[cell] += stats.steps
                    drafting[cell] += stats.draft_time
                for cell in cells:
                    equal[cell] = equal[cell] and outputs[cell] == outputs["none"]
        print(f"B={batch}: " + " | ".join(
            f"{cell} {seconds['none'] / seconds[cell]:.3f} ({steps[cell]}, no draft {plain[cell] / row_steps[cell]:.0%}, "
            f"draft {drafting[cell]:.2f} s{'' if equal[cell] else ', OUTPUT DIFFERS'})"
            for cell in cells if cell != "none"), flush=True)


if __name__ == "__main__":
    main()
