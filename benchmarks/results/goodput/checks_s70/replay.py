"""Stop 70: the controller's host work a step, replayed. `record` runs a drafter under the controller (one cost model
across calls, as a cell does) and keeps every controller call with deep copies of its inputs, and each controller as
its first step found it; `replay` runs those calls again on copies, many times, and times the controller's own
Python alone (process CPU time, the fastest of --rounds replays): free of the model's forwards and their noise,
which moved in-situ readings (`checks_s69/host_parts.py`) by +-20% between runs. Every replayed plan and cut is
checked equal to the recorded one first, so a change that alters a decision is caught.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s70/replay.py record /tmp/anpd.pkl
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s70/replay.py replay /tmp/anpd.pkl

    ... record /tmp/dm.pkl --model default --draft default --drafter draft_model

(--model defaults to the second pair's target, /work/second/target; drafters other than `auto`, which edits the
plan inside `propose`.)
"""
import argparse
import copy
import pickle
import sys
import time

import torch
from specdec.benchmarks.datasets import PromptBuilder, load_dataset

import specdec
from specdec.api import load_model
from specdec.controller import Cut, GoodputController, Plan
from specdec.costs import CostModel, device_key
from specdec.target import context_length
from specdec.zoo import load_default

parser = argparse.ArgumentParser()
parser.add_argument("mode", choices=["record", "replay"])
parser.add_argument("file")
parser.add_argument("--model", default="/work/second/target")
parser.add_argument("--draft", default=None, help="drafter draft_model's draft: a directory, or `default` "
                    "(the bundled pair's, with --model default)")
parser.add_argument("--drafter", default="anpd")
parser.add_argument("--per-category", type=int, default=2)
parser.add_argument("--tokens", type=int, default=64)
parser.add_argument("--rounds", type=int, default=7)
args = parser.parse_args()
torch.set_num_threads(1)


def record() -> None:
    model, tokenizer = load_model(args.model)
    draft = None
    if args.draft:
        draft = load_default().draft if args.draft == "default" else load_model(args.draft)[0]
    extra = {"drafter_options": {"model": draft}} if draft is not None else {}
    builder = PromptBuilder(tokenizer, context_length(model), args.tokens)
    prompts = [builder.encode([], s.turns[0])[0] for s in load_dataset("spec_bench", None, None, args.per_category)]
    logs: list[list] = []
    for name in ("plan", "cut", "observe", "forget", "finish", "stats"):
        method = getattr(GoodputController, name)

        def wrapped(self, *call_args, _method=method, _name=name, **kwargs):
            if not hasattr(self, "_replay_log"):  # the controller as its first step finds it (measured curves)
                start = copy.deepcopy(self)
                self._replay_log = [start]
                logs.append(self._replay_log)
            refs = tuple(("@", id(x)) if isinstance(x, (Plan, Cut)) else x for x in call_args)
            entry = [_name, copy.deepcopy(refs), copy.deepcopy(kwargs)]
            out = _method(self, *call_args, **kwargs)
            if _name == "plan":
                entry += [id(out), (list(out.choice), list(out.budget))]
            elif _name == "cut":
                entry += [id(out[1]), [list(order) for order in out[1].order]]
            elif _name == "observe":  # the engine sets the cut's inputs after the cut
                entry += [None, call_args[1].inputs]
            else:
                entry += [None, None]
            self._replay_log.append(entry)
            return out
        setattr(GoodputController, name, wrapped)
    costs = CostModel(device_key("cpu"))
    for prompt in prompts:
        specdec.generate(model, prompt, drafter=args.drafter, verifier="exact", max_new_tokens=args.tokens,
                         cost_model=costs, **extra)
    with open(args.file, "wb") as handle:
        pickle.dump(logs, handle)
    print(f"recorded {len(logs)} calls, {sum(len(log) - 1 for log in logs)} controller calls")


def replay(check: bool, logs: list[list]) -> float:
    spent = 0.0
    for index, log in enumerate(logs):
        controller, entries = copy.deepcopy(log[0]), copy.deepcopy(log[1:])
        made: dict[int, object] = {}
        for step, (name, refs, kwargs, made_id, expected) in enumerate(entries):
            call_args = tuple(made[x[1]] if isinstance(x, tuple) and len(x) == 2 and x[0] == "@" else x for x in refs)
            if name == "observe":
                call_args[1].inputs = expected
            started = time.process_time()
            out = getattr(controller, name)(*call_args, **kwargs)
            spent += time.process_time() - started
            if name == "plan":
                made[made_id] = out
                if check and (list(out.choice), list(out.budget)) != tuple(expected):
                    sys.exit(f"call {index} entry {step}: plan {out.choice} {out.budget}, recorded {expected}")
            elif name == "cut":
                made[made_id] = out[1]
                if check and [list(order) for order in out[1].order] != expected:
                    sys.exit(f"call {index} entry {step}: cut {out[1].order}, recorded {expected}")
    return spent


if args.mode == "record":
    record()
else:
    with open(args.file, "rb") as handle:
        logs = pickle.load(handle)
    replay(True, logs)
    steps = sum(1 for log in logs for entry in log[1:] if entry[0] == "plan")
    best = min(replay(False, logs) for _ in range(args.rounds))
    print(f"{best * 1e3 / steps:.4f} ms a step over {steps} steps (fastest of {args.rounds} replays)")
