"""layer_skip alone over the categories' first turns, one drafter and cost model kept across calls, with what
`_probe_wait` priced at the first and last step where its best prefix was no draft (the wait, the row's context, the
probe's nodes, their chances, the priced draft and plain verify, the fitted draft line at that context): to catch a
request that decodes plainly. One line per request (`r`: round) after its prices line.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s66/stuck.py mt_bench,translation,summarization,qa 2
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "variant_ab_s52"))
from _prompts import default_pair_and_prompts  # noqa: E402  (stop 52's helper)

import specdec  # noqa: E402
from specdec import controller as goodput  # noqa: E402
from specdec import costs, registry  # noqa: E402

Controller = goodput.GoodputController
_wait, _finish = Controller._probe_wait, Controller.finish


def probe_wait(self, option, instead=0.0, batch=None, lag=None, costly=True):
    wait = _wait(self, option, instead, batch, lag, costly)
    items, keep, _, best_one = option
    if keep == 0:
        table, context = self.table, items.context
        catch_up = items.lag if lag is None else lag
        self._last = {"wait": round(wait, 1), "ctx": round(context or 0), "best_one": best_one,
                      "probs": [round(p, 3) for p in items.probs[:4]],
                      "draft_ms": round(1e3 * table.draft(items.member, best_one, best_one, catch_up, context), 2),
                      "lag": catch_up, "plain_ms": round(1e3 * table.verify(1, 1, self.packed, context), 2),
                      "line": [round(1e3 * x, 2) for x in table.draft_line(items.member, context)]}
        self.__dict__.setdefault("_first", self._last)
    return wait


def finish(self):
    _finish(self)
    print("   prices first", json.dumps(self.__dict__.get("_first")), "last", json.dumps(self.__dict__.get("_last")))


Controller._probe_wait = probe_wait
Controller.finish = finish
categories = sys.argv[1].split(",")
pair, calls = default_pair_and_prompts(categories)
drafter = registry.create("drafter", "layer_skip", {})
model = costs.CostModel(costs.device_key("cpu"))
specdec.generate(pair.target, calls[0][1], max_new_tokens=16, drafter=drafter, cost_model=model)
for round_index in range(int(sys.argv[2])):
    for category, ids in calls:
        out = specdec.generate(pair.target, ids, max_new_tokens=128, drafter=drafter, cost_model=model)
        controls = out.stats.controller
        print(json.dumps({"r": round_index, "cat": category[:5], "steps": out.stats.steps,
                          "plain": controls["plain_row_steps"], "probes": controls["probes"]}), flush=True)
