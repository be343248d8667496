"""Stop 78: seeded sampled calls (temperature 0.8, a seed per call) under the controller, CPU seconds of each
drafter against `none` (plain decoding) over one prompt from each of six Spec-Bench categories, 128 new tokens,
ROUNDS rounds after a warm-up round (each round its own seeds; every cell of a round draws with the same ones),
and tau. One process, cells in turn within a round.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s78/seeded_speed.py 3

(CHECK_LABEL, if set, names the library version in the output instead of `git describe`.) With `warm` after ROUNDS,
every cell first runs its prompts once greedily (live decisions: the process's cost model measures the drafters)
before the seeded rounds, as in a process that served unseeded requests first.
"""

import collections
import json
import os
import subprocess
import sys
import time

import torch

import specdec

torch.set_num_threads(1)
rounds = int(sys.argv[1])
warm = sys.argv[2:] == ["warm"]
pair = specdec.load_default()
target, tok = pair.target, pair.tokenizer
questions = [json.loads(line) for line in open("specdec/data/spec_bench/question.jsonl")]
seen = {}
for q in questions:
    seen.setdefault(q["category"], q["turns"][0])
cats = ("writing", "translation", "summarization", "qa", "math_reasoning", "rag")
prompts = [tok(seen[c])["input_ids"][-600:] for c in cats]
cells = [
    ("none", None),
    ("anpd", None),
    ("draft_model", {"model": pair.draft}),
    ("layer_skip", None),
    ("ppd", None),
    ("auto", {"draft": pair.draft}),
]
if warm:
    for name, options in cells:
        for prompt in prompts:
            specdec.generate(target, [prompt], drafter=name, drafter_options=options, max_new_tokens=128)
times = collections.defaultdict(list)
taus = collections.defaultdict(list)
for r in range(-1, rounds):
    for name, o in cells:
        started = time.process_time()
        steps = new = 0
        for i, p in enumerate(prompts):
            out = specdec.generate(
                target,
                [p],
                drafter=name,
                drafter_options=o,
                max_new_tokens=128,
                temperature=0.8,
                seed=100 * r + i + 1000,
            )
            steps += out.stats.steps
            new += out.stats.new_tokens
        if r >= 0:
            times[name].append(time.process_time() - started)
            taus[name].append(new / steps)
# CHECK_LABEL names a version checked out by hand (the old engine, run from a later tree)
version = (
    os.environ.get("CHECK_LABEL")
    or subprocess.run(
        ["git", "describe", "--always", "--dirty"], capture_output=True, text=True
    ).stdout.strip()
)
print(f"# library {version}: {rounds} rounds" + (", after a greedy pass of every cell" if warm else ""))
for name, _ in cells:
    ratio = [a / b for a, b in zip(times["none"], times[name])]
    print(
        f"{name:12s} speed/none {sum(ratio) / len(ratio):.3f} rounds {[round(x, 3) for x in ratio]} "
        f"tau {sum(taus[name]) / len(taus[name]):.2f}"
    )
