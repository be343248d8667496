"""draft_model on the categories' first turns (one drafter + cost model): per traced call each step as
[p]budget/proposed/verified/accepted (P = plain, no draft asked), plus the row's c0 before the step."""
import sys
sys.path.insert(0, "/work/main/benchmarks/results/goodput/variant_ab_s52")
from _prompts import default_pair_and_prompts
import specdec
from specdec import registry, controller as G
from specdec.costs import CostModel, device_key
cats = sys.argv[1].split(","); which = set(int(x) for x in sys.argv[2].split(","))
pair, calls = default_pair_and_prompts(cats)
d = registry.create("drafter", "draft_model", {"model": pair.draft}); costs = CostModel(device_key("cpu"))
specdec.generate(pair.target, calls[0][1], max_new_tokens=16, drafter=d, cost_model=costs)
c0s = []
orig = G.GoodputController.plan
def plan(self, row_ids, *a, **k):
    row = self.rows.get(row_ids[0])
    e = row.estimates.get("draft_model") if row else None
    c0s.append(f"{e.conditional(0):.2f}" if e else "--")
    return orig(self, row_ids, *a, **k)
G.GoodputController.plan = plan
for i, (cat, ids) in enumerate(calls):
    c0s.clear()
    out = specdec.generate(pair.target, ids, max_new_tokens=128, drafter=d, cost_model=costs, controller={"trace": True})
    st = out.stats
    print(i, cat, st.steps, st.controller["plain_reasons"])
    if i in which:
        tr = st.controller["trace"]
        print("   ", " ".join(("P" if t["choice"][0] is None else f"{'p' if t['probe'][0] else ''}{t['budget'][0]}/{t['proposed'][0]}/{t['verified'][0]}/{t['accepted'][0]}") + f":{c}" for t, c in zip(tr, c0s)))
