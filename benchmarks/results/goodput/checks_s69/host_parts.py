"""Stop 69: the controller's host work a step, unprofiled, by part: anpd under the controller on the second pair (12
Spec-Bench prompts, 64 new tokens, one cost model kept across calls, 2 warm-up passes, then 3 passes timed), each
method wrapped with a perf_counter. `propose` includes anpd's own lookup (which its constant rule does too);
`_record` includes `_learn`, which includes the cost model's `observe_*`; `observe` includes `_record` and
`_observe_rows`.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s69/host_parts.py
"""
import collections
import functools
import time

import torch
from specdec.benchmarks.datasets import PromptBuilder, load_dataset

import specdec
from specdec import costs as costs_mod
from specdec.api import load_model
from specdec.controller import GoodputController
from specdec.costs import CostModel, device_key
from specdec.target import context_length

torch.set_num_threads(1)
model, tokenizer = load_model("/work/second/target")
builder = PromptBuilder(tokenizer, context_length(model), 64)
prompts = [builder.encode([], s.turns[0])[0] for s in load_dataset("spec_bench", None, None, 2)]
cm = CostModel(device_key("cpu"))
acc = collections.Counter()
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
for n in ("plan", "cut", "observe", "propose", "_record", "_observe_rows", "_learn", "_judge_looks"):
    wrap(GoodputController, n)
for n in ("observe_verify", "observe_overhead", "observe_draft"):
    if hasattr(costs_mod.CostModel, n):
        wrap(costs_mod.CostModel, n)
def run():
    steps = 0
    for p in prompts:
        out = specdec.generate(model, p, drafter="anpd", verifier="exact", max_new_tokens=64, cost_model=cm)
        steps += out.stats.steps
    return steps
run()
run()
acc.clear()
steps = run() + run() + run()
for k, v in acc.most_common():
    print(f"{k:18s} {1e3 * v / steps:.4f} ms a step")
