"""Stop 69: where anpd's host work goes under the controller on the second pair (the bundled draft as target): 12
Spec-Bench prompts, 64 new tokens, 2 warm-up passes, then one pass under cProfile (by own time) and 3 interleaved
timed passes of goodput against the constant rule (process CPU seconds, steps)."""
import cProfile
import pstats
import sys
import time

import torch
from specdec.benchmarks.datasets import PromptBuilder, load_dataset

import specdec
from specdec.api import load_model
from specdec.costs import CostModel, device_key
from specdec.target import context_length

torch.set_num_threads(1)
model, tokenizer = load_model(sys.argv[1] if len(sys.argv) > 1 else "/work/second/target")
builder = PromptBuilder(tokenizer, context_length(model), 64)
prompts = [builder.encode([], s.turns[0])[0] for s in load_dataset("spec_bench", None, None, 2)]
costs = {s: CostModel(device_key("cpu")) for s in ("goodput", "constant")}


def run(schedule: str) -> tuple[float, int, float, float, float]:
    cpu = steps = 0
    verify = other = draft = 0.0
    for prompt in prompts:
        started = time.process_time()
        out = specdec.generate(model, prompt, drafter="anpd", verifier="exact", max_new_tokens=64,
                               drafter_options={"schedule": schedule}, cost_model=costs[schedule])
        cpu += time.process_time() - started
        steps += out.stats.steps
        verify += out.stats.verify_time
        other += out.stats.other_time
        draft += out.stats.draft_time
    return cpu, steps, verify, other, draft


for _ in range(2):
    run("goodput")
    run("constant")
totals = {s: [0.0] * 5 for s in costs}
for r in range(3):
    for s in ("goodput", "constant") if r % 2 == 0 else ("constant", "goodput"):
        for i, v in enumerate(run(s)):
            totals[s][i] += v
for s, (cpu, steps, verify, other, draft) in totals.items():
    print(f"{s:9s} cpu {cpu:6.3f} s steps {int(steps)} per step: cpu {1e3 * cpu / steps:.3f} verify "
          f"{1e3 * verify / steps:.3f} other {1e3 * other / steps:.3f} draft {1e3 * draft / steps:.3f} ms")
profile = cProfile.Profile()
profile.enable()
run("goodput")
profile.disable()
pstats.Stats(profile).sort_stats("tottime").print_stats(30)
pstats.Stats(profile).sort_stats("cumtime").print_stats("controller|acceptance|costs|chain_exit|engine|anpd|ngram|validation|draft", 40)
