"""Each step of draft_model's calls under the controller (trace): budget, verified, accepted, expected tokens.
`python dm_steps.py translation [drafter options k=v,...]`; the categories' prompts run in order with one cost model."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "variant_ab_s52"))
from _prompts import default_pair_and_prompts  # noqa: E402  (stop 52's helper)

import specdec
from specdec.costs import CostModel, device_key

pair, calls = default_pair_and_prompts(sys.argv[1].split(","))
opts = {"model": pair.draft}
if len(sys.argv) > 2 and sys.argv[2]:
    opts.update(kv.split("=") for kv in sys.argv[2].split(","))
cm = CostModel(device_key("cpu"))
specdec.generate(pair.target, calls[0][1], max_new_tokens=16, cost_model=cm, drafter="draft_model",
                 drafter_options=opts)
for cat, ids in calls:
    out = specdec.generate(pair.target, ids, max_new_tokens=128, cost_model=cm, drafter="draft_model",
                           drafter_options=opts, controller={"trace": True})
    trace = out.stats.controller["trace"]
    print(cat, "steps", out.stats.steps, "new", out.stats.new_tokens)
    print("  ", " ".join(f"{t['budget'][0]}:{t['verified'][0]}/{t['accepted'][0]}({t['expected'][0]:.1f})"
                         if t["choice"][0] else "." for t in trace))
