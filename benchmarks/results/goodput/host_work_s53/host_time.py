"""Host time per decoding step outside the verification forward, by the engine's own phase timers
(GenerationStats: draft = planning, proposing, checking and cutting the draft; verify = laying out the inputs and
the forward; other = verdict, read-back, commit, the drafter's observe, the controller's learning), and process CPU
per step, on the default model: Spec-Bench's qa prompts (first turns, 128 new tokens), greedy, exact verifier.
Cells: plain decoding, the smallest PPD tree drafting every step (no controller), ppd and anpd under the
controller, each with its own cost model warmed by one short call."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "variant_ab_s52"))
from _prompts import default_pair_and_prompts, host_time_per_step  # noqa: E402  (stop 52's helpers)

category = sys.argv[1] if len(sys.argv) > 1 else "qa"
pair, first_turns = default_pair_and_prompts([category])
tiny = {"schedule": "profile", "tree_size": 2, "num_prompts": 1, "num_ept": 1}
cells = {"none": dict(drafter="none"), "tiny ppd": dict(drafter="ppd", drafter_options=tiny, controller=False),
         "ppd": dict(drafter="ppd"), "anpd": dict(drafter="anpd")}
totals = host_time_per_step(pair.target, [ids for _, ids in first_turns], cells)
for name, (draft, verify, other, cpu, steps, drafted) in totals.items():
    steps, drafted = int(steps), int(drafted)
    print(f"{name:9s} steps {steps:4d} (drafted {drafted:4d})  per step: draft {1e3 * draft / steps:.3f} ms, "
          f"verify {1e3 * verify / steps:.2f} ms, other {1e3 * other / steps:.3f} ms, draft + other "
          f"{1e3 * (draft + other) / steps:.3f} ms, CPU {1e3 * cpu / steps:.2f} ms")
