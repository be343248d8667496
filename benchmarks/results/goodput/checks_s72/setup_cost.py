"""Stop 72: a call's fixed cost under draft_model (the controller, the drafter's setup) against `none` on the second
pair: 2-token calls on the last 40 tokens of a qa prompt, 5 warm-up calls per cell, 40 rounds alternating the cells'
order (process CPU per call, median and min); with any argument, then cProfile of 200 draft_model calls (the
drafter's setup and the controller's construction by callee).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s72/setup_cost.py [prof]
"""
import cProfile
import pstats
import statistics
import sys
import time

import torch
from specdec.benchmarks.datasets import PromptBuilder, load_dataset

import specdec
from specdec import registry
from specdec.api import load_model
from specdec.costs import CostModel, device_key
from specdec.target import context_length

torch.set_num_threads(1)
model, tokenizer = load_model("/work/second/target")
builder = PromptBuilder(tokenizer, context_length(model), 64)
prompt = builder.encode([], load_dataset("spec_bench", None, None, 2)[8].turns[0])[0][-40:]
cells = {"none": (registry.create("drafter", "none", {}), CostModel(device_key("cpu"))),
         "dm": (registry.create("drafter", "draft_model", {"model": "/work/second/draft128/final"}),
                CostModel(device_key("cpu")))}


def run(cell: str, new_tokens: int = 2) -> float:
    drafter, costs = cells[cell]
    started = time.process_time()
    specdec.generate(model, [prompt], tokenizer=tokenizer, drafter=drafter, verifier="auto",
                     max_new_tokens=new_tokens, cost_model=costs)
    return time.process_time() - started


for cell in cells:
    for _ in range(5):
        run(cell)
seconds: dict[str, list[float]] = {cell: [] for cell in cells}
for r in range(40):
    for cell in (cells if r % 2 else list(cells)[::-1]):
        seconds[cell].append(run(cell))
for cell in cells:
    print(cell, f"median ms {1e3 * statistics.median(seconds[cell]):.3f} min {1e3 * min(seconds[cell]):.3f}")
if len(sys.argv) > 1:
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(200):
        run("dm")
    profile.disable()
    stats = pstats.Stats(profile)
    stats.sort_stats("cumtime").print_callees("draft_model.py:230")
    stats.print_callees("controller.py:.*__init__")
