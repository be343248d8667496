"""Static batches of B with draft_model, one cost model across calls (groups of the batching benchmark's prompts in
turn): per call its batch steps, probes and plain reasons, and for the rows priced, each probe wait `_probe_wait`
gave (in steps; a call has 64), with the row's first estimates, its prepare (tokens the draft must prefill) and lag.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s63/probe_dbg.py 4 6
"""
import sys

import torch
from specdec.benchmarks.batching import load_prompts

import specdec
from specdec import controller as goodput
from specdec.costs import CostModel, device_key

torch.set_num_threads(1)
pair = specdec.load_default()
prompts = load_prompts(pair.tokenizer, pair.target.config.max_position_embeddings, 16, 64, 384)
batch, calls = int(sys.argv[1]), int(sys.argv[2])
model = CostModel(device_key("cpu"))
probe_wait = goodput.GoodputController._probe_wait
log = []


def logged_wait(self, option, instead=0.0, batch=None, lag=None, costly=True):
    wait = probe_wait(self, option, instead, batch, lag, costly)
    items = option[0]
    log.append((wait, items.probs[:3], items.prepare, items.lag, option[1], batch is not None))
    return wait


goodput.GoodputController._probe_wait = logged_wait
for call in range(calls):
    start = (call * batch) % len(prompts)
    log.clear()
    out = specdec.generate(pair.target, prompts[start:start + batch], drafter="draft_model",
                           drafter_options={"model": pair.draft}, max_new_tokens=64, verifier="exact",
                           eos_token_id=[], cost_model=model)
    counts = out.stats.controller
    print("call", call, "group", start // batch, "steps", out.stats.batch_steps, "probes", counts["probes"],
          counts["plain_reasons"])
    for wait, probs, prepare, lag, keep, in_batch in log[:6] + log[-3:]:
        print(f"   wait {wait:7.1f} p {[round(p, 2) for p in probs]} prep {prepare:.0f} lag {lag:.0f} keep {keep} "
              f"batch {in_batch}")
