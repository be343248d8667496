"""Run `specdec bench` with a patched controller that logs each call's steps to $REPLAY_LOG, one line per call:
'.' plain, else [p for a probe]budget/verified/accepted:c0 (the row's first-node estimate after the verdict)."""
import json, os, sys
from specdec import controller as G
from specdec import cli
LOG = open(os.environ["REPLAY_LOG"], "a")
orig_rows, orig_observe, orig_finish = G.GoodputController._observe_rows, G.GoodputController.observe, G.GoodputController.finish
def _observe_rows(self, *a, **k):
    counts = orig_rows(self, *a, **k)
    self._last_counts = counts
    return counts
def observe(self, plan, cut, verdict, timings, *a, **k):
    self._last_counts = None
    orig_observe(self, plan, cut, verdict, timings, *a, **k)
    log = self.__dict__.setdefault("_replay", [])
    if plan.choice and len(plan.choice) == 1:
        ver = len(cut.order[0]) if cut.order else 0
        if plan.choice[0] is None or ver == 0:
            log.append("."); return
        row = self.rows.get(self._current_ids[0])
        e = row.estimates.get(self.order[0]) if row else None
        c0 = f"{e.conditional(0):.2f}" if e is not None else "?"
        a_ = self._last_counts[0] if self._last_counts else "?"
        log.append(f"{'p' if plan.probe[0] else ''}{plan.budget[0]}/{ver}/{a_}:{c0}")
def finish(self):
    orig_finish(self)
    LOG.write(json.dumps({"name": self.name, "steps": self.__dict__.get("_replay", [])}) + "\n"); LOG.flush()
G.GoodputController._observe_rows = _observe_rows
G.GoodputController.observe = observe
G.GoodputController.finish = finish
sys.exit(cli.main(sys.argv[1:]))
