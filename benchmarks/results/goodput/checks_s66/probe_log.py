"""Run `specdec bench` with the goodput controller's probe pricing logged for one drafter ($PROBE_DRAFTER, default
layer_skip): per controller call of that drafter, one JSON line to $PROBE_LOG with the call's index (counted over every
controller call of the process, warm-ups first), its steps and plain steps, and at its first plain step what
`_probe_wait` priced (and at its last): the wait in steps, the row's context, the probe's nodes and their chances, the drafter's priced
draft seconds, the plain and probe-width verify seconds, and the drafter's fitted cost line at that context.

    PROBE_LOG=out.jsonl OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s66/probe_log.py bench \\
        --preset full --per-category 5 --max-new-tokens 128 --repeats 1 --drafter none --drafter layer_skip \\
        --out /tmp/probe --no-progress --fresh
"""
import json
import os
import sys

from specdec import cli
from specdec import controller as goodput

LOG = open(os.environ["PROBE_LOG"], "a")
NAME = os.environ.get("PROBE_DRAFTER", "layer_skip")
CALLS = {"finished": 0}
Controller = goodput.GoodputController
_wait, _finish = Controller._probe_wait, Controller.finish


def probe_wait(self, option, instead=0.0, batch=None, lag=None, costly=True):
    wait = _wait(self, option, instead, batch, lag, costly)
    items, keep, best, best_one = option
    if items.member == NAME and keep == 0:
        table, context = self.table, items.context
        self._probe_last = {
            "wait": round(wait, 1), "context": round(context or 0.0), "best_one": best_one,
            "probs": [round(p, 3) for p in items.probs[:max(best_one, 3)]],
            "draft_ms": round(1e3 * table.draft(NAME, best_one, best_one, items.lag if lag is None else lag, context), 2),
            "plain_ms": round(1e3 * table.verify(1, 1, self.packed, context), 2),
            "probe_ms": round(1e3 * table.verify(1, 1 + best_one, self.packed, context), 2),
            "line_ms": [round(1e3 * x, 3) for x in table.draft_line(NAME, context)],
            "share": round(self._probe_share(items, batch, costly), 4)}
        self.__dict__.setdefault("_probe_first", self._probe_last)
    return wait


def finish(self):
    _finish(self)
    if NAME in self.order:
        counts = self.counts
        LOG.write(json.dumps({"call": CALLS["finished"], "steps": counts.get("row_steps"),
                              "plain": counts.get("plain_row_steps"), "probes": counts.get("probes"),
                              "first_plain": self.__dict__.get("_probe_first"),
                              "last_plain": self.__dict__.get("_probe_last")}) + "\n")
        LOG.flush()
    CALLS["finished"] += 1


Controller._probe_wait = probe_wait
Controller.finish = finish
sys.exit(cli.main(sys.argv[1:]))
