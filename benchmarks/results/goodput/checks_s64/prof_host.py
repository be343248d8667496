"""Static batch of B of the batching benchmark's prompts (64 new tokens): per cell, cProfile of one call after two
warm-ups, the call's profiled seconds split into built-ins (torch kernels and other C calls) and Python, and the
cumulative seconds of the controller's, cost model's, estimates' and exit's busiest functions.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s64/prof_host.py 16 none draft_model anpd
"""
import cProfile
import pstats
import sys

import torch
from specdec.benchmarks.batching import load_prompts

import specdec
from specdec.costs import CostModel, device_key
from specdec.target import context_length, model_device

OWN = ("controller", "costs", "acceptance", "chain_exit")

torch.set_num_threads(1)
pair = specdec.load_default()
prompts = load_prompts(pair.tokenizer, context_length(pair.target), 16, 64, 384)
batch, cells = int(sys.argv[1]), sys.argv[2:]
models = {cell: CostModel(device_key(model_device(pair.target))) for cell in cells}


def run(cell: str, profile: cProfile.Profile | None = None):
    name, _, given = cell.partition(":")
    options = dict(item.split("=") for item in given.split(",")) if given else {}
    if name == "draft_model":
        options["model"] = pair.draft
    if profile is not None:
        profile.enable()
    out = specdec.generate(pair.target, prompts[:batch], drafter=name, drafter_options=options, max_new_tokens=64,
                           verifier="exact", eos_token_id=[], cost_model=models[cell])
    if profile is not None:
        profile.disable()
    return out.stats


for cell in cells:
    run(cell)
    run(cell)
for cell in cells:
    profile = cProfile.Profile()
    stats = run(cell, profile)
    table = pstats.Stats(profile)
    builtins = sum(entry[2] for (path, _, _), entry in table.stats.items() if path == "~")
    own = {f"{path.split('/')[-1]}:{function}": entry[3] for (path, _, function), entry in table.stats.items()
           if "/specdec/" in path and any(part in path for part in OWN)}
    busiest = sorted(own.items(), key=lambda item: -item[1])[:6]
    print(f"== {cell}: total {table.total_tt:.3f}s builtins {builtins:.3f}s python {table.total_tt - builtins:.3f}s "
          f"steps {stats.batch_steps} rowsteps {stats.steps} plain {stats.no_draft_row_steps}")
    print("   " + " | ".join(f"{key} {seconds * 1000:.0f}ms" for key, seconds in busiest))
