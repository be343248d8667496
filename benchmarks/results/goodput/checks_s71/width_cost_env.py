"""Stop 71: `../checks_s69/width_cost.py` on the default model with the categories and the kernel rule chosen: a
drafter that proposes k wrong tokens every step (never accepted), k = 0 (`none`), 1, 2, 3; 2 prompts per category,
64 new tokens, interleaved rounds; per cell process CPU ms per step and the engine's verify / draft / other ms per step.
Environment: OLD_RULE=1 times each layer shape alone (`cpu_linear.STREAM_BYTES = 0`, the rule before 211ec98);
ALL_DNN=1 runs every packed layer on oneDNN from one row; PAD4=1 with it pads 2-3 rows to 4.

    OLD_RULE=1 OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s71/width_cost_env.py default 2 qa,math_reasoning
"""
import os
import sys
import time

import torch
from specdec.benchmarks.datasets import PromptBuilder, load_dataset

import specdec
from specdec import Draft, Drafter
from specdec import cpu_linear as _cl
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


if os.environ.get("OLD_RULE"):
    _cl.STREAM_BYTES = 0
if os.environ.get("ALL_DNN"):
    _cl._crossover = lambda weight, bias: 1  # (at a74f4e9, where it was run, the only timing)
    _cl._crossovers = lambda layers: {_cl.layer_shape(layer.source): 1 for layer in layers}
if os.environ.get("PAD4"):
    def _lin(inputs, packed, bias):
        flat = inputs.reshape(-1, inputs.shape[-1])
        rows = flat.shape[0]
        if rows in (2, 3):
            flat = torch.cat((flat, flat[-1:].expand(4 - rows, -1)))
        output = torch.ops.mkldnn._linear_pointwise.default(flat, packed, bias, "none", [], "")
        return output[:rows].view(*inputs.shape[:-1], output.shape[-1])
    _cl._onednn_linear = _lin
CATS = sys.argv[3].split(",") if len(sys.argv) > 3 else ["rag"]
torch.set_num_threads(1)
path = sys.argv[1] if len(sys.argv) > 1 else "/work/second/target"
if path == "default":
    pair = specdec.load_default()
    model, tokenizer = pair.target, pair.tokenizer
else:
    model, tokenizer = load_model(path)
builder = PromptBuilder(tokenizer, context_length(model), 64)
prompts = [builder.encode([], s.turns[0])[0] for s in load_dataset("spec_bench", None, None, 2) if s.category in CATS]
ks = [0, 1, 2, 3]
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
