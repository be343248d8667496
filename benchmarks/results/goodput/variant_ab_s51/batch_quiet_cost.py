"""Static batch of the batching benchmark's first B prompts (64 new tokens): the goodput controller's process time
(plan + cut + observe) per batch step with BATCH_QUIET_MAX=4 (the rule before stop 51) against 16, rounds
interleaved, each setting with a cost model of its own. Prints each timed call's plain reasons, then the means.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/variant_ab_s51/batch_quiet_cost.py 16 3 [drafter]
"""

from __future__ import annotations

import collections
import sys
import time

import torch
from specdec.benchmarks.batching import load_prompts

import specdec
from specdec import controller as goodput
from specdec.costs import CostModel, device_key
from specdec.target import context_length


def main(batch: int, rounds: int, drafter: str) -> None:
    torch.set_num_threads(1)
    pair = specdec.load_default()
    prompts = load_prompts(pair.tokenizer, context_length(pair.target), 16, 64, 384)[:batch]
    options = {"model": pair.draft} if drafter == "draft_model" else {}
    spent: dict[int | None, float] = collections.defaultdict(float)
    current: list[int | None] = [None]

    def timed(name: str) -> None:
        method = getattr(goodput.GoodputController, name)

        def wrapper(*args, **kwargs):
            started = time.process_time()
            result = method(*args, **kwargs)
            spent[current[0]] += time.process_time() - started
            return result

        setattr(goodput.GoodputController, name, wrapper)

    for name in ("plan", "cut", "observe"):
        timed(name)
    models = {most: CostModel(device_key("cpu")) for most in (16, 4)}
    steps: collections.Counter = collections.Counter()
    total: collections.Counter = collections.Counter()
    for round_index in range(rounds + 1):  # round 0: warm-up (each cost model measures its curves)
        for most in (16, 4) if round_index % 2 else (4, 16):
            goodput.BATCH_QUIET_MAX = most
            current[0] = most if round_index else None
            started = time.process_time()
            out = specdec.generate(pair.target, prompts, drafter=drafter, drafter_options=options, max_new_tokens=64,
                                   verifier="exact", eos_token_id=[], cost_model=models[most])
            if round_index:
                total[most] += time.process_time() - started
                steps[most] += out.stats.batch_steps
                controller = out.stats.controller
                print(f"BATCH_QUIET_MAX={most}: plain reasons {controller['plain_reasons']}, probes {controller['probes']}")
    for most in (4, 16):
        print(f"BATCH_QUIET_MAX={most}: controller {1e6 * spent[most] / steps[most]:.0f} us a step, "
              f"step {1e6 * total[most] / steps[most]:.0f} us")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "draft_model")
