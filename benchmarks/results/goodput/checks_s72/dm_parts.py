"""Stop 72: draft_model under the controller against none on the second pair, host work a step by method (each
wrapped with a perf_counter), on the first turns of the quick preset's translation, qa and math prompts (6 calls of 64
new tokens a round), 2 warm-up rounds, then N rounds alternating the cells' order; each cell keeps its drafter and
cost model. Per cell: process CPU per round (mean, min) and ms a step per wrapped method.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s72/dm_parts.py 8
"""
import collections
import functools
import statistics
import sys
import time

import torch
from specdec.benchmarks.datasets import PromptBuilder, load_dataset

import specdec
from specdec import registry
from specdec.api import load_model
from specdec.controller import GoodputController
from specdec.costs import CostModel, device_key
from specdec.engine import SpeculativeEngine
from specdec.runner import TargetRunner
from specdec.target import context_length

torch.set_num_threads(1)
model, tokenizer = load_model("/work/second/target")
builder = PromptBuilder(tokenizer, context_length(model), 64)
samples = [s for s in load_dataset("spec_bench", None, None, 2) if s.category in ("qa", "math_reasoning", "translation")]
prompts = [builder.encode([], s.turns[0])[0] for s in samples]
acc: collections.Counter = collections.Counter()


def wrap(cls, name):
    f = getattr(cls, name)

    @functools.wraps(f)
    def g(*a, **k):
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            acc[name] += time.perf_counter() - t
    setattr(cls, name, g)


for n in ("plan", "cut", "observe", "propose", "_settle", "finish", "stats"):
    wrap(GoodputController, n)
for n in ("_step", "_controller", "_measure", "_prefilled", "_drafter_call", "_commit", "_read_back", "_inputs"):
    wrap(SpeculativeEngine, n)
wrap(TargetRunner, "verify_forward")
cells = {"none": (registry.create("drafter", "none", {}), CostModel(device_key("cpu"))),
         "dm": (registry.create("drafter", "draft_model", {"model": "/work/second/draft128/final"}),
                CostModel(device_key("cpu")))}


def run(cell: str) -> tuple[float, int]:
    drafter, costs = cells[cell]
    steps, started = 0, time.process_time()
    for p in prompts:
        out = specdec.generate(model, [p], tokenizer=tokenizer, drafter=drafter, verifier="auto", max_new_tokens=64,
                               cost_model=costs)
        steps += out.stats.steps
    return time.process_time() - started, steps


for cell in cells:
    run(cell)
    run(cell)
rounds = int(sys.argv[1])
totals: dict[str, list[float]] = collections.defaultdict(list)
parts: dict[str, collections.Counter] = {}
steps = 0
for r in range(rounds):
    for cell in (cells if r % 2 else list(cells)[::-1]):
        acc.clear()
        seconds, steps = run(cell)
        totals[cell].append(seconds)
        parts.setdefault(cell, collections.Counter()).update({k: v / steps for k, v in acc.items()})
for cell in cells:
    print(cell, f"cpu per round ms: mean {1e3 * statistics.mean(totals[cell]):.1f} min {1e3 * min(totals[cell]):.1f}",
          "steps", steps)
    for k, v in parts[cell].most_common():
        print(f"   {k:16s} {1e3 * v / rounds:.4f} ms/step")
