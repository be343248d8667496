"""Run `specdec bench` with the goodput controller patched to log each call's steps to $REPLAY_LOG, one JSON line per
controller call: the calls run in the sweep's own order, with the state the sweep carries between them. A lone row's
step is `[p]budget/verified/accepted:c0` (`p` a probe; c0 the row's first-node estimate of the controller's first
member after the verdict) or `.` when it verified no node; with REPLAY_PROPOSED=1,
`[p]budget/proposed/verified/accepted:c0` (proposed: the nodes the drafter drafted before the cut).

    REPLAY_LOG=out.log .venv/bin/python benchmarks/results/goodput/checks_s64/sweep_replay.py bench --preset full \\
        --per-category 5 --max-new-tokens 128 --repeats 1 --drafter none --drafter draft_model:model=@draft \\
        --out /tmp/replay --no-progress --fresh
"""
import json
import os
import sys

from specdec import cli
from specdec import controller as goodput

LOG = open(os.environ["REPLAY_LOG"], "a")
PROPOSED = os.environ.get("REPLAY_PROPOSED") == "1"
Controller = goodput.GoodputController
_observe_rows, _observe, _finish = Controller._observe_rows, Controller.observe, Controller.finish


def observe_rows(self, *args, **kwargs):
    counts = _observe_rows(self, *args, **kwargs)
    self._last_counts = counts
    return counts


def observe(self, plan, cut, verdict, timings, *args, **kwargs):
    self._last_counts = None
    _observe(self, plan, cut, verdict, timings, *args, **kwargs)
    log = self.__dict__.setdefault("_replay", [])
    if len(plan.choice) != 1:
        return
    verified = len(cut.order[0]) if cut.order else 0
    if plan.choice[0] is None or verified == 0:
        log.append(".")
        return
    row = self.rows.get(self._current_ids[0])
    estimate = row.estimates.get(self.order[0]) if row else None
    first = f"{estimate.conditional(0):.2f}" if estimate is not None else "?"
    accepted = self._last_counts[0] if self._last_counts else "?"
    drafted = f"{cut.proposed[0]}/" if PROPOSED else ""
    log.append(f"{'p' if plan.probe[0] else ''}{plan.budget[0]}/{drafted}{verified}/{accepted}:{first}")


def finish(self):
    _finish(self)
    LOG.write(json.dumps({"name": self.name, "steps": self.__dict__.get("_replay", [])}) + "\n")
    LOG.flush()


Controller._observe_rows = observe_rows
Controller.observe = observe
Controller.finish = finish
sys.exit(cli.main(sys.argv[1:]))
