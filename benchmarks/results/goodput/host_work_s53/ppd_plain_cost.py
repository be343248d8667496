"""What `ppd` under the controller costs when it decodes plainly, against `none`, per call: the two interleaved
on Spec-Bench's qa prompts (first turns, 128 new tokens, 3 rounds), with the engine's phase times per call.
Where the controller keeps ppd plain on every row-step (Spec-Bench, stops 51-53), its ratio to `none` is this."""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "variant_ab_s52"))
from _prompts import default_pair_and_prompts  # noqa: E402  (stop 52's helper: the default pair, Spec-Bench's first turns)

import specdec

category = sys.argv[1] if len(sys.argv) > 1 else "qa"
pair, first_turns = default_pair_and_prompts([category])
prompts = [ids for _, ids in first_turns]
cells = {"none": dict(drafter="none"), "ppd": dict(drafter="ppd")}
for options in cells.values():
    specdec.generate(pair.target, prompts[0], max_new_tokens=16, **options)
totals = {name: [0.0] * 7 for name in cells}
for _ in range(3):
    for prompt in prompts:
        for name, options in cells.items():
            started, cpu_started = time.perf_counter(), time.process_time()
            stats = specdec.generate(pair.target, prompt, max_new_tokens=128, **options).stats
            parts = (time.perf_counter() - started, time.process_time() - cpu_started, stats.prefill_time,
                     stats.draft_time, stats.verify_time, stats.other_time, stats.steps - stats.no_draft_row_steps)
            totals[name] = [total + part for total, part in zip(totals[name], parts)]
calls = 3 * len(prompts)
for name, (wall, cpu, prefill, draft, verify, other, drafted) in totals.items():
    print(f"{name:4s} per call: wall {1e3 * wall / calls:7.1f} ms, CPU {1e3 * cpu / calls:7.1f} ms, prefill and setup "
          f"{1e3 * prefill / calls:5.1f}, draft {1e3 * draft / calls:5.2f}, verify {1e3 * verify / calls:7.1f}, other "
          f"{1e3 * other / calls:5.2f} ms; drafted row-steps {drafted:.0f} in all")
print(f"ppd / none, CPU: {totals['none'][1] / totals['ppd'][1]:.4f} (speed ratio)")
