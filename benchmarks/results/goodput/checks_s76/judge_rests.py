"""Stop 76: anpd under the controller in continuous batches of B (the batching benchmark's 16 prompts, 64 new tokens),
four calls on one cost model, with the looks' judge of a continuous batch's last wave on its rows alone (before stop
76) and on its places' ends (`lane_ends`, since): per call the batch steps, tau, the row-steps the batch rested from
its looks, and the rows' own rests.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s76/judge_rests.py 4
"""

import sys

import torch
from specdec.benchmarks.batching import load_prompts, run_cell

import specdec
import specdec.costs as costs
from specdec import controller as ctl

torch.set_num_threads(1)
B = int(sys.argv[1])
pair = specdec.load_default()
target, tok = pair.target, pair.tokenizer
prompts = load_prompts(tok, target.config.max_position_embeddings, 16, 64, 384)
lane_judge = ctl.GoodputController._judge_looks


def rows_judge(self, plan, accepted, timings):
    queued, plan.queued = plan.queued, []
    try:
        return lane_judge(self, plan, accepted, timings)
    finally:
        plan.queued = queued


for label, judge in (("rows judge (before)", rows_judge), ("lane judge (since)", lane_judge)):
    ctl.GoodputController._judge_looks = judge
    model = costs.CostModel(costs.device_key("cpu"))
    for call in range(4):
        out = run_cell(target, prompts, "continuous", "anpd", {}, 64, max_batch_size=B, cost_model=model)
        reasons = out.stats.controller["plain_reasons"]
        print(
            f"B={B} {label} call {call}: batch steps {out.stats.batch_steps}, tau {out.stats.new_tokens / out.stats.steps:.3f}, "
            f"batch-rest row-steps {reasons.get(ctl.BATCH_REST_REASON, 0)}, "
            f"row rests {reasons.get('free drafter resting after fruitless looks', 0)}"
        )
ctl.GoodputController._judge_looks = lane_judge
