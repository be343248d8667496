"""Static batches of B on the batching benchmark's prompts under a drafter (controller, trace): each step, per row,
budget:verified/accepted(expected tokens), P for a probe, '.' for a plain row, and the rows' token weights (seconds;
1.0 = tokens alike). One cost model, warmed by one batch first. From the repository root:

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/static_pace_s56/static_trace.py 2 2 draft_model
"""
import sys

import torch
from specdec.benchmarks.batching import load_prompts

import specdec
from specdec.costs import CostModel, device_key
from specdec.target import context_length

torch.set_num_threads(1)
pair = specdec.load_default()
prompts = load_prompts(pair.tokenizer, context_length(pair.target), 16, 64, 384)
batch, groups = int(sys.argv[1]), int(sys.argv[2])
name = sys.argv[3] if len(sys.argv) > 3 else "draft_model"
options = {"model": pair.draft} if name == "draft_model" else {}
model = CostModel(device_key("cpu"))


def run(group: list[list[int]], trace: bool):
    return specdec.generate(pair.target, group, drafter=name, drafter_options=options, max_new_tokens=64,
                            verifier="exact", eos_token_id=[], cost_model=model, controller={"trace": trace})


run(prompts[:batch], False)
for start in range(0, groups * batch, batch):
    out = run(prompts[start:start + batch], True)
    ctl = out.stats.controller
    print("batch", start // batch, "steps", out.stats.batch_steps, "reasons", ctl["plain_reasons"])
    for t in ctl["trace"]:
        rows = [f"{t['budget'][b]}:{t['verified'][b]}/{t['accepted'][b]}({t['expected'][b]:.1f})"
                + ("P" if t["probe"][b] else "") if t["choice"][b] else "." for b in range(len(t["choice"]))]
        print("  ", " | ".join(rows), f"w={[round(w, 3) for w in t['weights']]}")
