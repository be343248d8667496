"""Stop 71: what verifying k draft tokens costs per step on the default model, under the two ways of choosing each
linear layer's kernel (`specdec.cpu_linear`): `alone`, each layer shape timed by itself and warm (`_crossover`, as
before 211ec98; forced here with STREAM_BYTES = 0), and `streamed`, every layer timed in sweeps as a forward runs
them (`_streamed_crossovers`). One copy of the model per rule (its packed view is built under that rule), a drafter
that proposes k wrong tokens every step (never accepted: every cell takes the same steps at the same contexts),
k = 0 (plain steps), 1, 2, 3; 2 prompts per category of the given categories, 64 new tokens, rounds interleaved
(order reversed every other round). Prints each rule's crossovers, then per cell the engine's verify ms per step.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s71/width_kernels_one_process.py qa,math_reasoning 3
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s71/width_kernels_one_process.py rag 3

Both models in one process: here the `alone` rule did not show the cost that one process per rule shows
(`width_kernels.py`, the measurement kept); not explained.
"""
import sys
from unittest import mock

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
categories, rounds = sys.argv[1].split(","), int(sys.argv[2])
models = {}
for rule, stream_bytes in (("alone", 0), ("streamed", cpu_linear.STREAM_BYTES)):
    pair = specdec.load_default()
    with mock.patch.object(cpu_linear, "STREAM_BYTES", stream_bytes):
        cpu_linear.packed_view(pair.target)
    models[rule] = pair.target
    print(f"{rule}: crossovers {cpu_linear._VIEWS[pair.target].crossovers}")
tokenizer = specdec.load_default().tokenizer
builder = PromptBuilder(tokenizer, context_length(models["alone"]), 64)
prompts = [builder.encode([], s.turns[0])[0] for s in load_dataset("spec_bench", None, None, 2) if s.category in categories]
cells = [(rule, k) for rule in models for k in (0, 1, 2, 3)]
costs = {cell: CostModel(device_key("cpu")) for cell in cells}
totals = {cell: [0.0, 0] for cell in cells}


def run(cell: tuple[str, int], keep: bool) -> None:
    rule, k = cell
    for prompt in prompts:
        out = specdec.generate(models[rule], prompt, drafter="none" if k == 0 else Wrong(k), verifier="exact",
                               max_new_tokens=64, cost_model=costs[cell])
        if keep:
            totals[cell][0] += out.stats.verify_time
            totals[cell][1] += out.stats.steps


for cell in cells:
    run(cell, keep=False)
for r in range(rounds):
    for cell in cells if r % 2 == 0 else cells[::-1]:
        run(cell, keep=True)
print(f"# {','.join(categories)}: {len(prompts)} prompts, 64 new tokens, {rounds} rounds; verify ms per step")
for rule in models:
    print(rule, " | ".join(f"k={k} {1e3 * totals[(rule, k)][0] / totals[(rule, k)][1]:.3f}" for k in (0, 1, 2, 3)))
