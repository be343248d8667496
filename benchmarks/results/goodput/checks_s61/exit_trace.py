"""What the controller's exit reads and says for draft_model on Spec-Bench's fourth translation prompt (after the first
three, each call's cost model warmed): per drafted depth, the last token's confidence (s), its position's mean (m), the
calibration bin and factor, the path's chance so far and the position estimates the exit prices with, and its answer.
Run from the repository root: `OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s61/exit_trace.py`"""
import sys
from unittest import mock

sys.path.insert(0, "benchmarks/results/goodput/variant_ab_s52")
from _prompts import default_pair_and_prompts

import specdec
from specdec.acceptance import score_bin
from specdec.chain_exit import ExitRow
from specdec.costs import CostModel, device_key

pair, calls = default_pair_and_prompts(["translation"])
costs = CostModel(device_key("cpu"))
options = dict(drafter="draft_model", drafter_options={"model": pair.draft}, cost_model=costs)
specdec.generate(pair.target, calls[0][1], max_new_tokens=16, **options)
for _, ids in calls[:3]:
    specdec.generate(pair.target, ids, max_new_tokens=128, **options)
orig = ExitRow.keep_drafting
log = []
def logged(self, depth, score):
    r = orig(self, depth, score)
    pos = depth - 1
    mean = self.score_means[pos] if pos < len(self.score_means) else 0
    b = score_bin(score, mean) if mean > 0 else None
    log.append(f"d{depth} s{score:.2f} m{mean:.2f} bin{b} f{self.factors[b] if b is not None else 0:.2f} path{self.paths[-1]:.2f} cond {' '.join(f'{c:.2f}' for c in self.conditionals)} -> {r}")
    return r
with mock.patch.object(ExitRow, "keep_drafting", logged):
    st = specdec.generate(pair.target, calls[3][1], max_new_tokens=128, **options).stats
print(" ".join("." if d == 0 else f"{d}/{a}" for d, a in zip(st.drafted_per_step, st.accepted_per_step)))
print("\n".join(log[-60:]))
