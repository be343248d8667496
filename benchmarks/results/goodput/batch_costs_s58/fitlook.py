"""One cost model through B=1 (16 prompts) and B=2 static (the batching benchmark's order, draft_model under the
controller): the draft fit, and the K-token draft it prices at B=1, 2, 4, 8 against what constant-K drafts of that
size took (their draft time over their batch steps, a fresh cost model each). From the repository root:

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/batch_costs_s58/fitlook.py [old]

`old`: the fit with one ridge for every feature (as before b6770ba)."""
import sys
from unittest import mock

import torch
from specdec.benchmarks.batching import load_prompts

import specdec
import specdec.costs
from specdec.costs import CostModel, device_key, draft_features
from specdec.target import context_length

torch.set_num_threads(1)
pair = specdec.load_default()
prompts = load_prompts(pair.tokenizer, context_length(pair.target), 16, 64, 384)
if "old" in sys.argv[1:]:
    mock.patch.object(specdec.costs, "DRAFT_RIDGE", 1e-4).start()
cm = CostModel(device_key("cpu"))
dm = {"model": pair.draft}
def run(group, opts, model=cm):
    return specdec.generate(pair.target, group, drafter="draft_model", drafter_options=opts, max_new_tokens=64,
                            verifier="exact", eos_token_id=[], cost_model=model)
for B in (1, 2):
    steps = drafted = 0
    for i in range(0, 16, B):
        stats = run(prompts[i:i + B], dm).stats
        steps, drafted = steps + stats.batch_steps, drafted + stats.steps - stats.no_draft_row_steps
    print(f"B={B} under the controller: {steps} batch steps, {drafted} drafted row-steps")
    fit = cm.live.drafters["draft_model"]
    print(f"after B={B}: fit (ms)", [round(w * 1000, 3) for w in fit.weights], "samples", fit.samples)
for B in (1, 2, 4, 8):
    for K in (1, 3):
        priced = cm.live.drafters["draft_model"].predict(draft_features(K, B * K, 0, 250))
        other = CostModel(device_key("cpu"))
        st = run(prompts[:B], {**dm, "schedule": "constant", "k": K}, other).stats
        drafted = st.batch_steps - 1
        print(f"B={B} K={K}: priced {priced*1000:.2f} ms, measured {st.draft_time / max(1, st.batch_steps) * 1000:.2f} ms per step")
