"""layer_skip's steps per summarization prompt under fresh cost models (one per pass): how often it goes plain.
`python ls_steps.py summarization 3`."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "variant_ab_s52"))
from _prompts import default_pair_and_prompts  # noqa: E402  (stop 52's helper)

import specdec
from specdec.costs import CostModel, device_key

pair, calls = default_pair_and_prompts(sys.argv[1].split(","))
for rnd in range(int(sys.argv[2])):
    cm = CostModel(device_key("cpu"))
    specdec.generate(pair.target, calls[0][1], max_new_tokens=16, cost_model=cm, drafter="layer_skip")
    line = []
    for _cat, ids in calls:
        st = specdec.generate(pair.target, ids, max_new_tokens=128, cost_model=cm, drafter="layer_skip").stats
        line.append(f"{st.steps}/{st.no_draft_row_steps}")
    table = cm.table()
    print(f"pass {rnd}: steps/plain per prompt", " ".join(line), "| weights", [round(x, 5) for x in table.drafters["layer_skip"].weights],
          "| 5-node draft at 100/1000 tokens", [round(table.draft("layer_skip", 5, 5, 0, c), 4) for c in (100, 1000)],
          "verify(1)", round(table.verify(1, 1), 5), flush=True)
