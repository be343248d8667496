"""Interleaved A/B of batch cells in one process, on the batching benchmark's prompts (16 prompts, 64 new tokens,
`specdec.benchmarks.batching.load_prompts`): per batch size and round, every group of B prompts runs under `none` and
every cell in turn (the order reversed every other group), and a figure is `none`'s summed process CPU time over the
cell's. Static batches by default (the prompts in groups of B); `--continuous` runs all prompts at once with
max_batch_size=B.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/scripts/goodput/batch_ab.py --sizes 2 4 --rounds 2 \\
        draft_model+POOLED_RELAX=0 draft_model draft_model:schedule=constant

A cell is `drafter[:key=value,...][+NAME=value...][+switch...]`: drafter options (draft_model gets the bundled draft),
module constants of `specdec.controller` set for the cell's runs (here: pooled estimates handed on unrelaxed, as
before stop 49), and switches: `even` (rows tied for last in a static batch share its end equally, without the
product of the others' first-node acceptance, `controller.row_weights`), `fair` (`even`, and every weight scaled by
the batch's recent step cost over a plain step's: tokens valued at what the steps they save cost lately), `alike`
(before stop 51: while any prompt waits, every token counts alike, the last wave of a continuous batch too). Each cell
keeps a cost model of its own across its warm-up, rounds and batch sizes (as the batching benchmark's cells do):
sharing the model's, a cell's decisions followed from what the cells before it taught the pooled estimates.
Stop 48's A/Bs (`benchmarks/results/goodput/variant_ab_s48/`) ran this script as it was at 3d16ae0: cells sharing
the model's cost model, every cell over all prompts in turn, the median of the rounds.
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

_ROW_WEIGHTS = goodput.row_weights
_WEIGHTS = goodput.GoodputController._weights
_OBSERVE = goodput.GoodputController.observe


def _even_weights(remaining, pace, waiting, marginal=1.0, step=1.0, accept=None):
    return _ROW_WEIGHTS(remaining, pace, waiting, marginal, step, [1.0] * len(remaining))


def _scaled_weights(self, row_ids, max_depth, waiting, parts):
    weights, base = _WEIGHTS(self, row_ids, max_depth, waiting, parts)
    scale = getattr(self, "_ab_step_scale", 1.0)
    return (weights, base) if base is None else ([w * scale for w in weights], base)


def _observe_step_scale(self, plan, cut, verdict, timings, *args, **kwargs):
    """The step's priced cost over a plain step's, smoothed as a row's pace is (0.8 / 0.2)."""
    batch = len(plan.choice)
    if self.live and batch > 1:
        context = goodput.mean_context(plan.contexts)
        plain = self.table.verify(batch, batch, self.packed, context) + self._overhead(False)
        drafted = bool(any(cut.order))
        taken = ((timings.get("draft") or 0.0) + self.table.verify(batch, cut.inputs or batch, self.packed, context)
                 + self._overhead(drafted))
        self._ab_step_scale = 0.8 * getattr(self, "_ab_step_scale", 1.0) + 0.2 * (taken / plain if plain > 0 else 1.0)
    return _OBSERVE(self, plan, cut, verdict, timings, *args, **kwargs)


def _alike_weights(self, row_ids, max_depth, waiting, parts):
    """Before stop 51: while any prompt waits, every token counts alike (the last wave included)."""
    return _WEIGHTS(self, row_ids, max_depth, bool(waiting), parts)


SWITCHES: dict[str, Callable[[], list[AbstractContextManager]]] = {
    "alike": lambda: [mock.patch.object(goodput.GoodputController, "_weights", _alike_weights)],
    "even": lambda: [mock.patch.object(goodput, "row_weights", _even_weights)],
    "fair": lambda: [mock.patch.object(goodput, "row_weights", _even_weights),
                     mock.patch.object(goodput.GoodputController, "_weights", _scaled_weights),
                     mock.patch.object(goodput.GoodputController, "observe", _observe_step_scale)],
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

    def run(cell: str, group: list[list[int]], batch: int) -> tuple[float, int, list[list[int]]]:
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
            return time.process_time() - started, out.stats.batch_steps, out.sequences

    print(f"# {'continuous' if args.continuous else 'static'} batches, {args.rounds} rounds, 16 prompts, 64 new "
          "tokens, cells interleaved per group of prompts; none's CPU time over each cell's (batch steps)")
    for batch in args.sizes:
        groups = [prompts] if args.continuous else [prompts[i:i + batch] for i in range(0, len(prompts), batch)]
        for cell in cells:  # warm-up: this batch size's cost curves and first-call setup
            run(cell, groups[0], batch)
        seconds = dict.fromkeys(cells, 0.0)
        steps = dict.fromkeys(cells, 0)
        equal = dict.fromkeys(cells, True)
        for round_index in range(args.rounds):
            for index, group in enumerate(groups):
                outputs = {}
                for cell in cells if (index + round_index) % 2 == 0 else cells[::-1]:
                    spent, taken, outputs[cell] = run(cell, group, batch)
                    seconds[cell] += spent
                    steps[cell] += taken
                for cell in cells:
                    equal[cell] = equal[cell] and outputs[cell] == outputs["none"]
        print(f"B={batch}: " + " | ".join(
            f"{cell} {seconds['none'] / seconds[cell]:.3f} ({steps[cell]}{'' if equal[cell] else ', OUTPUT DIFFERS'})"
            for cell in cells if cell != "none"), flush=True)


if __name__ == "__main__":
    main()
