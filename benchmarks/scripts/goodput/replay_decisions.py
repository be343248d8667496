"""Record/replay of the clock: checks that a change to the controller or the engine keeps every decision.

The live controller decides from timings, so two runs of the same calls differ. This script runs a fixed set of
calls (batch 1 on six Spec-Bench prompts with anpd, draft_model, layer_skip, ppd and auto; seeded sampled calls;
static and continuous batches of 2, 4 and 8 with anpd and draft_model; the controller tracing every step) and
either records every reading of `time.perf_counter` and `time.process_time`, or replays a recording's readings in
order. Record on the old code, replay on the new: equal outputs say the same readings gave the same tokens, decisions
and traces (a change that reads the clock a different number of times drifts and shows as a difference too).

    PYTHONHASHSEED=0 OMP_NUM_THREADS=1 .venv/bin/python benchmarks/scripts/goodput/replay_decisions.py record DIR
    PYTHONHASHSEED=0 OMP_NUM_THREADS=1 .venv/bin/python benchmarks/scripts/goodput/replay_decisions.py replay DIR
    cmp DIR/record.json DIR/replay.json

(Stop 78: a replay of the same code gave an identical file; two recordings gave different decisions in all 45 calls.)
"""

import json
import sys
import time
from pathlib import Path

mode, folder = sys.argv[1], Path(sys.argv[2])
folder.mkdir(parents=True, exist_ok=True)
CLOCKS = ("perf_counter", "process_time")
real = {name: getattr(time, name) for name in CLOCKS}
streams: dict[str, list[float]] = {name: [] for name in CLOCKS}
if mode == "replay":
    saved = json.loads((folder / "clocks.json").read_text())
    position = {name: 0 for name in CLOCKS}


def make(name):
    if mode == "record":
        def clock():
            value = real[name]()
            streams[name].append(value)
            return value
    else:
        def clock():
            index = position[name]
            position[name] += 1
            if index >= len(saved[name]):  # ran past the recording: a difference in itself
                return saved[name][-1] + (index - len(saved[name]) + 1) * 1e-3
            return saved[name][index]
    return clock


for name in CLOCKS:
    setattr(time, name, make(name))

import torch  # noqa: E402
from specdec.benchmarks.batching import load_prompts  # noqa: E402

import specdec  # noqa: E402
import specdec.costs as costs  # noqa: E402

torch.set_num_threads(1)
pair = specdec.load_default()
target, tok = pair.target, pair.tokenizer
questions = [json.loads(line) for line in open("specdec/data/spec_bench/question.jsonl")]
seen: dict[str, str] = {}
for q in questions:
    seen.setdefault(q["category"], q["turns"][0])
single = [tok(p)["input_ids"][-400:] for c, p in sorted(seen.items())
          if c in ("qa", "translation", "summarization", "math_reasoning", "rag", "writing")]
batch_prompts = load_prompts(tok, target.config.max_position_embeddings, 16, 64, 384)


def record(out):
    s = out.stats
    return {"tokens": [list(map(int, t)) for t in out.sequences] if hasattr(out, "sequences") else None,
            "steps": s.steps, "batch_steps": s.batch_steps, "new": s.new_tokens,
            "drafted": s.drafted_per_step, "accepted": s.accepted_per_step, "no_draft": s.no_draft_row_steps,
            "controller": s.controller}


results = {}
draft_opts = {"model": pair.draft}
cases = [
    ("anpd", None), ("draft_model", draft_opts), ("layer_skip", None), ("ppd", None),
    ("auto", {"draft": pair.draft}),
]
cost_model = costs.CostModel(costs.device_key("cpu"))
for drafter, options in cases:
    for i, prompt in enumerate(single):
        out = specdec.generate(target, [prompt], drafter=drafter, drafter_options=options, max_new_tokens=48,
                               controller={"trace": True}, cost_model=cost_model)
        results[f"b1 {drafter} {i}"] = record(out)
# sampled with a seed: frozen decisions
for drafter, options in cases[:3]:
    out = specdec.generate(target, single[:3], drafter=drafter, drafter_options=options, max_new_tokens=32,
                           temperature=0.8, seed=7, controller={"trace": True}, cost_model=cost_model)
    results[f"seeded {drafter}"] = record(out)
for drafter, options in (("anpd", None), ("draft_model", draft_opts)):
    for B in (2, 4, 8):
        for batch_mode in ("static", "continuous"):
            if batch_mode == "static":
                out = specdec.generate(target, batch_prompts[:B], drafter=drafter, drafter_options=options,
                                       max_new_tokens=48, controller={"trace": True}, cost_model=cost_model)
            else:
                out = specdec.generate(target, batch_prompts[:12], drafter=drafter, drafter_options=options,
                                       max_new_tokens=48, max_batch_size=B, controller={"trace": True},
                                       cost_model=cost_model)
            results[f"B{B} {batch_mode} {drafter}"] = record(out)
(folder / f"{mode}.json").write_text(json.dumps(results, indent=1, sort_keys=True, default=str))
if mode == "record":
    (folder / "clocks.json").write_text(json.dumps(streams))
else:
    print("clock readings used:", position, "recorded:", {k: len(v) for k, v in saved.items()})
print("cases", len(results))
