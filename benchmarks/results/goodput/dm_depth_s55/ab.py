"""Interleaved A/B of controller variants on the default model (stop 52's scratch script, kept with its results).

    OMP_NUM_THREADS=1 .venv/bin/python ab.py mt_bench,translation 3 draft_model draft_model:schedule=heuristic \
        "draft_model@probe_share=0.03" "draft_model+acceptance.REGIME_WEIGHT=1000000000.0"

A cell is `drafter[:key=value,...][@controller_option=value,...][+module.CONSTANT=value...]`: drafter options (draft_model
gets the bundled draft), `ControllerOptions`, and constants of any `specdec` module patched for the cell's calls. Each
cell keeps a cost model of its own and is warmed up once, without its patches (its verify curves are measured outside
the timed calls);
every Spec-Bench prompt of the categories (first turns, 128 new tokens) runs under every cell in turn, the order
reversed every other prompt. A figure is the first cell's process CPU time over the cell's, per category and overall;
batch steps in brackets. Differs from `benchmarks/scripts/goodput/variant_ab.py` in taking controller options and any
module's constants, and in one cost model per cell instead of one model copy per cell."""
import importlib
import sys
import time
from contextlib import ExitStack
from unittest import mock

from _prompts import default_pair_and_prompts

import specdec
from specdec.costs import CostModel, device_key

cats = sys.argv[1].split(",")
pair, calls = default_pair_and_prompts(cats)
tgt = pair.target
def parse(spec):
    parts = spec.split("+")
    head, patches = parts[0], []
    for p in parts[1:]:
        k, v = p.split("=")
        mod, const = k.rsplit(".", 1)
        patches.append((importlib.import_module("specdec." + mod), const, float(v) if "." in v else int(v)))
    name, _, ctl = head.partition("@")
    drafter, _, dopts = name.partition(":")
    opts = {"model": pair.draft} if drafter == "draft_model" else {}
    for kv in filter(None, dopts.split(",")):
        k, v = kv.split("=")
        opts[k] = v
    ctlopts = {}
    for kv in filter(None, ctl.split(",")):
        k, v = kv.split("=")
        ctlopts[k] = float(v) if "." in v else int(v)
    return drafter, opts, ctlopts, patches
cells = {spec: parse(spec) for spec in sys.argv[3:]}
cms = {c: CostModel(device_key("cpu")) for c in cells}
tot = {(c, cat): [0.0, 0] for c in cells for cat in cats}
order = list(cells)
for c in order:  # warm-up: each cell's cost model measures its curves outside the timed calls
    drafter, opts, ctlopts, patches = cells[c]
    specdec.generate(tgt, calls[0][1], max_new_tokens=16, cost_model=cms[c], drafter=drafter, drafter_options=opts,
                     controller=ctlopts or True)
for rnd in range(int(sys.argv[2])):
    for i, (cat, ids) in enumerate(calls):
        seq = order if (i + rnd) % 2 == 0 else order[::-1]
        for c in seq:
            drafter, opts, ctlopts, patches = cells[c]
            with ExitStack() as stack:
                for mod, const, v in patches:
                    stack.enter_context(mock.patch.object(mod, const, v))
                t0 = time.process_time()
                out = specdec.generate(tgt, ids, max_new_tokens=128, cost_model=cms[c], drafter=drafter,
                                       drafter_options=opts, controller=ctlopts or True)
                dt = time.process_time() - t0
            tot[c, cat][0] += dt
            tot[c, cat][1] += out.stats.steps
ref = order[0]
for cat in cats + ["all"]:
    sel = cats if cat == "all" else [cat]
    r = sum(tot[ref, x][0] for x in sel)
    print(cat + ": " + " | ".join(f"{c} {r / sum(tot[c, x][0] for x in sel):.3f} ({sum(tot[c, x][1] for x in sel)})" for c in order), flush=True)
