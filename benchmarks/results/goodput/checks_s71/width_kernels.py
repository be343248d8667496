"""Stop 71: what verifying k draft tokens costs per step on the default model under one way of choosing each linear
layer's kernel (`specdec.cpu_linear`), one rule per process as a user runs it: `alone`, each layer shape timed by
itself and warm (`_crossover`, the rule before 211ec98, forced here with STREAM_BYTES = 0), or `streamed`, every
layer timed in sweeps as a forward runs them (`_streamed_crossovers`, 211ec98). A drafter proposes k wrong tokens
every step (never accepted: every cell takes the same steps at the same contexts), k = 0 (plain steps), 1, 2, 3,
interleaved per round; 2 prompts per given category, 64 new tokens. Prints the crossovers and the engine's verify
ms per step. Run the rules in alternation (`width_kernels.txt`):

    for i in 1 2; do for rule in alone streamed; do
      OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s71/width_kernels.py $rule qa,math_reasoning 2
    done; done
"""
import sys

import torch
from specdec.benchmarks.datasets import PromptBuilder, load_dataset

import specdec
from specdec import Draft, Drafter, cpu_linear
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
rule, categories, rounds = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
# For the whole process: the runner packs its own attention view of the model when it first runs it.
cpu_linear.STREAM_BYTES = {"alone": 0, "streamed": cpu_linear.STREAM_BYTES}[rule]
pair = specdec.load_default()
model = pair.target
builder = PromptBuilder(pair.tokenizer, context_length(model), 64)
prompts = [builder.encode([], s.turns[0])[0] for s in load_dataset("spec_bench", None, None, 2) if s.category in categories]
ks = (0, 1, 2, 3)
costs = {k: CostModel(device_key("cpu")) for k in ks}
totals = {k: [0.0, 0] for k in ks}


def run(k: int, keep: bool) -> None:
    for prompt in prompts:
        out = specdec.generate(model, prompt, drafter="none" if k == 0 else Wrong(k), verifier="exact",
                               max_new_tokens=64, cost_model=costs[k])
        if keep:
            totals[k][0] += out.stats.verify_time
            totals[k][1] += out.stats.steps


for k in ks:
    run(k, keep=False)
for r in range(rounds):
    for k in ks if r % 2 == 0 else ks[::-1]:
        run(k, keep=True)
print(f"{rule} ({','.join(categories)}, {len(prompts)} prompts, {rounds} rounds) crossovers "
      f"{[view.crossovers for view in cpu_linear._VIEWS.values()]}: verify ms per step "
      + " | ".join(f"k={k} {1e3 * totals[k][0] / totals[k][1]:.3f}" for k in ks))
