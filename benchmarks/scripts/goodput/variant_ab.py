"""Interleaved A/B of controller variants in one process: each cell is a drafter, optionally with parts of the
controller switched off, and gets its own copy of the default model (so its own cost model and pooled
estimates); every prompt runs under every cell in turn. A figure is the reference cell's process CPU time over
the cell's, summed over a category's prompts and the rounds; steps and draft forwards in brackets.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/scripts/goodput/variant_ab.py \\
        mt_bench,translation,summarization,qa,math_reasoning,rag 2 \\
        none layer_skip+noexit+nocalibration layer_skip layer_skip:schedule=own

A cell is `name[:key=value,...][+NAME=value...][+switch...]`: drafter options, module constants of
`specdec.controller` set for the cell's runs, and switches: `noexit` (the chain exit never stops a row),
`nocalibration` (scores read by the square-root rule, `acceptance.default_factors`), `noscores` (the cut
ignores the draft's scores), `nodiscount` (failed probes do not make later ones rarer), `norest` (a free drafter
whose looks were cut to nothing never rests), `softlow` / `nolow` (the square-root score rule scales a low score's
chance down to 0.8 / not at all, instead of 0.5), `nohindsight` (the controller does not learn from the verdicts
whether the nodes it cut would have been accepted), `bothways` (a pooled estimate no verdict reached is relaxed
down towards the unseen start as well as up, as at stop 49).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from contextlib import ExitStack
from unittest import mock

import torch
from specdec.benchmarks.datasets import PromptBuilder, load_dataset
from specdec.verifiers.exact import ExactVerifier

import specdec
from specdec import acceptance, chain_exit
from specdec import controller as goodput
from specdec.target import context_length

_CUT = goodput.GoodputController.cut


def _cut_without_scores(self, draft, plan, seconds, scoring=None):
    if draft.scores is not None:
        host = draft.host
        draft = dataclasses.replace(draft, scores=None,
                                    host=None if host is None else dataclasses.replace(host, scores=None))
    return _CUT(self, draft, plan, seconds, scoring)


def _relaxed_both_ways(self, fraction, down=True):
    """`RowAcceptance.relaxed` as at stop 49 for every controller: conditionals moved towards the unseen start, down
    too (stop 50 keeps that for a lone drafter and moves only upwards with drafter="auto")."""
    fresh = self.fork(self.weight, self.decay)
    fresh.prior = [(1.0 - fraction) * c + fraction * self.unseen(i) for i, c in enumerate(fresh.prior)]
    return fresh


def _score_rule_floor(floor: float):
    """The square-root score rule with its lower bound at `floor` (0.5 in `acceptance._square_root_rule`)."""
    return mock.patch.object(acceptance, "_square_root_rule",
                             lambda log_ratio: min(2.0, max(floor, 2.0 ** (log_ratio / 2))))


SWITCHES = {
    "noexit": lambda: mock.patch.object(chain_exit.ChainExit, "keep_drafting",
                                        lambda self, depth, scores, rows=None: [True] * len(scores)),
    "nocalibration": lambda: mock.patch.object(acceptance.RowAcceptance, "factors",
                                               lambda self: acceptance.default_factors()),
    "noscores": lambda: mock.patch.object(goodput.GoodputController, "cut", _cut_without_scores),
    "nodiscount": lambda: mock.patch.object(goodput.GoodputController, "_probe_discount", lambda self, name: 1.0),
    "norest": lambda: mock.patch.object(goodput.GoodputController, "_count_look",
                                        lambda self, row, name, fruitful: None),
    "softlow": lambda: _score_rule_floor(0.8),
    "nolow": lambda: _score_rule_floor(1.0),
    "nohindsight": lambda: mock.patch.object(ExactVerifier, "accepts_target_choice", False),
    "bothways": lambda: mock.patch.object(acceptance.RowAcceptance, "relaxed", _relaxed_both_ways),
}


def _constant(text: str):
    """`NAME=value`: a module constant of `specdec.controller` set for the cell's runs."""
    key, _, value = text.partition("=")
    if not hasattr(goodput, key):
        raise SystemExit(f"specdec.controller has no constant {key!r}")
    return lambda: mock.patch.object(goodput, key, type(getattr(goodput, key))(float(value)))


def _parse(cell: str) -> tuple[str, dict[str, str], list]:
    spec, *extras = cell.split("+")
    name, _, text = spec.partition(":")
    options = dict(item.split("=", 1) for item in text.split(",")) if text else {}
    unknown = [s for s in extras if "=" not in s and s not in SWITCHES]
    if unknown:
        raise SystemExit(f"unknown switch(es) {unknown}; known: {sorted(SWITCHES)}")
    return name, options, [_constant(s) if "=" in s else SWITCHES[s] for s in extras]


def main(argv: list[str]) -> None:
    categories, rounds, cells = argv[0].split(","), int(argv[1]), argv[2:]
    torch.set_num_threads(1)
    first = specdec.load_default()
    builder = PromptBuilder(first.tokenizer, context_length(first.target), 128)
    prompts = [(s.category, builder.encode([], s.turns[0])[0])
               for s in load_dataset("spec_bench", per_category=5) if s.category in categories]
    setups = {}
    for cell in cells:
        name, options, switches = _parse(cell)
        pair = specdec.load_default()
        if name == "draft_model":  # (ppd_draft_model: its default draft and the prompts shipped for it)
            options["model"] = pair.draft
        setups[cell] = (pair.target, specdec.registry.create("drafter", name, options), switches)

    def run(cell: str, prompt: list[int], tokens: int) -> tuple[float, int, int]:
        target, drafter, switches = setups[cell]
        with ExitStack() as stack:
            for switch in switches:
                stack.enter_context(switch())
            before = getattr(drafter, "draft_forwards", 0)
            started = time.process_time()
            out = specdec.generate(target, prompt, drafter=drafter, max_new_tokens=tokens)
            return time.process_time() - started, out.stats.steps, getattr(drafter, "draft_forwards", 0) - before

    for cell in cells:  # warm-up: cost curves, caches, first-call setup
        run(cell, prompts[0][1], 16)
    totals: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):
        for category, prompt in prompts:
            for cell in cells:
                seconds, steps, forwards = run(cell, prompt, 128)
                total = totals.setdefault((cell, category), [0.0, 0, 0])
                total[0] += seconds
                total[1] += steps
                total[2] += forwards
    print(f"# {rounds} rounds, {len(prompts)} prompts, 128 new tokens; CPU time of {cells[0]} over each cell's")
    for category in [*categories, "all"]:
        chosen = categories if category == "all" else [category]
        parts = []
        for cell in cells:
            seconds = sum(totals[(cell, c)][0] for c in chosen)
            reference = sum(totals[(cells[0], c)][0] for c in chosen)
            steps = sum(totals[(cell, c)][1] for c in chosen)
            forwards = sum(totals[(cell, c)][2] for c in chosen)
            parts.append(f"{cell} {reference / seconds:.3f} ({steps:.0f} steps, {forwards:.0f} draft forwards)")
        print(f"{category}: " + " | ".join(parts))


if __name__ == "__main__":
    main(sys.argv[1:])
