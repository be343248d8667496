"""Interleaved A/B on the default model with one drafter instance per cell kept across all its calls, as the bench
harness (`benchmarks/execute.py`) and a server keep them: stop 52's `variant_ab_s52/ab.py` builds a drafter per call,
which restarts what a drafter carries between calls (layer_skip's own rule carries its confidence threshold gamma).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s60/ab_kept.py qa,rag 2 none layer_skip \
        layer_skip:schedule=own

A cell is `drafter[:key=value,...][@option=value,...][+module.CONSTANT=value...]` (draft_model gets the bundled draft;
since stop 61, constants of `specdec` modules named after a `+` are patched for the cell's timed calls; since stop 62,
controller options after an `@`, e.g. `draft_model@chain_probe_share=0.01`). Each cell keeps a cost model
and a drafter of its own and is warmed up by one short call; every Spec-Bench prompt of the categories (first turns,
128 new tokens) runs under every cell in turn, the order reversed every other prompt. A figure is the first cell's process CPU time
over the cell's, per category and overall; batch steps in brackets."""
import importlib
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "variant_ab_s52"))
from _prompts import default_pair_and_prompts  # noqa: E402  (stop 52's helper)

import specdec  # noqa: E402
from specdec import registry  # noqa: E402
from specdec.costs import CostModel, device_key  # noqa: E402

cats = sys.argv[1].split(",")
pair, calls = default_pair_and_prompts(cats)


def drafter_of(spec):
    name, _, given = spec.split("+")[0].split("@")[0].partition(":")
    options = {"model": pair.draft} if name == "draft_model" else {}
    for item in filter(None, given.split(",")):
        key, value = item.split("=")
        options[key] = value
    return registry.create("drafter", name, options)


def controller_of(spec):
    """The cell's controller options (`drafter@option=value,...`), True (the defaults) without."""
    given = spec.split("+")[0].partition("@")[2]
    return {k: float(v) for k, v in (item.split("=") for item in filter(None, given.split(",")))} or True


cells = {spec: (drafter_of(spec), CostModel(device_key("cpu"))) for spec in sys.argv[3:]}
order = list(cells)
for spec in order:
    drafter, costs = cells[spec]
    specdec.generate(pair.target, calls[0][1], max_new_tokens=16, drafter=drafter, cost_model=costs,
                     controller=controller_of(spec))
totals = {(spec, cat): [0.0, 0] for spec in order for cat in cats}
for round_index in range(int(sys.argv[2])):
    for i, (cat, ids) in enumerate(calls):
        for spec in (order if (i + round_index) % 2 == 0 else order[::-1]):
            drafter, costs = cells[spec]
            with ExitStack() as stack:
                for patch in spec.split("+")[1:]:
                    key, value = patch.split("=")
                    module, constant = key.rsplit(".", 1)
                    stack.enter_context(mock.patch.object(importlib.import_module("specdec." + module), constant,
                                                          float(value) if "." in value else int(value)))
                started = time.process_time()
                out = specdec.generate(pair.target, ids, max_new_tokens=128, drafter=drafter, cost_model=costs,
                                       controller=controller_of(spec))
                totals[spec, cat][0] += time.process_time() - started
            totals[spec, cat][1] += out.stats.steps
reference = order[0]
for cat in cats + ["all"]:
    chosen = cats if cat == "all" else [cat]
    base = sum(totals[reference, c][0] for c in chosen)
    print(cat + ": " + " | ".join(f"{spec} {base / sum(totals[spec, c][0] for c in chosen):.3f} "
                                  f"({sum(totals[spec, c][1] for c in chosen)})" for spec in order), flush=True)
