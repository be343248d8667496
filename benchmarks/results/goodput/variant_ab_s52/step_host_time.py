"""Host time per step outside the verification forward, by the engine's own phase timers (GenerationStats: draft =
planning, proposing and checking the draft; other = read-back, commit, the drafter's observe and the controller's
learning), on Spec-Bench's qa prompts (first turns, 128 new tokens): plain decoding, the tiny PPD drafting every step
without the controller, and ppd under the controller."""
import time

from _prompts import default_pair_and_prompts

import specdec
from specdec.costs import CostModel, device_key

pair, qa = default_pair_and_prompts(["qa"])
tgt = pair.target
prompts = [ids for _, ids in qa]
tiny = {"schedule": "profile", "tree_size": 2, "num_prompts": 1, "num_ept": 1}
cells = {"none": dict(drafter="none"), "tiny ppd": dict(drafter="ppd", drafter_options=tiny, controller=False),
         "ppd (controller)": dict(drafter="ppd")}
models = {name: CostModel(device_key("cpu")) for name in cells}
for name, kw in cells.items():
    specdec.generate(tgt, prompts[0], max_new_tokens=16, cost_model=models[name], **kw)
totals = {name: [0.0, 0.0, 0.0, 0.0, 0, 0] for name in cells}
for prompt in prompts:
    for name, kw in cells.items():
        started = time.process_time()
        st = specdec.generate(tgt, prompt, max_new_tokens=128, cost_model=models[name], **kw).stats
        t = totals[name]
        t[0] += st.draft_time
        t[1] += st.verify_time
        t[2] += st.other_time
        t[3] += time.process_time() - started
        t[4] += st.steps
        t[5] += st.steps - st.no_draft_row_steps
for name, (draft, verify, other, cpu, steps, drafted) in totals.items():
    print(f"{name:17s} steps {steps:4d} (drafted {drafted:4d})  per step: draft {1e3 * draft / steps:.3f} ms, "
          f"verify {1e3 * verify / steps:.2f} ms, other {1e3 * other / steps:.3f} ms, CPU {1e3 * cpu / steps:.2f} ms")
