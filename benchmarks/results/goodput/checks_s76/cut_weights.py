"""Stop 76: what the controller's cut saw when it cut a row's anpd draft to nothing, in continuous batches of B (the
batching benchmark's 16 prompts, 64 new tokens), the batch never resting from its looks (FRUITLESS_LOOKS raised):
how many rows' drafts it cut away over two calls (after a warm-up call), then, for the first cuts of a third call, the
verify curve (+0..8 inputs, ms), and per drafted row its estimates by position, the nodes kept and the worth of one of
its tokens (`row_weights`, ms; the plain step's worth after it). Once no more prompts wait than the batch has rows,
a token of a row that is not expected to end the run is worth what the row adds to a step.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s76/cut_weights.py 4 '{"min_match":2,"k":2}'
"""

import collections
import json
import sys

import torch
from specdec.benchmarks.batching import load_prompts, run_cell

import specdec
import specdec.costs as costs
from specdec import controller as ctl

torch.set_num_threads(1)
B = int(sys.argv[1])
options = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
ctl.FRUITLESS_LOOKS = 100000
pair = specdec.load_default()
target, tok = pair.target, pair.tokenizer
prompts = load_prompts(tok, target.config.max_position_embeddings, 16, 64, 384)
counts: collections.Counter = collections.Counter()
samples: list = []
original_cut, original_solve = ctl.GoodputController.cut, ctl.GoodputController._solve


def cut(self, draft, plan, draft_seconds, scoring=None):
    before = draft.sizes()
    cut_draft, decision = original_cut(self, draft, plan, draft_seconds, scoring)
    after = cut_draft.sizes() if cut_draft.width else [0] * len(before)
    for proposed, kept in zip(before, after):
        counts["rows proposed"] += proposed > 0
        counts["rows kept"] += kept > 0
        counts["rows cut to nothing"] += proposed > 0 and kept == 0
        counts["nodes proposed"] += proposed
        counts["nodes kept"] += kept
    return cut_draft, decision


def solve(self, rows, batch, draft_seconds, base=None, margin=0.0):
    kept = original_solve(self, rows, batch, draft_seconds, base, margin)
    if (
        record
        and draft_seconds is not None
        and len(samples) < 14
        and any(r.probs and k == 0 for r, k in zip(rows, kept))
    ):
        curve = self.table.verify_from(
            batch, batch, batch + 8, self.packed, ctl.mean_context(r.context for r in rows)
        )
        samples.append(
            (
                [round(x * 1e3, 2) for x in curve[:9]],
                [
                    ([round(p, 2) for p in r.probs], k, round(r.weight * 1e3, 2))
                    for r, k in zip(rows, kept)
                    if r.probs
                ],
                None if base is None else round(base * 1e3, 2),
            )
        )
    return kept


ctl.GoodputController.cut = cut
ctl.GoodputController._solve = solve
model = costs.CostModel(costs.device_key("cpu"))
record = False
for call in range(3):
    if call == 1:
        counts.clear()
    run_cell(target, prompts, "continuous", "anpd", options, 64, max_batch_size=B, cost_model=model)
print(dict(counts))
record = True
run_cell(target, prompts, "continuous", "anpd", options, 64, max_batch_size=B, cost_model=model)
for curve, rows, step in samples:
    print(f"verify +0..8 {curve}")
    print(f"    rows (estimates, kept, token worth ms): {rows}; plain step worth {step}")
