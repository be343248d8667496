"""Stop 73: the controller's work a step while draft_model is kept quiet on the second pair, by method (each wrapped
with a perf_counter, nested calls counted in both), `plan` split into steps of a quiet run and the others. One prompt,
64 new tokens, 5 warm-up calls, then 20 calls.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s73/plan_split.py
"""
import collections
import time

import torch

import specdec
import specdec.controller as controller_module
from specdec import registry
from specdec.api import load_model
from specdec.costs import CostModel, device_key

torch.set_num_threads(1)
spent: dict[str, list] = collections.defaultdict(lambda: [0, 0.0])
Controller = controller_module.GoodputController


def timed(name, original, key_of=None):
    def wrapper(self, *args, **kwargs):
        started = time.perf_counter()
        result = original(self, *args, **kwargs)
        key = name + ("" if key_of is None else key_of(self, result))
        spent[key][0] += 1
        spent[key][1] += time.perf_counter() - started
        return result
    return wrapper


Controller.plan = timed("plan", Controller.plan,
                        lambda ctl, plan: ".run" if ctl._run is not None and plan is ctl._run.plan else ".other")
for method in ("observe", "_learn", "_record", "cut", "_run_goes_on", "__init__", "finish"):
    setattr(Controller, method, timed(method.strip("_"), getattr(Controller, method)))
target, tokenizer = load_model("/work/second/target")
drafter = registry.create("drafter", "draft_model", {"model": "/work/second/draft128/final"})
costs = CostModel(device_key("cpu"))
ids = tokenizer("Write a short story about a robot who learns to paint.")["input_ids"]
for _ in range(5):
    specdec.generate(target, [ids], tokenizer=tokenizer, drafter=drafter, max_new_tokens=64, cost_model=costs)
spent.clear()
steps = 0
for _ in range(20):
    out = specdec.generate(target, [ids], tokenizer=tokenizer, drafter=drafter, max_new_tokens=64, cost_model=costs)
    steps += out.stats.steps
for key, (calls, seconds) in sorted(spent.items()):
    print(f"{key:16s} n {calls:5d} each {seconds / calls * 1e6:8.2f} us  per step {seconds / steps * 1e6:6.2f} us")
