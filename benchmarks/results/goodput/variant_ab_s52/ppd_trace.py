"""Per call: steps, probes, the controller's reasons, and each step as drafted/accepted (. = plain), for ppd on the
Spec-Bench prompts of the categories with one cost model. `python ppd_trace.py qa "num_ept=1"` (second argument: ppd
options, may be empty)."""
import sys
import time

import torch
from specdec.benchmarks.datasets import PromptBuilder, load_dataset

import specdec
from specdec.costs import CostModel, device_key
from specdec.target import context_length

torch.set_num_threads(1)
pair = specdec.load_default()
tgt, tok = pair.target, pair.tokenizer
samples = load_dataset("spec_bench", per_category=5)
b = PromptBuilder(tok, context_length(tgt), 128)
cats = sys.argv[1].split(",")
opts = dict(kv.split("=") for kv in sys.argv[2].split(",")) if len(sys.argv) > 2 and sys.argv[2] else {}
calls = [(s.category, b.encode([], s.turns[0])[0]) for s in samples if s.category in cats]
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
