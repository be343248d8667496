"""Tensor ops per decoding step outside the verification forward, by the function of specdec that issued them
(counted at the dispatcher, so deterministic), on the default model: Spec-Bench's first qa prompt, 64 new
tokens, greedy, exact verifier. Cells: plain decoding, the smallest PPD tree drafting every step (one candidate,
one prompt slot, one ensemble token; no controller), ppd and anpd under the controller."""
import collections
import sys
import traceback

import torch
from specdec.benchmarks.datasets import PromptBuilder, load_dataset
from torch.utils._python_dispatch import TorchDispatchMode

import specdec
import specdec.target

torch.set_num_threads(1)
pair = specdec.load_default()
builder = PromptBuilder(pair.tokenizer, specdec.target.context_length(pair.target), 128)
prompt = next(builder.encode([], s.turns[0])[0] for s in load_dataset("spec_bench", per_category=5) if s.category == "qa")
in_forward = [False]
forward = specdec.target.TargetRunner.verify_forward


def timed_forward(self, *args, **kwargs):
    in_forward[0] = True
    try:
        return forward(self, *args, **kwargs)
    finally:
        in_forward[0] = False


specdec.target.TargetRunner.verify_forward = timed_forward
counts: collections.Counter = collections.Counter()


class Count(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not in_forward[0]:
            where = "(outside)"
            for frame in reversed(traceback.extract_stack(limit=25)[:-1]):
                if ("/specdec/" in frame.filename or "/drafters/" in frame.filename or "/verifiers/" in frame.filename
                        or "/benchmarks/" in frame.filename) and ".venv" not in frame.filename:
                    where = "/".join(frame.filename.split("/")[-2:]) + ":" + frame.name
                    break
            counts[where] += 1
        return func(*args, **(kwargs or {}))


tiny = {"schedule": "profile", "tree_size": 2, "num_prompts": 1, "num_ept": 1}
cells = {"none": dict(drafter="none"), "tiny ppd": dict(drafter="ppd", drafter_options=tiny, controller=False),
         "ppd": dict(drafter="ppd"), "anpd": dict(drafter="anpd")}
for name in sys.argv[1].split(",") if len(sys.argv) > 1 else cells:
    specdec.generate(pair.target, prompt, max_new_tokens=8, **cells[name])
    counts.clear()
    with Count():
        stats = specdec.generate(pair.target, prompt, max_new_tokens=64, **cells[name]).stats
    print(f"{name:9s} steps {stats.steps:3d} (drafted {stats.steps - stats.no_draft_row_steps:3d})  "
          f"tensor ops per step outside the forward {sum(counts.values()) / stats.steps:6.1f}")
    for where, count in counts.most_common(8):
        print(f"    {count / stats.steps:6.2f}  {where}")
