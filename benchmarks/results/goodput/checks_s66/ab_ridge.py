"""Interleaved A/B of stop 66's second change against its first state: the draft cost fit's ridge on its constant
(`DRAFT_RIDGE`: 1e-4 before, 10 after). Same harness as `../checks_s65/ab_corrections.py` (one drafter and cost
model per cell, kept across calls; every first turn of the categories, 128 new tokens, the cell order reversed every other prompt); the old cells
run with the old ridge patched in; REFERENCE names more cells (`;`-separated drafter specs) run once. A figure is
`none`'s process CPU time over the cell's, per category and overall; steps in brackets.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s66/ab_ridge.py \
        mt_bench,translation,summarization,qa,math_reasoning,rag 2 layer_skip draft_model
"""
import os
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "variant_ab_s52"))
from _prompts import default_pair_and_prompts  # noqa: E402  (stop 52's helper)

import specdec  # noqa: E402
from specdec import costs, registry  # noqa: E402

cats = sys.argv[1].split(",")
pair, calls = default_pair_and_prompts(cats)


def drafter_of(spec):
    """`name[:key=value,...]`; draft_model gets the bundled draft."""
    name, _, given = spec.partition(":")
    options = dict(item.split("=") for item in filter(None, given.split(",")))
    if name == "draft_model":
        options["model"] = pair.draft
    return registry.create("drafter", name, options)


cells = {"none": (drafter_of("none"), costs.CostModel(costs.device_key("cpu")), False)}
for spec in filter(None, os.environ.get("REFERENCE", "").split(";")):  # cells run once, under the new rules
    cells[spec] = (drafter_of(spec), costs.CostModel(costs.device_key("cpu")), False)
for name in sys.argv[3:]:
    for rule in ("old", "new"):
        cells[f"{rule}:{name}"] = (drafter_of(name), costs.CostModel(costs.device_key("cpu")), rule == "old")
order = list(cells)


def run(spec, ids, tokens):
    drafter, model, old = cells[spec]
    with ExitStack() as stack:
        if old:  # f2f5d98: no ridge on the constant
            stack.enter_context(mock.patch.object(costs, "DRAFT_RIDGE", (1e-4,) + costs.DRAFT_RIDGE[1:]))
        return specdec.generate(pair.target, ids, max_new_tokens=tokens, drafter=drafter, cost_model=model)


for spec in order:
    run(spec, calls[0][1], 16)
totals = {(spec, cat): [0.0, 0] for spec in order for cat in cats}
for round_index in range(int(sys.argv[2])):
    for i, (cat, ids) in enumerate(calls):
        for spec in (order if (i + round_index) % 2 == 0 else order[::-1]):
            started = time.process_time()
            out = run(spec, ids, 128)
            totals[spec, cat][0] += time.process_time() - started
            totals[spec, cat][1] += out.stats.steps
for cat in cats + ["all"]:
    chosen = cats if cat == "all" else [cat]
    base = sum(totals["none", c][0] for c in chosen)
    print(cat + ": " + " | ".join(f"{spec} {base / sum(totals[spec, c][0] for c in chosen):.3f} "
                                  f"({sum(totals[spec, c][1] for c in chosen)})" for spec in order), flush=True)
