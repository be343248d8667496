"""Stop 69: the controller with its cut keeping every node (keep-all, the constant rule's decisions) against the
constant rule, per call: process CPU, wall, prefill, host (draft + other) and verify seconds, and what is left per call.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s69/sm_residual.py
"""
import time
from unittest import mock

import torch
from specdec.benchmarks.datasets import PromptBuilder, load_dataset

import specdec
from specdec.api import load_model
from specdec.controller import GoodputController
from specdec.costs import CostModel, device_key
from specdec.target import context_length

torch.set_num_threads(1)
model, tokenizer = load_model("/work/second/target")
builder = PromptBuilder(tokenizer, context_length(model), 64)
prompts = [builder.encode([], s.turns[0])[0] for s in load_dataset("spec_bench", None, None, 2)]
cells = ("constant", "keep-all")
costs = {c: CostModel(device_key("cpu")) for c in cells}


def run(cell):
    t = [0.0] * 6
    with mock.patch.object(GoodputController, "_solve_row", lambda self, items, s: len(items.probs)):
        for prompt in prompts:
            w0, c0 = time.perf_counter(), time.process_time()
            out = specdec.generate(model, prompt, drafter="anpd", verifier="exact", max_new_tokens=64, cost_model=costs[cell],
                                   drafter_options={"schedule": "constant" if cell == "constant" else "goodput"})
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            s = out.stats
            for i, value in enumerate((cpu, wall, s.prefill_time, s.draft_time + s.other_time, s.verify_time,
                                       s.setup_cpu_time)):
                t[i] += value
    return t


for _ in range(2):
    for c in cells:
        run(c)
tot = {c: [0.0] * 6 for c in cells}
for r in range(4):
    for c in cells if r % 2 == 0 else cells[::-1]:
        for i, v in enumerate(run(c)):
            tot[c][i] += v
calls = 4 * len(prompts)
for c, (cpu, wall, prefill, host, verify, setup) in tot.items():
    print(f"{c:9s} cpu {cpu:.3f} wall {wall:.3f} prefill {prefill:.3f} setup_cpu {setup:.3f} host {host:.3f} verify {verify:.3f} "
          f"residual (wall - prefill - host - verify) {1e3 * (wall - prefill - host - verify) / calls:.2f} ms a call")
