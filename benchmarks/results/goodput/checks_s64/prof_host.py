"""Per cell at a static batch: cProfile of one call after warm-ups; CPU seconds in torch kernels vs Python host
work, and the cumulative time of specdec's controller/drafter/engine functions."""
import cProfile, pstats, sys, time
import torch
import specdec
from specdec.benchmarks.batching import load_prompts
from specdec.costs import CostModel, device_key
from specdec.target import context_length, model_device
torch.set_num_threads(1)
pair = specdec.load_default()
prompts = load_prompts(pair.tokenizer, context_length(pair.target), 16, 64, 384)
B = int(sys.argv[1]); cells = sys.argv[2:]
models = {c: CostModel(device_key(model_device(pair.target))) for c in cells}
def go(cell, prof=None):
    name, _, o = cell.partition(":")
    opts = dict(kv.split("=") for kv in o.split(",")) if o else {}
    if name == "draft_model": opts["model"] = pair.draft
    if prof: prof.enable()
    out = specdec.generate(pair.target, prompts[:B], drafter=name, drafter_options=opts, max_new_tokens=64,
                           verifier="exact", eos_token_id=[], cost_model=models[cell])
    if prof: prof.disable()
    return out.stats
for c in cells: go(c); go(c)
for c in cells:
    p = cProfile.Profile(); st = go(c, p)
    s = pstats.Stats(p); total = s.total_tt
    kernels = sum(v[2] for k, v in s.stats.items() if k[0] == "~" )
    spec = {}
    for (f, l, fn), v in s.stats.items():
        if "/specdec/" in f and ("controller" in f or "costs" in f or "acceptance" in f or "chain_exit" in f):
            spec[f.split('/')[-1] + ":" + fn] = v[3]
    top = sorted(spec.items(), key=lambda kv: -kv[1])[:6]
    print(f"== {c}: total {total:.3f}s builtins {kernels:.3f}s python {total - kernels:.3f}s steps {st.batch_steps} rowsteps {st.steps} plain {st.no_draft_row_steps}")
    print("   " + " | ".join(f"{k} {v*1000:.0f}ms" for k, v in top))
