"""Second pair, quick preset's prompts, 3 rounds interleaved: `none`, anpd under the controller and anpd's constant rule,
each with a cost model of its own, with the engine's phase timers summed (draft, verify, other, prefill) and per step.
Run from the repository root: `OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s60/sm_anpd_split.py`."""
import sys
import time

sys.path.insert(0, "benchmarks/results/goodput/checks_s59")
from _second_pair import calls, target  # noqa: E402  (stop 59's set-up)

import specdec  # noqa: E402
from specdec.costs import CostModel, device_key  # noqa: E402

cells = {"none": ("none", {}), "anpd": ("anpd", {}), "constant": ("anpd", {"schedule": "constant"})}
costs = {cell: CostModel(device_key("cpu")) for cell in cells}
for cell, (name, options) in cells.items():
    specdec.generate(target, calls[0][1], max_new_tokens=64, cost_model=costs[cell], drafter=name,
                     drafter_options=options)
totals = {cell: [0.0] * 8 for cell in cells}
for _ in range(3):
    for _, ids in calls:
        for cell, (name, options) in cells.items():
            started = time.process_time()
            stats = specdec.generate(target, ids, max_new_tokens=64, cost_model=costs[cell], drafter=name,
                                     drafter_options=options).stats
            parts = (time.process_time() - started, stats.draft_time, stats.verify_time, stats.other_time,
                     stats.prefill_time, stats.steps, stats.steps - stats.no_draft_row_steps, stats.new_tokens)
            totals[cell] = [total + part for total, part in zip(totals[cell], parts)]
for cell, (cpu, draft, verify, other, prefill, steps, drafted, tokens) in totals.items():
    print(f"{cell:8s} cpu {cpu:.2f} draft {draft:.2f} verify {verify:.2f} other {other:.2f} prefill {prefill:.2f} "
          f"steps {steps:.0f} drafted {drafted:.0f} tokens {tokens:.0f} | per step ms: verify {verify / steps * 1e3:.3f} "
          f"other {other / steps * 1e3:.3f} draft {draft / steps * 1e3:.3f}")
