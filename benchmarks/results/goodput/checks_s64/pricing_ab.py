"""draft_model in one static batch of the batching benchmark's 16 prompts (64 new tokens), under the first-probe rule
before stop 64 (FIRST_PROBE_SHORT_SHARE ~0: a costly drafter's first probe after FIRST_PROBE_STEPS) and after it
(0.1), twice each in turn, a fresh cost model each warmed by two calls: the controller's `plan` seconds (cProfile,
cumulative) of the third call and its plain row-steps.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s64/pricing_ab.py
"""
import cProfile
import pstats
from unittest import mock

import torch
from specdec.benchmarks.batching import load_prompts

import specdec
from specdec import controller as goodput
from specdec.costs import CostModel, device_key
from specdec.target import context_length

torch.set_num_threads(1)
pair = specdec.load_default()
prompts = load_prompts(pair.tokenizer, context_length(pair.target), 16, 64, 384)


def run(costs: CostModel):
    return specdec.generate(pair.target, prompts, drafter="draft_model", drafter_options={"model": pair.draft},
                            max_new_tokens=64, verifier="exact", eos_token_id=[], cost_model=costs).stats


for share in (1e-9, 0.1, 1e-9, 0.1):
    costs = CostModel(device_key("cpu"))
    with mock.patch.object(goodput, "FIRST_PROBE_SHORT_SHARE", share):
        run(costs)
        run(costs)
        profile = cProfile.Profile()
        profile.enable()
        stats = run(costs)
        profile.disable()
    plan = sum(entry[3] for (path, _, function), entry in pstats.Stats(profile).stats.items()
               if function == "plan" and path.endswith("controller.py"))
    print(f"FIRST_PROBE_SHORT_SHARE {share:g}: plan {plan * 1000:.0f} ms, plain {stats.no_draft_row_steps}/{stats.steps}")
