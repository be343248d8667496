"""ppd's first qa prompt with a fixed tree of 2 (one candidate) and of 32 (the goodput tree), one prompt and one
ensemble token, no controller: steps and depth-1 acceptances."""
from _prompts import default_pair_and_prompts

import specdec

pair, qa = default_pair_and_prompts(["qa"])
tgt = pair.target
ids = qa[0][1]
for size in (2, 32):
    out = specdec.generate(tgt, ids, max_new_tokens=128, drafter="ppd", controller=False,
                           drafter_options={"schedule": "profile", "tree_size": size, "num_prompts": 1, "num_ept": 1})
    st = out.stats
    print(size, "steps", st.steps, "acc by depth", st.accepted_by_depth[:3], "drafted by depth", st.drafted_by_depth[:3])
