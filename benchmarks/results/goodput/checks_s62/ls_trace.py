"""Per call: process ms, steps and each step as drafted/accepted (. = plain), one drafter and cost model per cell kept
across its calls, on the Spec-Bench prompts of the categories (128 new tokens). From the repository root:
`OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s62/ls_trace.py translation,qa layer_skip \
layer_skip:schedule=own` (`ls_trace1.txt`; `ls_trace2.txt`: mt_bench,translation,summarization,rag)."""
import sys
import time

sys.path.insert(0, "benchmarks/results/goodput/variant_ab_s52")
from _prompts import default_pair_and_prompts  # noqa: E402

import specdec  # noqa: E402
from specdec import registry  # noqa: E402
from specdec.costs import CostModel, device_key  # noqa: E402

pair, calls = default_pair_and_prompts(sys.argv[1].split(","))
cells = {}
for spec in sys.argv[2:]:
    name, _, given = spec.partition(":")
    opts = dict(kv.split("=") for kv in filter(None, given.split(",")))
    if name == "draft_model":
        opts["model"] = pair.draft
    cells[spec] = (registry.create("drafter", name, opts), CostModel(device_key("cpu")))
for d, cm in cells.values():
    specdec.generate(pair.target, calls[0][1], max_new_tokens=16, drafter=d, cost_model=cm)
tot = {s: 0.0 for s in cells}
for cat, ids in calls:
    for spec, (d, cm) in cells.items():
        t0 = time.process_time()
        st = specdec.generate(pair.target, ids, max_new_tokens=128, drafter=d, cost_model=cm).stats
        dt = time.process_time() - t0
        tot[spec] += dt
        pat = " ".join("." if a == 0 else f"{a}/{b}" for a, b in zip(st.drafted_per_step, st.accepted_per_step))
        ctl = st.controller or {}
        print(cat, spec, f"{dt*1000:.0f}ms steps {st.steps} new {st.new_tokens} draft {st.draft_time*1000:.0f} verify {st.verify_time*1000:.0f} probes {ctl.get('probes')} reasons {ctl.get('plain_reasons')}")
        print("   ", pat[:700], flush=True)
print(tot)
