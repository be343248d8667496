"""Sampled decoding on the default model (temperature 0.8, each drafter's own rule, one Spec-Bench prompt per
category, 64 new tokens): CPU ms per step per cell, cells interleaved, for the checkout given (put first on sys.path;
an older commit's worktree needs links from its specdec/ to its drafters/, verifiers/ and benchmarks/):
`python sampled_speed.py REPO ROUNDS`."""
import sys
import time

sys.path.insert(0, sys.argv[1])
import torch  # noqa: E402
from specdec.benchmarks.datasets import PromptBuilder, load_dataset  # noqa: E402

import specdec  # noqa: E402
from specdec.target import context_length  # noqa: E402

print(specdec.__file__)
torch.set_num_threads(1)
pair = specdec.load_default()
builder = PromptBuilder(pair.tokenizer, context_length(pair.target), 64)
prompts = [builder.encode([], s.turns[0])[0] for s in load_dataset("spec_bench", per_category=1)]
cells = {"none/exact": dict(drafter="none", verifier="exact"),
         "anpd/rejection": dict(drafter="anpd", verifier="rejection", controller=False),
         "dm/rejection": dict(drafter="draft_model", drafter_options={"model": pair.draft}, verifier="rejection", controller=False),
         "ppd/rejection": dict(drafter="ppd", verifier="rejection", controller=False),
         "ppd/typical": dict(drafter="ppd", verifier="typical", controller=False)}
for kw in cells.values():
    specdec.generate(pair.target, prompts[0], max_new_tokens=8, temperature=0.8, seed=1, **kw)
tot = {c: [0.0, 0] for c in cells}
for _ in range(int(sys.argv[2])):
    for i, p in enumerate(prompts):
        for c, kw in cells.items():
            t = time.process_time()
            out = specdec.generate(pair.target, p, max_new_tokens=64, temperature=0.8, seed=i, **kw)
            tot[c][0] += time.process_time() - t
            tot[c][1] += out.stats.steps
for c, (t, s) in tot.items():
    print(f"{c:16s} {t:.2f}s steps {s} ms/step {t / s * 1000:.2f}")
