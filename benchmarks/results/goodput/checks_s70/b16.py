"""Stop 70: the batching benchmark's continuous cells at B = 16, side by side: its 16 prompts, 64 new tokens, one call
with max_batch_size=16 (so all 16 rows start together), drafter none, draft_model and anpd in turn, 5 rounds, one
cost model per cell kept across rounds (the first round measures the cell's verify curves and is not comparable).
Prints the last round's controller stats and each round's process CPU seconds, and none's over each cell's.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s70/b16.py
"""
import time

import torch
from specdec.benchmarks.batching import load_prompts

import specdec
from specdec.costs import CostModel, device_key
from specdec.target import context_length
from specdec.zoo import load_default

torch.set_num_threads(1)
pair = load_default()
prompts = load_prompts(pair.tokenizer, context_length(pair.target), 16, 64, 1024)
cells = {"none": ("none", {}), "draft_model": ("draft_model", {"model": pair.draft}), "anpd": ("anpd", {})}
costs = {name: CostModel(device_key("cpu")) for name in cells}
times: dict[str, list[float]] = {name: [] for name in cells}
for round_index in range(5):
    for name, (drafter, options) in cells.items():
        started = time.process_time()
        out = specdec.generate(pair.target, prompts, drafter=drafter, drafter_options=options or None,
                               verifier="exact", max_new_tokens=64, eos_token_id=[], max_batch_size=16,
                               cost_model=costs[name])
        times[name].append(time.process_time() - started)
        if round_index == 4:
            stats, controller = out.stats, out.stats.controller or {}
            print(name, "batch steps", stats.batch_steps, "row steps", controller.get("row_steps"), "plain",
                  controller.get("plain_row_steps"), "probes", controller.get("probes"), "drafted",
                  controller.get("drafter_row_steps"), "reasons", controller.get("plain_reasons"),
                  f"draft {stats.draft_time:.3f} verify {stats.verify_time:.3f} other {stats.other_time:.3f}")
for name in cells:
    print(name, [f"{x:.3f}" for x in times[name]], "none over it:",
          [f"{a / b:.3f}" for a, b in zip(times["none"], times[name])])
