"""Host time per step outside the verification forward, by the engine's own phase timers (GenerationStats: draft =
planning, proposing and checking the draft; other = read-back, commit, the drafter's observe and the controller's
learning), on Spec-Bench's qa prompts (first turns, 128 new tokens): plain decoding, the tiny PPD drafting every step
without the controller, and ppd under the controller."""
from _prompts import default_pair_and_prompts, host_time_per_step

pair, qa = default_pair_and_prompts(["qa"])
tiny = {"schedule": "profile", "tree_size": 2, "num_prompts": 1, "num_ept": 1}
cells = {"none": dict(drafter="none"), "tiny ppd": dict(drafter="ppd", drafter_options=tiny, controller=False),
         "ppd (controller)": dict(drafter="ppd")}
totals = host_time_per_step(pair.target, [ids for _, ids in qa], cells)
for name, (draft, verify, other, cpu, steps, drafted) in totals.items():
    steps, drafted = int(steps), int(drafted)
    print(f"{name:17s} steps {steps:4d} (drafted {drafted:4d})  per step: draft {1e3 * draft / steps:.3f} ms, "
          f"verify {1e3 * verify / steps:.2f} ms, other {1e3 * other / steps:.3f} ms, CPU {1e3 * cpu / steps:.2f} ms")
