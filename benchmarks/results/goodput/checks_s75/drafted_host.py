"""Stop 75: the host time of each piece of a decoding step, in steps where some row drafted and in plain ones, for
draft_model under the controller in static unpadded batches of B (the batching benchmark's 16 prompts, 64 new tokens,
exact verifier, one pass with a fresh cost model: the pass where it still drafts). Wrapped with perf_counter.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s75/drafted_host.py 8
"""

import collections
import sys
import time

import torch
from specdec.benchmarks.batching import load_prompts
from specdec.drafters.draft_model import DraftModelDrafter

import specdec
import specdec.costs as costs
from specdec import controller as ctl
from specdec import engine as eng

torch.set_num_threads(1)
B = int(sys.argv[1])
pair = specdec.load_default()
target, tok = pair.target, pair.tokenizer
prompts = load_prompts(tok, target.config.max_position_embeddings, 16, 64, 384)
batches = [prompts[i : i + B] for i in range(0, 16, B)]
totals = collections.defaultdict(lambda: [0, 0.0])
current = {"drafted": False}


def wrap(cls, name, label=None, sets=None):
    original = getattr(cls, name)

    def timed(*a, **k):
        s = time.perf_counter()
        r = original(*a, **k)
        d = time.perf_counter() - s
        if sets is not None:
            current["drafted"] = sets(a, r)
        key = (label or name) + (" [drafted]" if current["drafted"] else " [plain]")
        totals[key][0] += 1
        totals[key][1] += d
        return r

    setattr(cls, name, timed)


wrap(ctl.GoodputController, "plan", sets=lambda a, r: not r.plain)
for n in ("cut", "observe", "_solve", "_weights", "_observe_rows", "_record", "_judge_looks", "propose"):
    wrap(ctl.GoodputController, n)
for n in ("_read_back", "_commit", "_inputs"):
    wrap(eng.SpeculativeEngine, n)
wrap(DraftModelDrafter, "observe", "dm.observe")
import specdec.verifiers.exact as ve  # noqa

for name in dir(ve):
    obj = getattr(ve, name)
    if isinstance(obj, type) and hasattr(obj, "verify") and obj.__module__ == ve.__name__:
        wrap(obj, "verify", "verifier.verify")
cm = costs.CostModel(costs.device_key("cpu"))
for b in batches:
    specdec.generate(
        target,
        b,
        drafter="draft_model",
        drafter_options={"model": pair.draft},
        max_new_tokens=64,
        eos_token_id=[],
        verifier="exact",
        cost_model=cm,
    )
for key, (n, s) in sorted(totals.items()):
    print(f"{key:34s} n {n:5d} mean {s / n * 1e6:8.1f} us")
