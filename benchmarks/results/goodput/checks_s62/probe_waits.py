"""The waits (row-steps) and expected losses (plain steps) the controller prices for a costly chain's probe in a row
alone, positive ones only, per drafter (a drafter and cost model each, kept across the prompts). From the repository
root: `OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s62/probe_waits.py
translation,summarization,qa,rag draft_model layer_skip`. At stop 62 before the change (1% share): draft_model waits
3.2 / 8.6 / 47.9 (10th, 50th, 90th percentile), losses 0.032 / 0.086 / 0.479; layer_skip (16 only) 4.5 / 6.4 / 34.9."""
import collections
import sys

sys.path.insert(0, "benchmarks/results/goodput/variant_ab_s52")
from _prompts import default_pair_and_prompts  # noqa: E402

import specdec  # noqa: E402
from specdec import controller, registry  # noqa: E402
from specdec.costs import CostModel, device_key  # noqa: E402

pair, calls = default_pair_and_prompts(sys.argv[1].split(","))
priced = collections.defaultdict(list)
original = controller.GoodputController._probe_wait
current = [""]


def recorded(self, option, instead=0.0, batch=None, lag=None, costly=True):
    wait = original(self, option, instead, batch, lag, costly)
    if costly and batch is None and not option[0].base and wait > 0:
        priced[current[0]].append((wait, wait * self._probe_share(option[0], batch, costly)))
    return wait


controller.GoodputController._probe_wait = recorded
for name in sys.argv[2:]:
    drafter = registry.create("drafter", name, {"model": pair.draft} if name == "draft_model" else {})
    costs = CostModel(device_key("cpu"))
    current[0] = name
    for _, ids in calls:
        specdec.generate(pair.target, ids, max_new_tokens=128, drafter=drafter, cost_model=costs)
    waits, losses = sorted(w for w, _ in priced[name]), sorted(loss for _, loss in priced[name])

    def at(values, fraction):
        return values[int(fraction * (len(values) - 1))] if values else 0.0

    print(name, "n", len(waits), "wait", [round(at(waits, f), 1) for f in (0.1, 0.5, 0.9)],
          "loss", [round(at(losses, f), 3) for f in (0.1, 0.5, 0.9)])
