"""Stop 73: host time a step by part, `none` against draft_model kept quiet by the controller on the second pair
(each part wrapped with a perf_counter). One prompt, 64 new tokens, 5 warm-up calls a cell, then N rounds alternating
the cells' order; each cell keeps its drafter and cost model. Per cell: us a step per wrapped part, and the step's
host work (the step less the verify forward).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s73/parts.py 40
"""
import collections
import functools
import sys
import time

import specdec.drafters.draft_model as draft_model_module
import specdec.drafters.none as none_module
import torch

import specdec
import specdec.controller as controller_module
import specdec.engine as engine_module
import specdec.plugins as plugins_module
import specdec.runner as runner_module
from specdec import registry
from specdec.api import load_model
from specdec.costs import CostModel, device_key

torch.set_num_threads(1)
spent: collections.Counter = collections.Counter()


def wrap(owner: type, attr: str) -> None:
    original = getattr(owner, attr)
    key = f"{owner.__name__}.{attr}"

    @functools.wraps(original)
    def timed(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent[key] += time.perf_counter() - started

    setattr(owner, attr, timed)


for owner, attr in [(engine_module.SpeculativeEngine, "_step"), (controller_module.GoodputController, "plan"),
                    (controller_module.GoodputController, "cut"), (controller_module.GoodputController, "observe"),
                    (plugins_module.DecodeState, "set_draft_budget"), (draft_model_module.DraftModelDrafter, "observe"),
                    (none_module.NoDrafter, "observe"), (runner_module.TargetRunner, "verify_forward")]:
    wrap(owner, attr)
target, tokenizer = load_model("/work/second/target")
cells = {"none": (registry.create("drafter", "none", {}), CostModel(device_key("cpu"))),
         "dm": (registry.create("drafter", "draft_model", {"model": "/work/second/draft128/final"}),
                CostModel(device_key("cpu")))}
ids = tokenizer("Write a short story about a robot who learns to paint.")["input_ids"]


def call(name: str) -> specdec.GenerationOutput:
    drafter, costs = cells[name]
    return specdec.generate(target, [ids], tokenizer=tokenizer, drafter=drafter, max_new_tokens=64, cost_model=costs)


for name in cells:
    for _ in range(5):
        call(name)
totals = {name: collections.Counter() for name in cells}
steps: collections.Counter = collections.Counter()
for index in range(int(sys.argv[1])):
    for name in list(cells) if index % 2 else list(cells)[::-1]:
        spent.clear()
        out = call(name)
        totals[name].update(spent)
        steps[name] += out.stats.steps
for name in cells:
    per_step = {key: round(seconds / steps[name] * 1e6, 2) for key, seconds in sorted(totals[name].items())}
    host = (totals[name]["SpeculativeEngine._step"] - totals[name]["TargetRunner.verify_forward"]) / steps[name]
    print(name, per_step, "step less forward (us)", round(host * 1e6, 2))
