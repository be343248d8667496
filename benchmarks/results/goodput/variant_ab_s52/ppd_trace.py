"""Per call: steps, probes, the controller's reasons, and each step as drafted/accepted (. = plain), for ppd on the
Spec-Bench prompts of the categories with one cost model. `python ppd_trace.py qa "num_ept=1"` (second argument: ppd
options, may be empty)."""
import sys
import time

from _prompts import default_pair_and_prompts

import specdec
from specdec.costs import CostModel, device_key

pair, calls = default_pair_and_prompts(sys.argv[1].split(","))
tgt = pair.target
opts = dict((k, int(v)) for k, v in (kv.split("=") for kv in sys.argv[2].split(",")) ) if len(sys.argv) > 2 and sys.argv[2] else {}
cm = CostModel(device_key("cpu"))
def pattern(st):
    return " ".join("." if d == 0 else f"{d}/{a}" for d, a in zip(st.drafted_per_step, st.accepted_per_step))
for cat, ids in calls:
    t0 = time.process_time()
    out = specdec.generate(tgt, ids, max_new_tokens=128, cost_model=cm, drafter="ppd", drafter_options=opts)
    st = out.stats
    ctl = st.controller
    print(cat, f"{(time.process_time()-t0)*1000:.0f}ms steps {st.steps} inputs {st.input_slots} probes {ctl.get('probes')} reasons {ctl.get('plain_reasons')} streaks {ctl.get('failed_probe_streaks')}")
    print("  ", pattern(st)[:400])
