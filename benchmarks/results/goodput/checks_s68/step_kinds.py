"""Per kind of step (auto: anpd as the row's pick, anpd's look beating the costly plan ("free-win:anpd"), layer_skip,
draft_model, plain), the steps, tokens committed and process CPU seconds of the engine's `_step`, for the cells
given, run in turn on every first turn of the categories (128 new tokens) after three warm-up calls. With EVEN=1,
auto's members split a row's probe budget evenly (the rule before stop 68).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s68/step_kinds.py rag 2 layer_skip auto
"""
import collections
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "variant_ab_s52"))
from _prompts import default_pair_and_prompts  # noqa: E402

import specdec  # noqa: E402
from specdec import controller as goodput  # noqa: E402
from specdec import costs, engine, registry  # noqa: E402

categories, rounds, specs = sys.argv[1].split(","), int(sys.argv[2]), sys.argv[3:]
if os.environ.get("EVEN") == "1":
    goodput.GoodputController._probe_weight = lambda self, name: 1.0 / len(self.order)
pair, calls = default_pair_and_prompts(categories)
kind = ["plain"]
cell = [""]
totals: dict[tuple[str, str], list[float]] = collections.defaultdict(lambda: [0, 0, 0.0])
real_propose, real_step = goodput.GoodputController.propose, engine.SpeculativeEngine._step


def propose(self, drafter, state, plan):
    look = plan.look[0]
    draft = real_propose(self, drafter, state, plan)
    kind[0] = ("free-win:" if look is not None and plan.choice[0] == look else "") + str(plan.choice[0])
    return draft


def step(self, state, *args, **kwargs):
    kind[0] = "plain"  # (no propose: a plain step)
    started, before = time.process_time(), sum(len(s) for s in state.sequences)
    finished = real_step(self, state, *args, **kwargs)
    entry = totals[cell[0], kind[0]]
    entry[0] += 1
    entry[1] += sum(len(s) for s in state.sequences) - before
    entry[2] += time.process_time() - started
    return finished


goodput.GoodputController.propose, engine.SpeculativeEngine._step = propose, step
cells = {}
for spec in specs:
    name, _, given = spec.partition(":")
    cells[spec] = (registry.create("drafter", name, dict(i.split("=") for i in filter(None, given.split(",")))),
                   costs.CostModel(costs.device_key("cpu")))
for spec, (drafter, model) in cells.items():
    cell[0] = spec
    for _ in range(3):
        specdec.generate(pair.target, calls[0][1], max_new_tokens=128, drafter=drafter, cost_model=model)
totals.clear()
seconds = collections.Counter()
for round_index in range(rounds):
    for i, (_, ids) in enumerate(calls):
        for spec in specs if (i + round_index) % 2 == 0 else specs[::-1]:
            (drafter, model), cell[0] = cells[spec], spec
            started = time.process_time()
            specdec.generate(pair.target, ids, max_new_tokens=128, drafter=drafter, cost_model=model)
            seconds[spec] += time.process_time() - started
for (spec, what), (steps, tokens, spent) in sorted(totals.items()):
    print(f"{spec:28s} {what:22s} steps {steps:5d} tokens {tokens:6d} ({tokens / steps:.2f}/step) "
          f"{1e3 * spent / steps:7.2f} ms/step  {tokens / spent / 1e3:.4f} tok/ms  {spent:.2f} s")
for spec in specs:
    print(spec, "calls' CPU seconds", round(seconds[spec], 2))
