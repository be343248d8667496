"""One drafter through Spec-Bench's categories (first turns, 128 new tokens) in the harness's order: after each
category, the pooled conditionals (first 8 positions), overall and per context band, and the category's steps."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path("benchmarks/results/goodput/variant_ab_s52").resolve()))
import torch
from _prompts import default_pair_and_prompts

import specdec
from specdec import registry
from specdec.costs import CostModel, device_key

torch.set_num_threads(1)
name, cats = sys.argv[1], sys.argv[2].split(",")
pair, calls = default_pair_and_prompts(cats)
drafter = registry.create("drafter", name, {"model": pair.draft} if name == "draft_model" else {})
costs = CostModel(device_key("cpu"))
specdec.generate(pair.target, calls[0][1], max_new_tokens=16, drafter=drafter, cost_model=costs)
steps = {}
for cat, ids in calls:
    out = specdec.generate(pair.target, ids, max_new_tokens=128, drafter=drafter, cost_model=costs)
    steps[cat] = steps.get(cat, 0) + out.stats.steps
    last = cat
    nxt = [c for c, _ in calls[calls.index((cat, ids)) + 1:]]
    if not nxt or nxt[0] != cat:
        acc = costs.live.acceptance
        print(cat, "steps", steps[cat], "| all", [round(acc[name].conditional(i), 2) for i in range(8)])
        for key in sorted(k for k in acc if isinstance(k, tuple)):
            print("     band", key[1], [round(acc[key].conditional(i), 2) for i in range(8)])
