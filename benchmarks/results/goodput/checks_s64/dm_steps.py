"""draft_model (the bundled draft, one drafter and cost model) on the categories' Spec-Bench first turns, 128 new
tokens: per call its steps and plain reasons; for the calls listed, every step as [p]budget/proposed/verified/
accepted (P: plain) with the row's first-node estimate before the step.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s64/dm_steps.py math_reasoning 1,2
"""
import sys

sys.path.insert(0, "benchmarks/results/goodput/variant_ab_s52")
from _prompts import default_pair_and_prompts  # noqa: E402  (stop 52's helper)

import specdec  # noqa: E402
from specdec import controller as goodput  # noqa: E402
from specdec import registry  # noqa: E402
from specdec.costs import CostModel, device_key  # noqa: E402

categories, traced = sys.argv[1].split(","), {int(x) for x in sys.argv[2].split(",")}
pair, calls = default_pair_and_prompts(categories)
drafter = registry.create("drafter", "draft_model", {"model": pair.draft})
costs = CostModel(device_key("cpu"))
specdec.generate(pair.target, calls[0][1], max_new_tokens=16, drafter=drafter, cost_model=costs)
firsts: list[str] = []
_plan = goodput.GoodputController.plan


def plan(self, row_ids, *args, **kwargs):
    row = self.rows.get(row_ids[0])
    estimate = row.estimates.get("draft_model") if row else None
    firsts.append(f"{estimate.conditional(0):.2f}" if estimate else "--")
    return _plan(self, row_ids, *args, **kwargs)


goodput.GoodputController.plan = plan
for index, (category, ids) in enumerate(calls):
    firsts.clear()
    stats = specdec.generate(pair.target, ids, max_new_tokens=128, drafter=drafter, cost_model=costs,
                             controller={"trace": True}).stats
    print(index, category, stats.steps, stats.controller["plain_reasons"])
    if index in traced:
        print("   ", " ".join(("P" if step["choice"][0] is None else
                               f"{'p' if step['probe'][0] else ''}{step['budget'][0]}/{step['proposed'][0]}/"
                               f"{step['verified'][0]}/{step['accepted'][0]}") + f":{first}"
                              for step, first in zip(stats.controller["trace"], firsts)))
