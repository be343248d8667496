"""One qa call of ppd (one ensemble token) under the controller with a probe run of 8 steps, traced: each drafted
step's plan and timings, the verify curve, and the overheads the cost model charges a plain and a drafted step.
Needs `probe_run.diff` applied (PROBE_RUN)."""
import statistics
from unittest import mock

from _prompts import default_pair_and_prompts

import specdec
from specdec import controller as C
from specdec.costs import CostModel, device_key

pair, qa = default_pair_and_prompts(["qa"])
tgt = pair.target
calls = [ids for _, ids in qa]
cm = CostModel(device_key("cpu"))
specdec.generate(tgt, calls[1], max_new_tokens=16, cost_model=cm, drafter="ppd", drafter_options={"num_ept": 1})
with mock.patch.object(C, "PROBE_RUN", 8):
    out = specdec.generate(tgt, calls[0], max_new_tokens=128, cost_model=cm, drafter="ppd", drafter_options={"num_ept": 1},
                           controller={"trace": True})
tr = out.stats.controller["trace"]
table = cm.table()
print("verify curve b1:", [round(table.verify(1, n, True, None) * 1000, 2) for n in (1, 2, 3, 4, 6, 8)])
for i, t in enumerate(tr):
    if t["choice"][0] is not None:
        print(i, t["choice"], "probe", t["probe"], "budget", t["budget"], "verified", t["verified"], "acc", t["accepted"], "exp", t["expected"], "inputs", t["inputs"], "verify ms", round(t.get("verify", 0) * 1000, 2), "draft ms", round(t.get("draft", 0) * 1000, 2))
t = cm.table()
print("overhead plain/drafted ms", round(t.overhead("ppd", False) * 1000, 3), round(t.overhead("ppd", True) * 1000, 3))
print("draft ppd 1 node ms", round(t.draft("ppd", 1, 1, 0.0, None) * 1000, 3))
print("extras", getattr(t, "extras", None))
plain = [x["verify"] for x in tr if x["choice"][0] is None and "verify" in x]
print("plain verify ms median", round(statistics.median(plain) * 1000, 2), "other plain", round(statistics.median([x["other"] for x in tr if x["choice"][0] is None]) * 1000, 3), "other drafted", round(statistics.median([x["other"] for x in tr if x["choice"][0] is not None]) * 1000, 3))
