"""How much continuous batching could add on the batching benchmark, predicted from the fitted step cost.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/scripts/batching/continuous_sim.py > benchmarks/results/batching/continuous_sim.txt

Greedy drafts are deterministic, so anpd's run on a prompt is fixed by the prompt's greedy output: this
replays anpd (the real `draft_chain` and `HeuristicLength`) against the greedy outputs of the benchmark's
16 prompts, then prices each decoding step with the fit of `step_cost.py` (its output in
benchmarks/results/batching/). Static batching (what `specdec.generate` does and the benchmark
measures) runs consecutive batches of B until their slowest row is done; continuous batching keeps B
rows busy, a finished row's slot taking the next prompt.
Prefill is left out (the same in every case), so the ratios are decode-only. A model, not a measurement:
the static predictions are printed beside the measured decode speedups to show how far to trust it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from specdec.benchmarks.batching import load_prompts
from specdec.drafters.anpd import AnpdOptions, draft_chain
from specdec.drafters.draft_schedule import HeuristicLength
from specdec.drafters.ngram_table import NGramTable

import specdec

RESULTS = Path(__file__).resolve().parents[2] / "results" / "batching"  # step_cost.txt, result.json

# The fit that step_cost.py wrote: ms per step (F), per row (R), per extra verified token (T), per 1000 cached (C).
_FIT = re.search(r"F ([\d.]+) per step, r ([\d.]+) per row, t ([\d.]+) per extra verified token, c ([\d.]+)",
                 (RESULTS / "step_cost.txt").read_text())
F, R, T, C = (float(value) for value in _FIT.groups())
PAPER = AnpdOptions()  # N and K of the drafter's defaults
BATCH_SIZES = (1, 2, 4, 8, 16)


def replay(prompt: list[int], output: list[int], heuristic: bool, min_match: int) -> list[tuple[int, int]]:
    """(drafted tokens, cached tokens) of each step of anpd (the drafter's default N and K) on one prompt."""
    k = PAPER.k
    table, lengths, done, steps = NGramTable(PAPER.n, 1, prompt), HeuristicLength(k, k, floor=0, probe_after=PAPER.probe_after), 0, []
    while done < len(output):
        depth = min(lengths.length(0) if heuristic else k, len(output) - done - 1)
        draft = draft_chain(table, table.tail, depth, True, 0, frozenset(), min_match)
        accepted = 0
        while accepted < len(draft) and draft[accepted] == output[done + accepted]:
            accepted += 1
        steps.append((len(draft), len(prompt) + done))
        table.extend(output[done : done + accepted + 1])
        done += accepted + 1
        if heuristic:
            lengths.update(0, len(draft), accepted)
    return steps


def static_ms(runs: list[list[tuple[int, int]]], batch: int) -> float:
    total = 0.0
    for start in range(0, len(runs), batch):
        group = runs[start : start + batch]
        for step in range(max(len(r) for r in group)):
            live = [r[step] for r in group if step < len(r)]
            total += F + R * len(live) + T * sum(d for d, _ in live) + C / 1000 * sum(c for _, c in live)
    return total


def continuous_ms(runs: list[list[tuple[int, int]]], batch: int) -> float:
    queue, active, total = list(runs), [], 0.0  # active: [a row's steps, how many are done]
    while queue or active:
        while queue and len(active) < batch:
            active.append([queue.pop(0), 0])
        live = [steps[done] for steps, done in active]
        total += F + R * len(live) + T * sum(d for d, _ in live) + C / 1000 * sum(c for _, c in live)
        active = [[steps, done + 1] for steps, done in active if done + 1 < len(steps)]
    return total


torch.set_num_threads(1)
pair = specdec.load_default()
prompts = load_prompts(pair.tokenizer, pair.target.config.max_position_embeddings, 16, 64, 384)
outputs = specdec.generate(pair.target, prompts, drafter="none", max_new_tokens=64, eos_token_id=[]).sequences
plain = [[(0, len(p) + i) for i in range(64)] for p in prompts]
measured = {}
result = RESULTS / "result.json"
if result.exists():
    rows = json.loads(result.read_text())["rows"]
    ar = {r["batch"]: r["decode_tokens_per_cpu_second"] for r in rows if r["mode"] == "autoregressive"}
    measured = {(r["batch"], r["mode"]): r["decode_tokens_per_cpu_second"] / ar[r["batch"]]
                for r in rows if r["drafter"] == "anpd"}
print("decode-only speedup over batched autoregressive decoding, predicted (measured static in brackets)")
for name, heuristic, min_match, mode in (("anpd (paper)", False, 1, "unpadded"),
                                         ("anpd heuristic + min_match=2", True, 2, "unpadded-adaptive")):
    runs = [replay(p, o, heuristic, min_match) for p, o in zip(prompts, outputs)]
    print(name)
    for batch in BATCH_SIZES:
        static = static_ms(plain, batch) / static_ms(runs, batch)
        continuous = continuous_ms(plain, batch) / continuous_ms(runs, batch)
        seen = measured.get((batch, mode))
        print(f"  B={batch:<3} static {static:.2f}x ({seen:.2f}x)  continuous {continuous:.2f}x" if seen else
              f"  B={batch:<3} static {static:.2f}x  continuous {continuous:.2f}x")
