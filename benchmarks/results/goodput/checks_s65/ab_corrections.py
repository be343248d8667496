"""Interleaved A/B of stop 65's two changes against stop 64's rules: how verify-cost corrections are read and learnt
between grid points (stop 64: a width reads and teaches the nearest grid point alone; 65: both neighbours, linearly)
and, with ACCEPTANCE=1, where a chain position verified for the first time enters (stop 64: at the prior; 65: at what
it was priced at). Same harness as `checks_s60/ab_kept.py` (one drafter and cost model per cell, kept across calls;
every first turn of the categories, 128 new tokens, the cell order reversed every other prompt); the old cells run
with stop 64's functions patched in; REFERENCE names more cells (`;`-separated drafter specs) run once. A figure is `none`'s process CPU time over the cell's, per category and overall; steps in brackets.

    ACCEPTANCE=1 REFERENCE="layer_skip:schedule=own" OMP_NUM_THREADS=1 .venv/bin/python \
        benchmarks/results/goodput/checks_s65/ab_corrections.py qa,rag 2 layer_skip anpd
"""
import math
import os
import sys
import time
from bisect import bisect_right
from contextlib import ExitStack
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "variant_ab_s52"))
from _prompts import default_pair_and_prompts  # noqa: E402  (stop 52's helper)

import specdec  # noqa: E402
from specdec import acceptance, costs, registry  # noqa: E402

cats = sys.argv[1].split(",")
pair, calls = default_pair_and_prompts(cats)


def nearest(grid, value):
    index = bisect_right(grid, value)
    if index == 0:
        return 0
    if index >= len(grid) or value - grid[index - 1] <= grid[index] - value:
        return index - 1
    return index


def old_sources(grid, learnt, extra):
    point = nearest(grid, extra)
    if point in learnt:
        return point, point, 0.0
    below = max((p for p in range(point) if p in learnt), default=-1)
    above = min((p for p in range(point + 1, len(grid)) if p in learnt), default=-1)
    if below < 0 or above < 0:
        return (above, above, 0.0) if below < 0 else (below, below, 0.0)
    return below, above, (extra - grid[below]) / (grid[above] - grid[below])


def old_correction(self, packed, curve, extra, band):
    if not self.corrections:
        return 1.0
    known = self.corrections.get((packed, curve.batch, nearest(curve.extras, extra), band))
    if known is not None:
        return known
    learnt = self._learnt(packed, curve, band)
    return costs._blend(learnt, old_sources(curve.extras, learnt, extra))


def old_observe_verify(self, batch, inputs, packed, seconds, context=None):
    table = self.live
    packed = packed or batch <= 1
    scale = table.scale.get(packed, 1.0)
    predicted = table.verify_from(batch, inputs, 1, packed, context)[0]
    if predicted <= 0 or seconds <= 0:
        return
    ratio = min(1.4, max(0.7, seconds / predicted))
    table.scale[packed] = math.exp(math.log(scale) + 0.05 * math.log(ratio))
    low, high = costs._buckets(batch)
    share = 0.0 if low == high else (batch - low) / (high - low)
    for bucket, part in ((low, 1.0 - share), (high, share)):
        curve = table.curves.get((packed, bucket))
        if curve is None or part <= 0:
            continue
        key = (packed, bucket, nearest(curve.extras, max(0.0, inputs - batch)), costs.context_band(context))
        old = table.corrections.get(key)
        if old is None:
            old = table.correction(packed, curve, curve.extras[key[2]], key[3])
        table.corrections[key] = min(4.0, max(0.25, math.exp(math.log(old) + 0.25 * part * math.log(ratio))))
        table.corrected(key)


new_observe = acceptance.RowAcceptance.observe


def old_observe(self, parents, accepted, *args, **kwargs):
    """Stop 64's entry of a new position: the prior's pseudo-counts (`_start`), then the verdict as now."""
    while len(self.trials) < len(accepted):
        self.hits.append(self.weight * self._start(len(self.trials)))
        self.trials.append(self.weight)
    new_observe(self, parents, accepted, *args, **kwargs)


OLD = ((costs, "correction_sources", old_sources), (costs.CostTable, "correction", old_correction),
       (costs.CostModel, "observe_verify", old_observe_verify))
if os.environ.get("ACCEPTANCE") == "1":
    OLD += ((acceptance.RowAcceptance, "observe", old_observe),)


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
        for owner, name, value in OLD if old else ():
            stack.enter_context(mock.patch.object(owner, name, value))
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
