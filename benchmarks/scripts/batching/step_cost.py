"""What one decoding step costs in a batch on this CPU, fitted from real generations (1 thread, CPU time).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/scripts/batching/step_cost.py > benchmarks/results/batching/step_cost.txt

Runs the batching benchmark's 16 prompts at B=8 (2 batches, 64 new tokens, greedy) with autoregressive
decoding, anpd (paper defaults and min_match=2) and the oracle at two accuracies, timing every
verification forward (`TargetRunner.verify_forward`), then fits by least squares

    CPU ms of a step = F + r * rows + t * (tokens - rows) + c * (cached tokens / 1000)

over all steps of all runs. Speculation saves steps (F) only as far as the batch's slowest row allows,
saves r and c when rows finish early, and pays t for every drafted token, accepted or not.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from specdec.benchmarks.batching import load_prompts
from specdec.benchmarks.oracle import prompt_key, register_oracle

import specdec
from specdec import target as target_module

torch.set_num_threads(1)
pair = specdec.load_default()
model, tokenizer = pair.target, pair.tokenizer
prompts = load_prompts(tokenizer, model.config.max_position_embeddings, 16, 64, 384)
steps: list[tuple[int, int, int, float]] = []  # rows, input tokens, cached tokens, CPU seconds
verify_forward = target_module.TargetRunner.verify_forward


def timed(self, input_ids, depths, visible, *args, valid=None, **kwargs):
    started = time.process_time()
    logits = verify_forward(self, input_ids, depths, visible, *args, valid=valid, **kwargs)
    tokens = int(valid.sum()) if valid is not None else input_ids.numel()
    steps.append((input_ids.shape[0], tokens, int(self.lengths.sum()), time.process_time() - started))
    return logits


target_module.TargetRunner.verify_forward = timed
register_oracle()
greedy = specdec.generate(model, prompts, drafter="none", max_new_tokens=64, eos_token_id=[]).sequences
continuations = {prompt_key(p): seq for p, seq in zip(prompts, greedy)}
cells = {"autoregressive": ("none", {}), "anpd": ("anpd", {}), "anpd min_match=2": ("anpd", {"min_match": 2}),
         "oracle@1": ("oracle", {"continuations": continuations, "draft_length": 3}),
         "oracle@0.6": ("oracle", {"continuations": continuations, "draft_length": 3, "accuracy": 0.6})}
print(f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, B=8, 16 prompts, 64 new tokens, 1 thread")
per_cell = {}
for name, (drafter, options) in cells.items():
    steps.clear()
    for start in range(0, len(prompts), 8):
        specdec.generate(model, prompts[start : start + 8], drafter=drafter, drafter_options=options,
                         max_new_tokens=64, verifier="exact", eos_token_id=[])
    per_cell[name] = np.array(steps, dtype=float)
    cell = per_cell[name]
    print(f"{name:18s} steps {len(cell):4d}  row-steps {int(cell[:, 0].sum()):5d}  verified tokens "
          f"{int(cell[:, 1].sum()):5d}  verification CPU {cell[:, 3].sum():.2f} s")
everything = np.concatenate(list(per_cell.values()))
design = np.c_[np.ones(len(everything)), everything[:, 0], everything[:, 1] - everything[:, 0], everything[:, 2] / 1000]
coefficients, *_ = np.linalg.lstsq(design, everything[:, 3] * 1000, rcond=None)
residual = everything[:, 3] * 1000 - design @ coefficients
print("fit (CPU ms): F {:.2f} per step, r {:.2f} per row, t {:.2f} per extra verified token, c {:.2f} per 1000 cached "
      "tokens; residual std {:.2f} ms".format(*coefficients, residual.std()))
