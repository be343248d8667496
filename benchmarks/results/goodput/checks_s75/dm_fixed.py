"""Stop 75: is draft_model at a fixed short length faster than batched plain decoding at batch B on this CPU? Static
unpadded batches of the batching benchmark's 16 prompts (64 new tokens, exact verifier): batched plain decoding, the
controller (goodput), and draft_model's constant schedule at k = 1 and 2 (no controller), interleaved for ROUNDS
rounds after one warm-up; per cell its mean CPU-time ratio to plain decoding (paired by round) with the standard error,
tau and acceptance; then what the goodput cell's cost model learnt (verify at B by extra inputs, a one-level draft of B
nodes, the engine's overhead per drafted and plain step).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s75/dm_fixed.py 16 4
"""
import sys
import time

import numpy as np
import torch
from specdec.benchmarks.batching import load_prompts, run_cell

import specdec
from specdec.costs import CostModel, device_key

torch.set_num_threads(1)
batch, rounds = int(sys.argv[1]), int(sys.argv[2])
pair = specdec.load_default()
target = pair.target
prompts = load_prompts(pair.tokenizer, target.config.max_position_embeddings, 16, 64, 384)
batches = [prompts[i:i + batch] for i in range(0, len(prompts), batch)]
cells = {"none": None, "goodput": {"model": pair.draft},
         "constant k=1": {"model": pair.draft, "schedule": "constant", "k": 1},
         "constant k=2": {"model": pair.draft, "schedule": "constant", "k": 2}}
costs = {name: CostModel(device_key("cpu")) for name in cells}
seconds: dict[str, list[float]] = {name: [] for name in cells}
reads = {}
for round_index in range(-1, rounds):
    for name, options in cells.items():
        started = time.process_time()
        if options is None:
            outs = [run_cell(target, rows, "autoregressive", "none", {}, 64) for rows in batches]
        else:
            outs = [run_cell(target, rows, "unpadded", "draft_model", options, 64, cost_model=costs[name])
                    for rows in batches]
        if round_index >= 0:
            seconds[name].append(time.process_time() - started)
            stats = [out.stats for out in outs]
            reads[name] = (sum(s.new_tokens for s in stats) / sum(s.steps for s in stats),
                           sum(s.accepted_tokens for s in stats) / max(1, sum(s.drafted_tokens for s in stats)))
for name in cells:
    ratios = np.array(seconds["none"]) / np.array(seconds[name])
    print(f"B={batch} {name:13s} speed over plain {ratios.mean():.3f} +- {ratios.std(ddof=1) / len(ratios) ** 0.5:.3f}"
          f"  tau {reads[name][0]:.2f}  acceptance {reads[name][1]:.2f}")
table = costs["goodput"].table()
context = float(np.mean([len(p) for p in prompts])) + 32
print("goodput cell's cost model, behind", round(context), "tokens: verify " + "  ".join(
    f"+{extra}: {table.verify(batch, batch + extra, True, context) * 1e3:.1f} ms" for extra in (0, batch // 2, batch, 2 * batch)))
print(f"  one-level draft of {batch} nodes {table.draft('draft_model', 1, batch, 2.0 * batch, context) * 1e3:.1f} ms;"
      f" overhead drafted {table.overhead('draft_model', True) * 1e3:.2f} ms, plain {table.overhead('draft_model', False) * 1e3:.2f} ms")
