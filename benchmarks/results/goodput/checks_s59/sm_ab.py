"""Second pair, quick preset's prompts (2 per category, 64 new tokens): cells interleaved per prompt, each cell with a
cost model of its own; CPU time of none over each cell's, per category and overall, and its drafted row-steps.
`python sm_ab.py ROUNDS cell...`; a cell `draft_model+oldridge` runs with the draft fit's single ridge (before b6770ba)."""
import collections
import sys
import time
from unittest import mock

from _second_pair import calls, draft
from _second_pair import target as tgt

import specdec
import specdec.costs
from specdec.costs import CostModel, device_key

rounds, cells = int(sys.argv[1]), sys.argv[2:]
def run(cell, ids, cm):
    name, _, switch = cell.partition("+")
    patches = [mock.patch.object(specdec.costs, "DRAFT_RIDGE", 1e-4)] if switch == "oldridge" else []
    for patch in patches:
        patch.start()
    try:
        t0 = time.process_time()
        out = specdec.generate(tgt, ids, max_new_tokens=64, cost_model=cm, drafter=name,
                               drafter_options={"model": draft} if name == "draft_model" else {})
        return time.process_time() - t0, out.stats.steps - out.stats.no_draft_row_steps
    finally:
        for patch in patches:
            patch.stop()
cms = {c: CostModel(device_key("cpu")) for c in cells}
for c in cells:
    run(c, calls[0][1], cms[c])
tot = {c: collections.Counter() for c in cells}
drafted = collections.Counter()
for r in range(rounds):
    for i, (cat, ids) in enumerate(calls):
        order = cells[(i + r) % len(cells):] + cells[:(i + r) % len(cells)]
        for c in order:
            dt, d = run(c, ids, cms[c])
            tot[c][cat] += dt
            tot[c]["overall"] += dt
            drafted[c] += d
cats = list(dict.fromkeys([c for c, _ in calls])) + ["overall"]
print(f"# {rounds} rounds, none's CPU time over each cell's per category; drafted row-steps per round")
print("cell | " + " | ".join(cats) + " | drafted")
for c in cells:
    print(c + " | " + " | ".join(f"{tot[cells[0]][k] / tot[c][k]:.3f}" for k in cats) + f" | {drafted[c] / rounds:.1f}")
