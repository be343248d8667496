"""Second pair, quick preset's prompts (2 per category, 64 new tokens): cells interleaved per prompt, each cell with a
cost model of its own; CPU time of none over each cell's, per category and overall, and its drafted row-steps.
`python sm_ab.py ROUNDS cell...`; a cell `draft_model+oldridge` runs with the draft fit's single ridge (before b6770ba)."""
import collections
import sys
import time
from unittest import mock

import torch
from specdec.benchmarks.datasets import PromptBuilder, load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

import specdec
import specdec.costs
from specdec.costs import CostModel, device_key
from specdec.target import context_length

torch.set_num_threads(1)
tgt = AutoModelForCausalLM.from_pretrained("/work/second/target", dtype=torch.float32).eval()
draft = AutoModelForCausalLM.from_pretrained("/work/second/draft128/final", dtype=torch.float32).eval()
tok = AutoTokenizer.from_pretrained("/work/second/target")
builder = PromptBuilder(tok, context_length(tgt), 64)
calls = [(s.category, builder.encode([], s.turns[0])[0]) for s in load_dataset("spec_bench", per_category=2)]
rounds, cells = int(sys.argv[1]), sys.argv[2:]
def run(cell, ids, cm):
    name, _, switch = cell.partition("+")
    patches = [mock.patch.object(specdec.costs, "DRAFT_RIDGE", 1e-4)] if switch == "oldridge" else []
    for patch in patches:
        patch.start()
    try:
        t0 = time.process_time()
        out = specdec.generate(tgt, ids, max_new_tokens=64, cost_model=cm, drafter=name,
                               drafter_options={"model": draft} if name == "draft_model" else {})
        return time.process_time() - t0, out.stats.steps - out.stats.no_draft_row_steps
    finally:
        for patch in patches:
            patch.stop()
cms = {c: CostModel(device_key("cpu")) for c in cells}
for c in cells:
    run(c, calls[0][1], cms[c])
tot = {c: collections.Counter() for c in cells}
drafted = collections.Counter()
for r in range(rounds):
    for i, (cat, ids) in enumerate(calls):
        order = cells[(i + r) % len(cells):] + cells[:(i + r) % len(cells)]
        for c in order:
            dt, d = run(c, ids, cms[c])
            tot[c][cat] += dt
            tot[c]["overall"] += dt
            drafted[c] += d
cats = list(dict.fromkeys([c for c, _ in calls])) + ["overall"]
print(f"# {rounds} rounds, none's CPU time over each cell's per category; drafted row-steps per round")
print("cell | " + " | ".join(cats) + " | drafted")
for c in cells:
    print(c + " | " + " | ".join(f"{tot[cells[0]][k] / tot[c][k]:.3f}" for k in cats) + f" | {drafted[c] / rounds:.1f}")
