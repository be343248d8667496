"""Stop 78: does a seed fix a sampled output across processes? Runs the same seeded calls (the bundled pair, one
prompt from each of four Spec-Bench categories, temperature 0.8, seed 7, 48 new tokens, the controller on) in
PROCESSES fresh processes, one after another, and prints per drafter whether every process drew the same tokens.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s78/seeded_processes.py 3

(CHECK_LABEL, if set, names the library version in the output instead of `git describe`.)
"""

import json
import os
import subprocess
import sys

CHILD = """
import json, torch, specdec
torch.set_num_threads(1)
pair = specdec.load_default()
target, tok = pair.target, pair.tokenizer
questions = [json.loads(line) for line in open("specdec/data/spec_bench/question.jsonl")]
prompts = [tok(q["turns"][0])["input_ids"][-300:] for q in questions[::40][:4]]
cells = [("anpd", None), ("draft_model", {"model": pair.draft}), ("layer_skip", None), ("ppd", None),
         ("ppd_draft_model", None), ("auto", {"draft": pair.draft})]
out = {}
for name, options in cells:
    result = specdec.generate(target, prompts, drafter=name, drafter_options=options, max_new_tokens=48,
                              temperature=0.8, seed=7)
    out[name] = [list(map(int, s)) for s in result.sequences]
print(json.dumps(out))
"""

processes = int(sys.argv[1])
# CHECK_LABEL names a version checked out by hand (the old engine, run from a later tree)
version = (
    os.environ.get("CHECK_LABEL")
    or subprocess.run(
        ["git", "describe", "--always", "--dirty"], capture_output=True, text=True
    ).stdout.strip()
)
runs = []
for _ in range(processes):
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True)
    runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
print(f"# library {version}: {processes} processes, the same seeded calls in each")
for name in runs[0]:
    same = [run[name] == runs[0][name] for run in runs[1:]]
    rows = [sum(a == b for a, b in zip(run[name], runs[0][name])) for run in runs[1:]]
    print(
        f"{name:16s} all processes drew the same tokens: {all(same)}  (rows equal to process 1's, per process: "
        f"{rows} of {len(runs[0][name])})"
    )
