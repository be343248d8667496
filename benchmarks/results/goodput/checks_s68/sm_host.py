"""The second pair (`/work/second/target`, see `benchmarks/scripts/goodput/second_model_command.sh`): the cells given,
side by side on the first turns of 2 Spec-Bench prompts per category (64 new tokens), after two warm-up calls each,
the order reversed every other prompt; per cell its process CPU seconds, steps, the first cell's seconds over its
own, and with --wrap the wall milliseconds a step of the controller's plan, propose, cut and observe and of the
engine's parts (perf_counter around each).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s68/sm_host.py \\
        anpd anpd:schedule=constant none --wrap --rounds=3
"""
import collections
import sys
import time

import torch
from specdec.benchmarks.datasets import PromptBuilder, load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

import specdec
from specdec import controller as goodput
from specdec import costs, engine, registry
from specdec.target import context_length

torch.set_num_threads(1)
target = AutoModelForCausalLM.from_pretrained("/work/second/target", dtype=torch.float32)
builder = PromptBuilder(AutoTokenizer.from_pretrained("/work/second/target"), context_length(target), 64)
calls = [(s.category, builder.encode([], s.turns[0])[0]) for s in load_dataset("spec_bench", per_category=2)]
spent = collections.Counter()


def timed(cls, method: str, label: str) -> None:
    real = getattr(cls, method)

    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        result = real(*args, **kwargs)
        spent[label] += time.perf_counter() - started
        return result

    setattr(cls, method, wrapper)


if "--wrap" in sys.argv:
    for method in ("plan", "cut", "observe", "propose"):
        timed(goodput.GoodputController, method, "ctl." + method)
    for method in ("_inputs", "_read_back", "_commit", "_step"):
        timed(engine.SpeculativeEngine, method, "eng." + method)
specs = [arg for arg in sys.argv[1:] if not arg.startswith("--")]
rounds = int(dict(arg.split("=") for arg in sys.argv if arg.startswith("--rounds=")).get("--rounds", "3"))
cells = {}
for spec in specs:
    name, _, given = spec.partition(":")
    cells[spec] = (registry.create("drafter", name, dict(i.split("=") for i in filter(None, given.split(",")))),
                   costs.CostModel(costs.device_key("cpu")))
for drafter, model in cells.values():
    for _ in range(2):
        specdec.generate(target, calls[0][1], max_new_tokens=64, drafter=drafter, cost_model=model)
totals = {spec: [0.0, 0] for spec in specs}
parts = {spec: collections.Counter() for spec in specs}
for round_index in range(rounds):
    for i, (_, ids) in enumerate(calls):
        for spec in specs if (i + round_index) % 2 == 0 else specs[::-1]:
            drafter, model = cells[spec]
            spent.clear()
            started = time.process_time()
            out = specdec.generate(target, ids, max_new_tokens=64, drafter=drafter, cost_model=model)
            totals[spec][0] += time.process_time() - started
            totals[spec][1] += out.stats.steps
            parts[spec].update(spent)
base = totals[specs[0]][0]
for spec in specs:
    seconds, steps = totals[spec]
    print(f"{spec}: cpu {seconds:.3f} s, steps {steps}, {specs[0]}/cell {base / seconds:.3f}, "
          f"ms/step {1e3 * seconds / steps:.3f}")
    for key, value in sorted(parts[spec].items()):
        print(f"    {key:16s} {1e3 * value / steps:.4f} ms/step")
