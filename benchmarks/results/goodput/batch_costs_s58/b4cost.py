"""Static B=4 groups: none vs draft_model constant K=3 vs controller: per batch step, draft / verify / other ms, and
the controller's priced draft line and verify curve at the end."""
import sys
import time

import torch
from specdec.benchmarks.batching import load_prompts

import specdec
from specdec.costs import CostModel, device_key
from specdec.target import context_length

torch.set_num_threads(1)
pair = specdec.load_default()
prompts = load_prompts(pair.tokenizer, context_length(pair.target), 16, 64, 384)
B = int(sys.argv[1]) if len(sys.argv) > 1 else 4
cells = {"none": ("none", {}), "const3": ("draft_model", {"model": pair.draft, "schedule": "constant", "k": 3}),
         "const2": ("draft_model", {"model": pair.draft, "schedule": "constant", "k": 2}),
         "ctl": ("draft_model", {"model": pair.draft})}
cms = {c: CostModel(device_key("cpu")) for c in cells}
groups = [prompts[i:i + B] for i in range(0, 16, B)]
for c, (n, o) in cells.items():
    specdec.generate(pair.target, groups[0], drafter=n, drafter_options=o, max_new_tokens=64, verifier="exact",
                     eos_token_id=[], cost_model=cms[c])
tot = {c: [0.0] * 6 for c in cells}
for g in groups:
    for c, (n, o) in cells.items():
        t0 = time.process_time()
        out = specdec.generate(pair.target, g, drafter=n, drafter_options=o, max_new_tokens=64, verifier="exact",
                               eos_token_id=[], cost_model=cms[c])
        st = out.stats
        tot[c] = [a + b for a, b in zip(tot[c], [time.process_time() - t0, st.batch_steps, st.draft_time,
                                                  st.verify_time, st.other_time, st.prefill_time])]
for c, t in tot.items():
    s = t[1]
    print(f"{c:7s} cpu {t[0]*1000:.0f}ms ratio {tot['none'][0]/t[0]:.3f} steps {s:.0f} per step: draft {t[2]/s*1000:.2f} verify {t[3]/s*1000:.2f} other {t[4]/s*1000:.2f} prefill-total {t[5]*1000:.0f}")
tab = cms["const3"].live
print("const3 cell's priced draft line", [round(x * 1000, 2) for x in tab.draft_line("draft_model", 200)[:3]])
tab = cms["ctl"].live
print("ctl cell's priced draft line", [round(x * 1000, 2) for x in tab.draft_line("draft_model", 200)[:3]])
print("verify B rows at inputs B..4B (ctl):", [round(tab.verify(B, B * k, False, 200) * 1000, 2) for k in (1, 2, 3, 4)])
for c in ("const3", "ctl"):
    tab = cms[c].live
    print(c, "verify at ctx 100/300:", [round(tab.verify(B, B * k, False, 100) * 1000, 2) for k in (1, 2, 3, 4)],
          [round(tab.verify(B, B * k, False, 300) * 1000, 2) for k in (1, 2, 3, 4)], "scale", tab.scale,
          "corr", {k: round(v, 3) for k, v in tab.corrections.items() if k[1] == B})
    fit = tab.drafters.get("draft_model")
    if fit is not None:
        print("   fit weights (ms)", [round(w * 1000, 3) for w in fit.weights], "samples", fit.samples)
    curve = tab.curves.get((False, B))
    if curve is not None:
        print("   raw curve", curve.extras[:8], [round(s * 1000, 2) for s in curve.seconds[:8]], curve.context,
              curve.long_context, [round(s * 1000, 2) for s in curve.long_seconds[:8]])
