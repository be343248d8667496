"""Per-call look: each Spec-Bench prompt of the categories under each cell (drafter kept across calls, own cost
model), interleaved; prints per call steps, no-draft row-steps, drafted/accepted, CPU s; then totals."""
import sys, time
from pathlib import Path
sys.path.insert(0, "/work/main/benchmarks/results/goodput/variant_ab_s52")
from _prompts import default_pair_and_prompts
import specdec
from specdec import registry
from specdec.costs import CostModel, device_key
cats = sys.argv[1].split(","); rounds = int(sys.argv[2]); specs = sys.argv[3:]
pair, calls = default_pair_and_prompts(cats)
def drafter_of(spec):
    name, _, given = spec.partition(":")
    options = {"model": pair.draft} if name == "draft_model" else {}
    for item in filter(None, given.split(",")):
        k, v = item.split("="); options[k] = v
    return registry.create("drafter", name, options)
cells = {s: (drafter_of(s), CostModel(device_key("cpu"))) for s in specs}
for s in specs:
    d, c = cells[s]; specdec.generate(pair.target, calls[0][1], max_new_tokens=16, drafter=d, cost_model=c)
tot = {s: [0.0, 0] for s in specs}
for r in range(rounds):
    for i, (cat, ids) in enumerate(calls):
        line = []
        for s in (specs if (i + r) % 2 == 0 else specs[::-1]):
            d, c = cells[s]
            t = time.process_time()
            out = specdec.generate(pair.target, ids, max_new_tokens=128, drafter=d, cost_model=c)
            t = time.process_time() - t
            st = out.stats
            tot[s][0] += t; tot[s][1] += st.steps
            line.append((s, f"{s[:14]:14s} {st.steps:4d} st {st.no_draft_row_steps:4d} plain {st.drafted_tokens:4d}/{st.accepted_tokens:4d} {t:6.2f}s dt{st.draft_time:.2f} vt{st.verify_time:.2f} ot{st.other_time:.2f}"))
        line.sort(key=lambda x: specs.index(x[0]))
        print(f"r{r} {cat[:6]:6s} {i:2d} len{len(ids[0]) if isinstance(ids[0], list) else len(ids):5d} | " + " | ".join(l for _, l in line), flush=True)
base = tot[specs[0]][0]
print(" | ".join(f"{s} {base / tot[s][0]:.3f} ({tot[s][1]})" for s in specs))
