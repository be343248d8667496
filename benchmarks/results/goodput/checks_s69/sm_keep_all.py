"""Stop 69: is it the cut or the controller's host work that leaves anpd under the controller behind its constant
rule on the second pair? Three cells side by side: the constant rule; the controller; the controller with its cut
patched to keep every proposed node of a lone row (`GoodputController._solve_row` returning them all: the plan,
the pricing and the learning still run). 12 Spec-Bench prompts, 64 new tokens, a cost model per cell kept across
calls, 2 warm-up passes, then interleaved rounds (order reversed every other round): process CPU seconds, steps,
and the engine's draft + other host ms per step. With `--gc`, the cells are the constant rule and keep-all, each also
run with Python's garbage collector off during its calls (`sm_gc.txt`: is the gap the collector? no).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s69/sm_keep_all.py /work/second/target 4 [--gc]
"""
import gc
import sys
import time
from contextlib import nullcontext
from unittest import mock

import torch
from specdec.benchmarks.datasets import PromptBuilder, load_dataset

import specdec
from specdec.api import load_model
from specdec.controller import GoodputController
from specdec.costs import CostModel, device_key
from specdec.target import context_length

torch.set_num_threads(1)
arguments = [a for a in sys.argv[1:] if a != "--gc"]
model, tokenizer = load_model(arguments[0] if arguments else "/work/second/target")
rounds = int(arguments[1]) if len(arguments) > 1 else 4
builder = PromptBuilder(tokenizer, context_length(model), 64)
prompts = [builder.encode([], s.turns[0])[0] for s in load_dataset("spec_bench", None, None, 2)]
cells = ("constant", "keep-all", "constant-nogc", "keep-all-nogc") if "--gc" in sys.argv else (
    "constant", "goodput", "keep-all")
costs = {cell: CostModel(device_key("cpu")) for cell in cells}


def run(cell: str) -> list[float]:
    totals = [0.0, 0, 0.0, 0]
    patch = mock.patch.object(GoodputController, "_solve_row", lambda self, items, seconds: len(items.probs))
    with patch if cell.startswith("keep-all") else nullcontext():
        for prompt in prompts:
            if cell.endswith("nogc"):
                gc.disable()
            started = time.process_time()
            out = specdec.generate(model, prompt, drafter="anpd", verifier="exact", max_new_tokens=64, cost_model=costs[cell],
                                   drafter_options={"schedule": "constant" if cell.startswith("constant") else "goodput"})
            totals[0] += time.process_time() - started
            gc.enable()
            totals[1] += out.stats.steps
            totals[2] += out.stats.draft_time + out.stats.other_time
            totals[3] += sum(out.stats.drafted_per_step)
    return totals


for _ in range(2):
    for cell in cells:
        run(cell)
sums = {cell: [0.0, 0, 0.0, 0] for cell in cells}
for r in range(rounds):
    for cell in cells if r % 2 == 0 else cells[::-1]:
        for i, v in enumerate(run(cell)):
            sums[cell][i] += v
for cell, (cpu, steps, host, drafted) in sums.items():
    print(f"{cell:9s} cpu {cpu:6.3f} s  constant/cell {sums['constant'][0] / cpu:.3f}  steps {int(steps)}  drafted "
          f"{int(drafted)}  host (draft + other) {1e3 * host / steps:.3f} ms a step")
