"""Stop 74: anpd in static unpadded batches of B on the batching benchmark's 16 prompts (64 new tokens, exact
verifier) against plain decoding, interleaved for N rounds after 2 warm-up rounds (one cost model for anpd, kept
across rounds): per round, the process CPU time of each and the engine's phase times (`GenerationStats`: prefill,
draft, verify, other; the last two calls' sums), and anpd's plain reasons in its last call.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s74/parts.py 8 4
"""
import statistics
import sys
import time

import torch
from specdec.benchmarks.batching import load_prompts

import specdec
from specdec.costs import CostModel, device_key

torch.set_num_threads(1)
batch, rounds = int(sys.argv[1]), int(sys.argv[2])
pair = specdec.load_default()
target, tokenizer = pair.target, pair.tokenizer
prompts = load_prompts(tokenizer, target.config.max_position_embeddings, 16, 64, 384)
batches = [prompts[i:i + batch] for i in range(0, len(prompts), batch)]
costs = CostModel(device_key("cpu"))


def run(drafter: str) -> dict:
    started = time.process_time()
    parts = dict(prefill=0.0, draft=0.0, verify=0.0, other=0.0, steps=0, inputs=0, reasons=None)
    for rows in batches:
        kwargs = dict(max_new_tokens=64, eos_token_id=[], verifier="exact", batch_mode="unpadded")
        if drafter != "none":
            kwargs.update(cost_model=costs)
        stats = specdec.generate(target, rows, drafter=drafter, **kwargs).stats
        for key in ("prefill", "draft", "verify", "other"):
            parts[key] += getattr(stats, f"{key}_time")
        parts["steps"] += stats.batch_steps
        parts["inputs"] += stats.useful_input_slots
        parts["reasons"] = (stats.controller or {}).get("plain_reasons")
    parts["cpu"] = time.process_time() - started
    return parts


for drafter in ("none", "anpd", "none", "anpd"):
    run(drafter)
measured: dict[str, list[dict]] = {"none": [], "anpd": []}
for _ in range(rounds):
    for drafter in ("none", "anpd"):
        measured[drafter].append(run(drafter))
for drafter, runs in measured.items():
    keys = ("cpu", "prefill", "draft", "verify", "other")
    print(drafter, "ms per round", {k: round(statistics.mean(r[k] for r in runs) * 1e3, 1) for k in keys},
          "steps", runs[0]["steps"], "inputs", runs[0]["inputs"])
print("none over anpd per round", [round(a["cpu"] / b["cpu"], 3) for a, b in zip(measured["none"], measured["anpd"])])
print(measured["anpd"][-1]["reasons"])
