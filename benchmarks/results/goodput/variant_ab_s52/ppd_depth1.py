"""ppd's first qa prompt with a fixed tree of 2 (one candidate) and of 32 (the goodput tree), one prompt and one
ensemble token, no controller: steps and depth-1 acceptances."""
import torch
from specdec.benchmarks.datasets import PromptBuilder, load_dataset

import specdec
from specdec.target import context_length

torch.set_num_threads(1)
pair = specdec.load_default()
tgt, tok = pair.target, pair.tokenizer
samples = load_dataset("spec_bench", per_category=5)
b = PromptBuilder(tok, context_length(tgt), 128)
ids = [b.encode([], s.turns[0])[0] for s in samples if s.category == "qa"][0]
for size in (2, 32):
    out = specdec.generate(tgt, ids, max_new_tokens=128, drafter="ppd", controller=False,
                           drafter_options={"schedule": "profile", "tree_size": size, "num_prompts": 1, "num_ept": 1})
    st = out.stats
    print(size, "steps", st.steps, "acc by depth", st.accepted_by_depth[:3], "drafted by depth", st.drafted_by_depth[:3])
