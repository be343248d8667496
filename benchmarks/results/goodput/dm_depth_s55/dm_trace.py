"""Per call: steps and each step as drafted/accepted (. = plain), for draft_model on the Spec-Bench prompts of the
categories (one cost model per schedule). `python dm_trace.py translation goodput heuristic`."""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "variant_ab_s52"))
from _prompts import default_pair_and_prompts  # noqa: E402  (stop 52's helper)

import specdec
from specdec.costs import CostModel, device_key

pair, calls = default_pair_and_prompts(sys.argv[1].split(","))
tgt = pair.target
schedules = sys.argv[2:]
models = {s: CostModel(device_key("cpu")) for s in schedules}
for s in schedules:
    specdec.generate(tgt, calls[0][1], max_new_tokens=16, cost_model=models[s], drafter="draft_model",
                     drafter_options={"model": pair.draft, "schedule": s})


def pattern(st):
    return " ".join("." if d == 0 else f"{d}/{a}" for d, a in zip(st.drafted_per_step, st.accepted_per_step))


for cat, ids in calls:
    for s in schedules:
        t0 = time.process_time()
        out = specdec.generate(tgt, ids, max_new_tokens=128, cost_model=models[s], drafter="draft_model",
                               drafter_options={"model": pair.draft, "schedule": s})
        st = out.stats
        ctl = st.controller or {}
        print(cat, s, f"{(time.process_time() - t0) * 1000:.0f}ms steps {st.steps} new {st.new_tokens} "
              f"draft {st.draft_time * 1000:.0f}ms verify {st.verify_time * 1000:.0f}ms reasons {ctl.get('plain_reasons')}")
        print("  ", pattern(st)[:600])
