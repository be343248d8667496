"""Stop 72: where draft_model under the controller loses time to `none` on the second pair while it decodes
plainly. The quick preset's prompts (2 per Spec-Bench category, every turn with its history) in the harness's
order, 64 new tokens, greedy; every call runs under every cell in turn (order reversed every other call), each cell
with its own drafter and cost model kept across calls and rounds, after 2 warm-up calls. Per category: mean
per-sample tokens/s over process CPU seconds over `none`'s; then per call, over rounds: CPU ms, the controller's
setup CPU ms, row-steps that drafted, probes, draft forwards.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s72/dm_second.py --rounds 6 \\
        none none:again draft_model
"""
import argparse
import collections
import statistics
import time

import torch
from specdec.benchmarks.datasets import PromptBuilder, load_dataset

import specdec
from specdec import registry
from specdec.api import load_model
from specdec.costs import CostModel, device_key
from specdec.target import context_length

ORDER = ["mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag"]
parser = argparse.ArgumentParser()
parser.add_argument("--target", default="/work/second/target")
parser.add_argument("--draft", default="/work/second/draft128/final")
parser.add_argument("--rounds", type=int, default=3)
parser.add_argument("--new", type=int, default=64)
parser.add_argument("cells", nargs="+")
args = parser.parse_args()
torch.set_num_threads(1)
target, tokenizer = load_model(args.target)
builder = PromptBuilder(tokenizer, context_length(target), args.new)
samples = sorted(load_dataset("spec_bench", None, None, 2), key=lambda s: ORDER.index(s.category))
cells = {}
for spec in args.cells:
    name, _, text = spec.partition(":")
    options = dict(item.split("=") for item in text.split(",") if "=" in item) if text else {}
    if name == "draft_model":
        options.setdefault("model", args.draft)
    cells[spec] = (registry.create("drafter", name, options), CostModel(device_key("cpu")))


def run(spec: str, ids: list[int]) -> tuple[float, specdec.GenerationOutput]:
    drafter, costs = cells[spec]
    started = time.process_time()
    out = specdec.generate(target, [ids], tokenizer=tokenizer, drafter=drafter, verifier="auto",
                           max_new_tokens=args.new, cost_model=costs)
    return time.process_time() - started, out


first = builder.encode([], samples[0].turns[0])[0]
for spec in cells:
    for _ in range(2):
        run(spec, first)
speeds: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
calls: dict[tuple[str, str, int], list[tuple]] = collections.defaultdict(list)
flip = False
for _ in range(args.rounds):
    for sample in samples:
        history: dict[str, list[tuple[str, str]]] = {spec: [] for spec in cells}
        totals = {spec: [0, 0.0] for spec in cells}
        for turn, question in enumerate(sample.turns):
            flip = not flip
            for spec in list(cells) if flip else list(cells)[::-1]:
                seconds, out = run(spec, builder.encode(history[spec], question)[0])
                stats = out.stats
                control = stats.controller or {}
                totals[spec][0] += stats.new_tokens
                totals[spec][1] += seconds
                history[spec].append((question, tokenizer.decode(out.sequences[0], skip_special_tokens=True)))
                calls[(spec, sample.sample_id, turn)].append((
                    1e3 * seconds, 1e3 * stats.setup_cpu_time, stats.steps - stats.no_draft_row_steps,
                    control.get("probes", 0), (stats.drafter_stats or {}).get("draft_forwards", 0),
                    1e3 * (stats.draft_time + stats.verify_time + stats.other_time), stats.steps))
        speeds[(spec, sample.category)]  # (keys in order)
        for spec in cells:
            speeds[(spec, sample.category)].append(totals[spec][0] / totals[spec][1])

reference = args.cells[0]
print(f"# {args.rounds} rounds; mean per-sample tokens/s over {reference}'s (process CPU)")
for category in ORDER:
    print(f"{category[:7]:7s} | " + " | ".join(
        f"{spec} {statistics.mean(speeds[(spec, category)]) / statistics.mean(speeds[(reference, category)]):.3f}"
        for spec in cells))
print("# per call, mean over rounds: cpu ms (min) | setup cpu ms | drafted row-steps | probes | draft forwards | "
      "step ms | steps")
for (spec, sample_id, turn), rows in calls.items():
    cols = list(zip(*rows))
    print(f"{spec:16s} {sample_id:>4s}/{turn} cpu {statistics.mean(cols[0]):6.1f} ({min(cols[0]):6.1f}) "
          f"setup {statistics.mean(cols[1]):5.2f} drafted {statistics.mean(cols[2]):4.1f} probes "
          f"{statistics.mean(cols[3]):3.1f} fwd {statistics.mean(cols[4]):4.1f} step {statistics.mean(cols[5]):6.1f} "
          f"steps {statistics.mean(cols[6]):4.1f}")
