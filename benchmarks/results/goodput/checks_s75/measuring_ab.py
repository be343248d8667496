"""Stop 75: each drafter in static unpadded batches of B (the batching benchmark's 16 prompts, 64 new tokens) with its
cost model's verify curves measured as before stop 75 (rows of one length, the long prefix bounded by the positions
only) and as since (`ragged_contexts`), against batched plain decoding, interleaved for ROUNDS rounds after a warm-up:
each cell's CPU-time ratio to plain decoding (mean, standard error, per round), tau, and new over old.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s75/measuring_ab.py 8 6 static anpd draft_model
"""

import sys
import time

import numpy as np
import torch
from specdec.benchmarks.batching import load_prompts, run_cell

import specdec
import specdec.costs as costs

torch.set_num_threads(1)
B = int(sys.argv[1])
rounds = int(sys.argv[2])
cont = sys.argv[3] == "cont"
pair = specdec.load_default()
target, tok = pair.target, pair.tokenizer
prompts = load_prompts(tok, target.config.max_position_embeddings, 16, 64, 384)
batches = [prompts[i : i + B] for i in range(0, 16, B)]
dev = costs.device_key(next(target.parameters()).device)


def old_model():
    m = costs.CostModel(dev)
    saved = costs.ragged_contexts, costs.LONG_TOKENS
    costs.ragged_contexts = lambda batch, mean, most: np.full(batch, mean)
    costs.LONG_TOKENS = 8192  # the old bound ignored LONG_TOKENS when max_positions was given
    try:
        m.ensure(target, [B], True, False, costs.LONG_CONTEXT, 1024)
    finally:
        costs.ragged_contexts, costs.LONG_TOKENS = saved
    return m


def new_model():
    m = costs.CostModel(dev)
    m.ensure(target, [B], True, False, costs.LONG_CONTEXT, 1024)
    return m


models = {}
cells = [("none", None, None)]
for d in sys.argv[4:] if len(sys.argv) > 4 else ["anpd"]:
    cells += [(f"{d}-old", d, old_model()), (f"{d}-new", d, new_model())]
times = {c[0]: [] for c in cells}
taus = {}
for r in range(-1, rounds):
    for name, d, m in cells:
        c0 = time.process_time()
        if cont:
            mode = "continuous"
            outs = [
                run_cell(
                    target,
                    prompts,
                    "continuous",
                    d or "none",
                    {"model": pair.draft} if d == "draft_model" else {},
                    64,
                    max_batch_size=B,
                    cost_model=m or costs.CostModel(dev),
                )
            ]
        elif d is None:
            outs = [run_cell(target, b, "autoregressive", "none", {}, 64) for b in batches]
        else:
            outs = [
                run_cell(
                    target,
                    b,
                    "unpadded",
                    d,
                    {"model": pair.draft} if d == "draft_model" else {},
                    64,
                    cost_model=m,
                )
                for b in batches
            ]
        dt = time.process_time() - c0
        if r >= 0:
            times[name].append(dt)
            s = [o.stats for o in outs]
            taus[name] = sum(x.new_tokens for x in s) / sum(x.steps for x in s)
for name, *_ in cells:
    ratios = np.array(times["none"]) / np.array(times[name])
    print(
        f"B={B} {'cont' if cont else 'static'} {name:16s} speed/none {ratios.mean():.3f} +- {ratios.std(ddof=1) / np.sqrt(len(ratios)) if len(ratios) > 1 else 0:.3f} tau {taus[name]:.2f} rounds {[round(x, 3) for x in ratios]}",
        flush=True,
    )
if len(cells) >= 3:
    for name, *_ in cells[1::2]:
        new = name.replace("-old", "-new")
        rel = np.array(times[name]) / np.array(times[new])
        print(f"  {new} over {name}: {rel.mean():.3f} +- {rel.std(ddof=1) / np.sqrt(len(rel)):.3f}")
