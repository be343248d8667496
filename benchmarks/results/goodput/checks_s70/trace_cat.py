"""Stop 70: one cell of the Spec-Bench sweep replayed as the harness runs it (the bundled pair in float32, one
drafter instance and one cost model for the cell, 3 warm-up calls on the first prompt, then the prompts in the
sweep's order: mt_bench's turns with their history, then the next categories up to --upto), greedy. Per call:
steps, new tokens, CPU seconds, accepted/drafted, plain steps; for the --show sample ids, the tokens drafted and
accepted per step and (under the controller) each step's decision from its trace.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s70/trace_cat.py --show 164
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s70/trace_cat.py --show 164 --schedule heuristic
"""
import argparse
import time

import torch
from specdec.benchmarks.datasets import PromptBuilder, load_dataset

import specdec
from specdec import registry
from specdec.costs import CostModel, device_key
from specdec.target import context_length
from specdec.zoo import load_default

ORDER = ["mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag"]
parser = argparse.ArgumentParser()
parser.add_argument("--drafter", default="draft_model")
parser.add_argument("--schedule", default=None)
parser.add_argument("--upto", default="translation")
parser.add_argument("--show", nargs="*", default=[])
args = parser.parse_args()
torch.set_num_threads(1)
pair = load_default()
target, tokenizer = pair.target, pair.tokenizer
builder = PromptBuilder(tokenizer, context_length(target), 128)
samples = load_dataset("spec_bench", None, None, 5)
options = {"model": pair.draft} if args.drafter == "draft_model" else {}
if args.schedule:
    options["schedule"] = args.schedule
drafter = registry.create("drafter", args.drafter, options)
costs = CostModel(device_key("cpu"))
trace = None if args.schedule else {"trace": True}


def run(ids: list[int]) -> specdec.GenerationOutput:
    return specdec.generate(target, [ids], tokenizer=tokenizer, drafter=drafter, verifier="auto", seed=0,
                            max_new_tokens=128, cost_model=costs, controller=trace or True)


first = builder.encode([], samples[0].turns[0])[0]
for _ in range(3):
    run(first)
for category in ORDER[: ORDER.index(args.upto) + 1]:
    for sample in [s for s in samples if s.category == category]:
        history: list[tuple[str, str]] = []
        for question in sample.turns:
            ids = builder.encode(history, question)[0]
            started = time.process_time()
            out = run(ids)
            spent = time.process_time() - started
            stats = out.stats
            print(f"{category[:6]} {sample.sample_id:>4} steps {stats.steps:3d} new {stats.new_tokens:3d} cpu {spent:.3f} "
                  f"acc {stats.accepted_tokens}/{stats.drafted_tokens} plain {stats.no_draft_row_steps}")
            if sample.sample_id in args.show:
                print("    drafted", stats.drafted_per_step)
                print("    accepted", stats.accepted_per_step)
                for i, step in enumerate((stats.controller or {}).get("trace", [])):
                    print("   ", i, step["choice"], "budget", step["budget"], "probe", step["probe"], "verified",
                          step["verified"], "accepted", step["accepted"], "expected", step["expected"],
                          f"draft {step.get('draft', 0):.4f} verify {step.get('verify', 0):.4f}")
            history.append((question, tokenizer.decode(out.sequences[0], skip_special_tokens=True)))
