"""Stop 59 check, `python after_dm.py [draft_model|none|anpd]` from the repository root: does running draft_model slow the target's later plain decoding in the same process? none before / after."""
import sys
import time

from _second_pair import calls as categorised
from _second_pair import draft
from _second_pair import target as tgt

import specdec
from specdec.costs import CostModel, device_key

calls = [ids for _, ids in categorised]
middle = sys.argv[1] if len(sys.argv) > 1 else "draft_model"
def rnd(name, cm):
    t0 = time.process_time()
    for ids in calls:
        specdec.generate(tgt, ids, max_new_tokens=64, cost_model=cm, drafter=name,
                         drafter_options={"model": draft} if name == "draft_model" else {})
    return time.process_time() - t0
cm_none, cm_mid = CostModel(device_key("cpu")), CostModel(device_key("cpu"))
rnd("none", cm_none)
before = [rnd("none", cm_none) for _ in range(3)]
mid = [rnd(middle, cm_mid) for _ in range(2)]
after = [rnd("none", cm_none) for _ in range(3)]
print(f"middle={middle}: none before {[round(b, 3) for b in before]} | {middle} {[round(m, 3) for m in mid]} | none after {[round(a, 3) for a in after]}")
