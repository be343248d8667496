"""Static batches of B over the batching benchmark's 16 prompts, per group of B prompts: `none`'s process CPU time
over each cell's, interleaved (the order reversed every other group), with each cell's row-steps and its draft,
verify and prefill seconds in the last round. A cell is `drafter[:key=value,...]`; each keeps a cost model.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s63/pergroup.py 4 2 \\
        draft_model:schedule=constant draft_model
"""
import sys
import time

import torch
from specdec.benchmarks.batching import load_prompts

import specdec
from specdec.costs import CostModel, device_key
from specdec.target import model_device

torch.set_num_threads(1)
batch, rounds, cells = int(sys.argv[1]), int(sys.argv[2]), ["none", *sys.argv[3:]]
pair = specdec.load_default()
prompts = load_prompts(pair.tokenizer, pair.target.config.max_position_embeddings, 16, 64, 384)
costs = {cell: CostModel(device_key(model_device(pair.target))) for cell in cells}


def run(cell, group):
    name, _, given = cell.partition(":")
    options = dict(item.split("=") for item in given.split(",")) if given else {}
    if name == "draft_model":
        options["model"] = pair.draft
    started = time.process_time()
    out = specdec.generate(pair.target, group, drafter=name, drafter_options=options, max_new_tokens=64,
                           verifier="exact", eos_token_id=[], cost_model=costs[cell])
    return time.process_time() - started, out.stats


groups = [prompts[i:i + batch] for i in range(0, len(prompts), batch)]
for cell in cells:
    run(cell, groups[0])
spent = {cell: [0.0] * len(groups) for cell in cells}
last = {}
for round_index in range(rounds):
    for index, group in enumerate(groups):
        for cell in cells if (index + round_index) % 2 == 0 else cells[::-1]:
            seconds, last[cell, index] = run(cell, group)
            spent[cell][index] += seconds
for index, group in enumerate(groups):
    print("group", index, [len(p) for p in group], " | ".join(
        f"{cell} {spent['none'][index] / spent[cell][index]:.3f} ({last[cell, index].steps} rs, draft "
        f"{last[cell, index].draft_time:.2f} ver {last[cell, index].verify_time:.2f} pre "
        f"{last[cell, index].prefill_time:.2f})" for cell in cells))
for cell in cells:
    print(cell, round(sum(spent["none"]) / sum(spent[cell]), 3))
