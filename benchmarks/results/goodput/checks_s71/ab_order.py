"""Stop 71: an interleaved A/B in the Spec-Bench harness's order and measure. Categories run in the sweep's order
(mt_bench's two turns with their history, then translation, ... up to --upto); every call runs under every cell in
turn (the order reversed every other call), each cell with its own drafter and cost model kept across calls and
rounds, greedy, 128 new tokens, 3 warm-up calls. Per category: the mean over (sample, round) of per-sample tokens/s
(tokens over process CPU seconds, a sample's turns summed), each cell's over the first cell's, as the harness's
category figure is a mean of per-sample speeds; then per sample; then the steps of translation's 164 and 165.

A cell is `name[:key=value,...][+variant...]`; variants patch the controller for the cell's calls:
* `w1`: a new row's estimates fork from the pooled ones at PRIOR_WEIGHT 1 (2): they leave the prior sooner;
* `grow1` / `grow2`: after a step whose chain was accepted whole and ended by the exit below its budget (not a
  probe), the next chain must reach one / two nodes further (`ExitRow.forced`), as transformers' heuristic grows;
* `monotone`: every verify price list the controller reads (`CostTable.verify_from`) is made non-decreasing.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s71/ab_order.py --rounds 6 \\
        draft_model:schedule=heuristic draft_model
"""
import argparse
import collections
import statistics
import time
from contextlib import ExitStack
from unittest import mock

import torch
from specdec.benchmarks.datasets import PromptBuilder, load_dataset

import specdec
from specdec import controller as goodput
from specdec import costs as cost_module
from specdec import registry
from specdec.costs import CostModel, device_key
from specdec.target import context_length
from specdec.zoo import load_default

ORDER = ["mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag"]
OBSERVE_ROWS = goodput.GoodputController._observe_rows
EXIT_ROW = goodput.GoodputController._exit_row
VERIFY_FROM = cost_module.CostTable.verify_from


def grow(extra: int):
    """The `growN` variant: a row's chain accepted whole and stopped by the exit reaches `extra` nodes further."""
    def observe_rows(self, plan, cut, verdict, accepted=None, paths=None, targets=None, proposal=None):
        counts = OBSERVE_ROWS(self, plan, cut, verdict, accepted, paths, targets, proposal)
        for b, row_id in enumerate(self._current_ids):
            n = len(cut.order[b])
            whole = plan.choice[b] is not None and n and counts[b] == n and n < plan.budget[b] and not plan.probe[b]
            self.rows[row_id].__dict__["_grow"] = n + extra if whole else 0
        return counts

    def exit_row(self, planned, budget, forced):
        if planned is not None:
            forced = max(forced, min(budget, planned[0].__dict__.get("_grow", 0)))
        return EXIT_ROW(self, planned, budget, forced)

    return lambda: [mock.patch.object(goodput.GoodputController, "_observe_rows", observe_rows),
                    mock.patch.object(goodput.GoodputController, "_exit_row", exit_row)]


def monotone_verify_from(self, *args, **kwargs):
    out = VERIFY_FROM(self, *args, **kwargs)
    for k in range(1, len(out)):
        out[k] = max(out[k], out[k - 1])
    return out


VARIANTS = {
    "w1": lambda: [mock.patch.object(goodput, "PRIOR_WEIGHT", 1.0)],
    "grow1": grow(1),
    "grow2": grow(2),
    "monotone": lambda: [mock.patch.object(cost_module.CostTable, "verify_from", monotone_verify_from)],
}

parser = argparse.ArgumentParser()
parser.add_argument("--upto", default="translation", choices=ORDER)
parser.add_argument("--rounds", type=int, default=3)
parser.add_argument("cells", nargs="+")
args = parser.parse_args()
torch.set_num_threads(1)
pair = load_default()
target, tokenizer = pair.target, pair.tokenizer
builder = PromptBuilder(tokenizer, context_length(target), 128)
samples = load_dataset("spec_bench", None, None, 5)
categories = ORDER[: ORDER.index(args.upto) + 1]
cells = {}
for spec in args.cells:
    base, *variants = spec.split("+")
    name, _, text = base.partition(":")
    options = dict(item.split("=") for item in text.split(",")) if text else {}
    if name == "draft_model":
        options["model"] = pair.draft
    cells[spec] = (registry.create("drafter", name, options), CostModel(device_key("cpu")), variants,
                   "schedule" not in options)


def run(spec: str, ids: list[int]) -> tuple[float, specdec.GenerationOutput]:
    drafter, costs, variants, controlled = cells[spec]
    with ExitStack() as stack:
        for variant in variants:
            for patch in VARIANTS[variant]():
                stack.enter_context(patch)
        started = time.process_time()
        out = specdec.generate(target, [ids], tokenizer=tokenizer, drafter=drafter, verifier="auto", seed=0,
                               max_new_tokens=128, cost_model=costs, controller=controlled)
        return time.process_time() - started, out


first = builder.encode([], samples[0].turns[0])[0]
for spec in cells:
    for _ in range(3):
        run(spec, first)
speeds: dict[tuple[str, str], list[tuple[str, float]]] = collections.defaultdict(list)
steps: dict[tuple[str, str], list[int]] = collections.defaultdict(list)
flip = False
for _ in range(args.rounds):
    for category in categories:
        for sample in [s for s in samples if s.category == category]:
            history: dict[str, list[tuple[str, str]]] = {spec: [] for spec in cells}
            totals = {spec: [0, 0.0] for spec in cells}
            for question in sample.turns:
                flip = not flip
                for spec in list(cells) if flip else list(cells)[::-1]:
                    seconds, out = run(spec, builder.encode(history[spec], question)[0])
                    totals[spec][0] += out.stats.new_tokens
                    totals[spec][1] += seconds
                    history[spec].append((question, tokenizer.decode(out.sequences[0], skip_special_tokens=True)))
                    if sample.sample_id in ("164", "165"):
                        steps[(spec, sample.sample_id)].append(out.stats.steps)
            for spec in cells:
                speeds[(spec, category)].append((sample.sample_id, totals[spec][0] / totals[spec][1]))


def mean_speed(spec: str, category: str, sample_id: str | None = None) -> float:
    return statistics.mean(v for s, v in speeds[(spec, category)] if sample_id is None or s == sample_id)


reference = args.cells[0]
print(f"# {args.rounds} rounds up to {args.upto}; mean per-sample tokens/s over {reference}'s")
for category in categories:
    print(f"{category[:7]:7s} | " + " | ".join(
        f"{spec} {mean_speed(spec, category) / mean_speed(reference, category):.3f}" for spec in cells))
for category in categories:
    ids = sorted({s for s, _ in speeds[(reference, category)]}, key=int)
    print(f"{category[:7]} {reference} tok/s", {i: round(mean_speed(reference, category, i), 1) for i in ids})
    for spec in list(cells)[1:]:
        print(f"{category[:7]} {spec}", {i: round(mean_speed(spec, category, i) / mean_speed(reference, category, i), 3)
                                         for i in ids})
for key, values in sorted(steps.items()):
    print("steps", key, values)
