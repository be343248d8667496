"""Per call, each Spec-Bench prompt of the categories (first turns, 128 new tokens) under each cell in turn (a drafter
and cost model per cell kept across calls, the order reversed every other prompt): steps, plain row-steps,
drafted/accepted tokens, process CPU seconds and the engine's draft/verify/other seconds; then the first cell's CPU
time over each cell's, with steps. A cell is `drafter[:key=value,...]`.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s64/percall.py qa,rag 2 none layer_skip \\
        layer_skip:schedule=own
"""
import sys
import time

sys.path.insert(0, "benchmarks/results/goodput/variant_ab_s52")
from _prompts import default_pair_and_prompts  # noqa: E402  (stop 52's helper)

import specdec  # noqa: E402
from specdec import registry  # noqa: E402
from specdec.costs import CostModel, device_key  # noqa: E402

categories, rounds, specs = sys.argv[1].split(","), int(sys.argv[2]), sys.argv[3:]
pair, calls = default_pair_and_prompts(categories)


def drafter_of(spec: str):
    name, _, given = spec.partition(":")
    options = {"model": pair.draft} if name == "draft_model" else {}
    for item in filter(None, given.split(",")):
        key, value = item.split("=")
        options[key] = value
    return registry.create("drafter", name, options)


cells = {spec: (drafter_of(spec), CostModel(device_key("cpu"))) for spec in specs}
for drafter, costs in cells.values():
    specdec.generate(pair.target, calls[0][1], max_new_tokens=16, drafter=drafter, cost_model=costs)
totals = {spec: [0.0, 0] for spec in specs}
for round_index in range(rounds):
    for index, (category, ids) in enumerate(calls):
        parts = {}
        for spec in specs if (index + round_index) % 2 == 0 else specs[::-1]:
            drafter, costs = cells[spec]
            started = time.process_time()
            stats = specdec.generate(pair.target, ids, max_new_tokens=128, drafter=drafter, cost_model=costs).stats
            seconds = time.process_time() - started
            totals[spec][0] += seconds
            totals[spec][1] += stats.steps
            parts[spec] = (f"{spec[:14]:14s} {stats.steps:4d} st {stats.no_draft_row_steps:4d} plain "
                           f"{stats.drafted_tokens:4d}/{stats.accepted_tokens:4d} {seconds:6.2f}s "
                           f"dt{stats.draft_time:.2f} vt{stats.verify_time:.2f} ot{stats.other_time:.2f}")
        print(f"r{round_index} {category[:6]:6s} {index:2d} len{len(ids):5d} | "
              + " | ".join(parts[spec] for spec in specs), flush=True)
base = totals[specs[0]][0]
print(" | ".join(f"{spec} {base / totals[spec][0]:.3f} ({totals[spec][1]})" for spec in specs))
