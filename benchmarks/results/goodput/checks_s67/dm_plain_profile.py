"""Stop 67: what a draft_model call that decodes every step plainly costs over `none` on the second pair (the bundled
draft as target, /work/second/draft128/final as draft; see benchmarks/scripts/goodput/second_model_command.sh). Two
Spec-Bench prompts per category, 64 new tokens, one cost model per cell kept across calls, two warm-up rounds, then 3
rounds interleaved (order reversed every other round): per cell the summed process CPU seconds and the engine's
`other_time` (host work outside draft and verify). With an argument, one more draft_model round under cProfile, the
controller's and engine's functions by cumulative time.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s67/dm_plain_profile.py prof
"""
import cProfile, pstats, time, sys
import torch
torch.set_num_threads(1)
import specdec
from specdec import registry
from specdec.costs import CostModel, device_key
from transformers import AutoModelForCausalLM, AutoTokenizer
target = AutoModelForCausalLM.from_pretrained("/work/second/target", dtype=torch.float32)
draft = AutoModelForCausalLM.from_pretrained("/work/second/draft128/final", dtype=torch.float32)
tok = AutoTokenizer.from_pretrained("/work/second/target")
from specdec.benchmarks.datasets import PromptBuilder, load_dataset
from specdec.target import context_length
builder = PromptBuilder(tok, context_length(target), 64)
prompts = [builder.encode([], s.turns[0])[0] for s in load_dataset("spec_bench", per_category=2)]
cm = {n: CostModel(device_key("cpu")) for n in ("none", "dm")}
dm = registry.create("drafter", "draft_model", {"model": draft})
none = registry.create("drafter", "none", {})
def run(name, d):
    t = 0.0; other = 0.0
    for p in prompts:
        s = time.process_time()
        out = specdec.generate(target, p, max_new_tokens=64, drafter=d, cost_model=cm[name])
        t += time.process_time() - s; other += out.stats.other_time
    return t, other
for _ in range(2):
    run("none", none); run("dm", dm)
res = {"none": [0, 0], "dm": [0, 0]}
for r in range(3):
    for name, d in (("none", none), ("dm", dm)) if r % 2 == 0 else (("dm", dm), ("none", none)):
        t, o = run(name, d); res[name][0] += t; res[name][1] += o
print({k: [round(x, 3) for x in v] for k, v in res.items()})
if len(sys.argv) > 1:
    pr = cProfile.Profile(); pr.enable(); run("dm", dm); pr.disable()
    pstats.Stats(pr).sort_stats("cumtime").print_stats("controller|costs|engine|draft_model", 20)
