"""Stop 69: what verifying k draft nodes costs per step on a model, measured through the engine: a drafter that
proposes k wrong tokens every step (never accepted, so every cell takes the same steps at the same contexts), k = 0
(`none`), 1, 3, 7; 12 Spec-Bench prompts, 64 new tokens, interleaved rounds. Per cell: process CPU ms per step, the
engine's verify / draft / other ms per step."""
import sys
import time

import torch
from specdec.benchmarks.datasets import PromptBuilder, load_dataset

import specdec
from specdec import Draft, Drafter
from specdec.api import load_model
from specdec.costs import CostModel, device_key
from specdec.target import context_length


class Wrong(Drafter):
    name = "wrong"

    def __init__(self, k: int) -> None:
        super().__init__(None)
        self.k = k

    def controlled(self) -> bool:
        return False

    def propose(self, state) -> Draft:
        rows = []
        for sequence in state.sequences:
            token = (sequence[-1] + 7) % 100 + 3
            rows.append(([token] * self.k, list(range(-1, self.k - 1))))
        return Draft.from_rows(rows)


torch.set_num_threads(1)
path = sys.argv[1] if len(sys.argv) > 1 else "/work/second/target"
if path == "default":
    pair = specdec.load_default()
    model, tokenizer = pair.target, pair.tokenizer
else:
    model, tokenizer = load_model(path)
builder = PromptBuilder(tokenizer, context_length(model), 64)
prompts = [builder.encode([], s.turns[0])[0] for s in load_dataset("spec_bench", None, None, 2)]
ks = [0, 1, 3, 7]
costs = {k: CostModel(device_key("cpu")) for k in ks}


def run(k: int) -> list[float]:
    out_totals = [0.0, 0, 0.0, 0.0, 0.0, 0.0]
    for prompt in prompts:
        started = time.process_time()
        out = specdec.generate(model, prompt, drafter="none" if k == 0 else Wrong(k), verifier="exact",
                               max_new_tokens=64, cost_model=costs[k])
        s = out.stats
        for i, v in enumerate((time.process_time() - started - s.setup_cpu_time, s.steps, s.verify_time,
                               s.draft_time, s.other_time, s.new_tokens)):
            out_totals[i] += v
    return out_totals


run(0)
for k in ks[1:]:
    run(k)
totals = {k: [0.0] * 6 for k in ks}
for r in range(int(sys.argv[2]) if len(sys.argv) > 2 else 3):
    for k in ks if r % 2 == 0 else ks[::-1]:
        for i, v in enumerate(run(k)):
            totals[k][i] += v
for k, (cpu, steps, verify, draft, other, tokens) in totals.items():
    print(f"k={k}: steps {int(steps)} tokens {int(tokens)} per step: cpu {1e3 * cpu / steps:.3f} verify "
          f"{1e3 * verify / steps:.3f} draft {1e3 * draft / steps:.3f} other {1e3 * other / steps:.3f} ms")
