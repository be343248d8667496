"""The controller's prefix rates (tokens per second of keeping k nodes, k = 0..) and the draft cost it reads, per planning
call, for draft_model on Spec-Bench's fourth translation prompt after four warm calls. Run from the repository root:
`OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s60/dm_rates_trace.py`."""
import sys
from unittest import mock

sys.path.insert(0, "benchmarks/results/goodput/variant_ab_s52")
from _prompts import default_pair_and_prompts  # noqa: E402  (stop 52's helper)

import specdec  # noqa: E402
from specdec.controller import GoodputController  # noqa: E402
from specdec.costs import CostModel, device_key  # noqa: E402

pair, calls = default_pair_and_prompts(["translation"])
costs = CostModel(device_key("cpu"))
options = dict(drafter="draft_model", drafter_options={"model": pair.draft}, cost_model=costs)
specdec.generate(pair.target, calls[0][1], max_new_tokens=16, **options)
for _, ids in calls[:4]:
    specdec.generate(pair.target, ids, max_new_tokens=128, **options)
log = []
original = GoodputController._prefix_rates


def logged(self, items):
    rates = original(self, items)
    draft = self.table.draft_chain(items.member, len(items.probs) + 1, context=items.context) if items.member else []
    log.append((list(items.probs), rates, draft))
    return rates


with mock.patch.object(GoodputController, "_prefix_rates", logged):
    stats = specdec.generate(pair.target, calls[3][1], max_new_tokens=128, **options).stats
print(" ".join("." if d == 0 else f"{d}/{a}" for d, a in zip(stats.drafted_per_step, stats.accepted_per_step)))
for probs, rates, draft in log[:60]:
    print("p", " ".join(f"{p:.2f}" for p in probs[:7]), "| best", max(range(len(rates)), key=rates.__getitem__),
          "| tokens/s", " ".join(f"{x:.0f}" for x in rates[:7]), "| draft ms", " ".join(f"{x * 1000:.1f}" for x in draft[:7]))
