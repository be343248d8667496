"""Second pair: where a draft_model call's plain steps spend host time beyond `none`'s (wrapped timers)."""
import collections
import functools
import sys
import time

import specdec.drafters.draft_model as DM
from _second_pair import calls as categorised
from _second_pair import draft
from _second_pair import target as tgt

import specdec
import specdec.controller as C
import specdec.engine as E
import specdec.target as T
from specdec.costs import CostModel, device_key

calls = [ids for _, ids in categorised]
spent = collections.Counter()
count = collections.Counter()
def wrap(owner, name, label):
    fn = getattr(owner, name)
    @functools.wraps(fn)
    def timed(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            spent[label] += time.perf_counter() - t
            count[label] += 1
    setattr(owner, name, timed)
for owner, name in [(C.GoodputController, "plan"), (C.GoodputController, "observe"), (C.GoodputController, "cut"),
                    (C.GoodputController, "forget"), (DM.DraftModelDrafter, "observe"), (DM.DraftModelDrafter, "setup"),
                    (DM.DraftModelDrafter, "finish"), (E.SpeculativeEngine, "_step"), (E.SpeculativeEngine, "_controller"), (E.SpeculativeEngine, "_commit"),
                    (E.SpeculativeEngine, "_read_back"), (E.SpeculativeEngine, "_inputs"), (E.SpeculativeEngine, "generate")]:
    wrap(owner, name, f"{owner.__name__}.{name}")
wrap(T.TargetRunner, "verify_forward", "TargetRunner.verify_forward")
name = sys.argv[1]
o = {"model": draft} if name == "draft_model" else {}
cm = CostModel(device_key("cpu"))
for ids in calls[:3]:
    specdec.generate(tgt, ids, max_new_tokens=64, cost_model=cm, drafter=name, drafter_options=o)
spent.clear()
count.clear()
t0 = time.process_time()
for _ in range(3):
    for ids in calls:
        specdec.generate(tgt, ids, max_new_tokens=64, cost_model=cm, drafter=name, drafter_options=o)
total = time.process_time() - t0
steps = count["Engine._step"]
print(f"{name}: cpu {total*1000/3:.0f} ms/round, steps {steps}")
for k, v in sorted(spent.items(), key=lambda kv: -kv[1]):
    print(f"  {k:36s} {v*1000/3:8.1f} ms/round {v/max(count[k],1)*1e6:8.1f} us/call  calls {count[k]}")
