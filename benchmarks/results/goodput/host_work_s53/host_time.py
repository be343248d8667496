"""Host time per decoding step outside the verification forward, by the engine's own phase timers
(GenerationStats: draft = planning, proposing, checking and cutting the draft; verify = laying out the inputs and
the forward; other = verdict, read-back, commit, the drafter's observe, the controller's learning), and process CPU
per step, on the default model: Spec-Bench's qa prompts (first turns, 128 new tokens), greedy, exact verifier.
Cells: plain decoding, the smallest PPD tree drafting every step (no controller), ppd and anpd under the
controller, each with its own cost model warmed by one short call."""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "variant_ab_s52"))
from _prompts import default_pair_and_prompts  # noqa: E402  (stop 52's helper: the default pair, Spec-Bench's first turns)

import specdec
from specdec.costs import CostModel, device_key  # noqa: E402

category = sys.argv[1] if len(sys.argv) > 1 else "qa"
pair, first_turns = default_pair_and_prompts([category])
prompts = [ids for _, ids in first_turns]
tiny = {"schedule": "profile", "tree_size": 2, "num_prompts": 1, "num_ept": 1}
cells = {"none": dict(drafter="none"), "tiny ppd": dict(drafter="ppd", drafter_options=tiny, controller=False),
         "ppd": dict(drafter="ppd"), "anpd": dict(drafter="anpd")}
models = {name: CostModel(device_key("cpu")) for name in cells}
for name, options in cells.items():
    specdec.generate(pair.target, prompts[0], max_new_tokens=16, cost_model=models[name], **options)
totals = {name: [0.0] * 4 + [0, 0] for name in cells}
for prompt in prompts:
    for name, options in cells.items():
        started = time.process_time()
        stats = specdec.generate(pair.target, prompt, max_new_tokens=128, cost_model=models[name], **options).stats
        total = totals[name]
        total[0] += stats.draft_time
        total[1] += stats.verify_time
        total[2] += stats.other_time
        total[3] += time.process_time() - started
        total[4] += stats.steps
        total[5] += stats.steps - stats.no_draft_row_steps
for name, (draft, verify, other, cpu, steps, drafted) in totals.items():
    print(f"{name:9s} steps {steps:4d} (drafted {drafted:4d})  per step: draft {1e3 * draft / steps:.3f} ms, "
          f"verify {1e3 * verify / steps:.2f} ms, other {1e3 * other / steps:.3f} ms, draft + other "
          f"{1e3 * (draft + other) / steps:.3f} ms, CPU {1e3 * cpu / steps:.2f} ms")
