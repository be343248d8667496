"""Stop 74: anpd in static unpadded batches of B (the batching benchmark's 16 prompts, 64 new tokens): the host
time of the controller's and the drafter's calls, wrapped with perf_counter, over two rounds after two warm-up
rounds; plan and observe split by whether the plan was plain (no row drafts or looks).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s74/hooks.py 8
"""
import collections
import sys
import time

import torch
from specdec.benchmarks.batching import load_prompts
from specdec.drafters.anpd import AnpdDrafter

import specdec
from specdec import controller as ctl
from specdec.costs import CostModel, device_key

torch.set_num_threads(1)
batch = int(sys.argv[1])
pair = specdec.load_default()
target, tokenizer = pair.target, pair.tokenizer
prompts = load_prompts(tokenizer, target.config.max_position_embeddings, 16, 64, 384)
batches = [prompts[i:i + batch] for i in range(0, len(prompts), batch)]
costs = CostModel(device_key("cpu"))
totals: dict[str, list] = collections.defaultdict(lambda: [0, 0.0])
timing = [False]


def wrap(cls, name, key=None):
    original = getattr(cls, name)

    def timed(*args, **kwargs):
        started = time.perf_counter()
        result = original(*args, **kwargs)
        if timing[0]:
            entry = totals[key(args, result) if key else name]
            entry[0] += 1
            entry[1] += time.perf_counter() - started
        return result
    setattr(cls, name, timed)


wrap(ctl.GoodputController, "plan", lambda a, r: "plan " + ("plain" if r.plain else "drafts"))
wrap(ctl.GoodputController, "observe", lambda a, r: "observe " + ("plain" if a[1].plain else "drafts"))
for name in ("cut", "_weights", "_step_parts", "_record", "_judge_looks", "_observe_plain", "forget"):
    wrap(ctl.GoodputController, name)
wrap(AnpdDrafter, "observe", lambda a, r: "anpd.observe")
wrap(AnpdDrafter, "propose", lambda a, r: "anpd.propose")
for index in range(4):
    timing[0] = index >= 2
    for rows in batches:
        specdec.generate(target, rows, drafter="anpd", max_new_tokens=64, eos_token_id=[], verifier="exact",
                         cost_model=costs)
for key, (count, seconds) in sorted(totals.items()):
    print(f"{key:20s} n {count:5d} mean {seconds / count * 1e6:7.1f} us total {seconds * 1e3:7.1f} ms")
