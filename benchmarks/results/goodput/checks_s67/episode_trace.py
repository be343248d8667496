"""Stop 67's hunt for layer_skip's plain requests: the interleaved A/B harness (`benchmarks/scripts/goodput/ab_rules.py`)
and per layer_skip call one JSON line: its cell (`a`: the harness's old cell, `b`: its new one), category, steps,
plain steps and probes; at its first plan the row's context and the drafter's fitted cost per catch-up token
(`opening.lag_ms`); and at the first and last step where the row stayed plain because its best prefix was no draft,
what the first-probe rule (`controller.FIRST_PROBE_SHARE`) read: the probe's expected loss in plain steps (`lost`)
against FIRST_PROBE_SHARE x the tokens left (`limit`), the row's own verdicts (`trials`), the wait, the probe's nodes
and chances, the priced draft (with its catch-up `lag`), plain and probe verify (ms), and the drafter's fitted line.

Without a third argument both layer_skip cells run the current code (two chances per request to catch an episode)
with draft_model's two cells beside them; with `catch-up` cell `a` prices layer_skip's catch-up as before stop 67
(`LayerSkipDrafter.catches_up` patched to True) and draft_model runs once as a reference.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s67/episode_trace.py \
        mt_bench,translation,summarization,qa,math_reasoning,rag 3 catch-up > ab_catch_up.jsonl
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts/goodput"))
import ab_rules  # noqa: E402

import specdec  # noqa: E402
from specdec import controller as goodput  # noqa: E402

NAME = "layer_skip"
Controller = goodput.GoodputController
_wait, _plan, _finish = Controller._probe_wait, Controller.plan, Controller.finish
CALLS = {"index": 0, "category": "", "cell": ""}
CATEGORIES: dict[tuple[int, ...], str] = {}
CELLS: dict[int, str] = {}  # id(drafter) -> "a"/"b" for the two layer_skip cells (first seen first)
_pair_and_prompts, _generate = ab_rules.default_pair_and_prompts, specdec.generate


def pair_and_prompts(categories):
    pair, calls = _pair_and_prompts(categories)
    CATEGORIES.update({tuple(ids): category for category, ids in calls})
    return pair, calls


def generate(target, ids, **options):
    CALLS["category"] = CATEGORIES.get(tuple(ids), "")
    drafter = options.get("drafter")
    if getattr(drafter, "name", None) == NAME:
        if id(drafter) not in CELLS:
            CELLS[id(drafter)] = "ab"[len(CELLS)]
        CALLS["cell"] = CELLS[id(drafter)]
    return _generate(target, ids, **options)


def probe_wait(self, option, instead=0.0, batch=None, lag=None, costly=True):
    wait = _wait(self, option, instead, batch, lag, costly)
    items, keep, _, best_one = option
    if items.member == NAME and keep == 0:
        table, context = self.table, items.context
        catch_up = items.lag if lag is None else lag
        lost = wait * self._probe_share(items, batch, costly)
        self._priced = {"lost": round(lost, 2), "limit": round(goodput.FIRST_PROBE_SHARE * items.left, 2),
                        "wait": round(wait, 1), "ctx": round(context or 0), "best_one": best_one,
                        "probs": [round(p, 3) for p in items.probs[:6]],
                        "draft_ms": round(1e3 * table.draft(NAME, best_one, best_one, catch_up, context), 2),
                        "lag": catch_up, "plain_ms": round(1e3 * table.verify(1, 1, self.packed, context), 2),
                        "probe_ms": round(1e3 * table.verify(1, 1 + best_one, self.packed, context), 2),
                        "line": [round(1e3 * x, 2) for x in table.draft_line(NAME, context)]}
    return wait


def plan(self, row_ids, max_depth, max_nodes, waiting=True, contexts=None):
    self._priced = None
    if NAME in self.order and "_opening" not in self.__dict__:  # the call's first plan: the fit's lag term
        self._opening = {"ctx": round(contexts[0]) if contexts else None,
                         "lag_ms": round(1e3 * self.table.draft_line(NAME)[3], 4)}
    out = _plan(self, row_ids, max_depth, max_nodes, waiting, contexts)
    if NAME in self.order and self._priced is not None and out.choice[0] is None:
        row = self.rows[row_ids[0]]
        record = dict(self._priced, trials=len(row.estimates[NAME].trials), due=row.due.get(NAME),
                      since=row.since.get(NAME), quiet=row.quiet)
        self.__dict__.setdefault("_first", record)
        self._last = record
    return out


def finish(self):
    _finish(self)
    if self.order == [NAME]:
        counts = self.counts
        print(json.dumps({"call": CALLS["index"], "cell": CALLS["cell"], "cat": CALLS["category"][:5], "steps": counts["row_steps"],
                          "plain": counts["plain_row_steps"], "probes": counts["probes"],
                          "opening": self.__dict__.get("_opening"),
                          "first": self.__dict__.get("_first"), "last": self.__dict__.get("_last")}), flush=True)
    CALLS["index"] += 1


Controller._probe_wait, Controller.plan, Controller.finish = probe_wait, plan, finish
ab_rules.default_pair_and_prompts, specdec.generate = pair_and_prompts, generate
if len(sys.argv) > 3 and sys.argv[3] == "catch-up":  # A/B: cell a prices layer_skip's catch-up as before stop 67
    from unittest import mock

    from specdec.drafters.layerskip.drafter import LayerSkipDrafter
    ab_rules.run_ab(sys.argv[1].split(","), int(sys.argv[2]), [NAME],
                    lambda: [mock.patch.object(LayerSkipDrafter, "catches_up", lambda self: True)], ["draft_model"])
else:
    ab_rules.run_ab(sys.argv[1].split(","), int(sys.argv[2]), [NAME, "draft_model"], lambda: [])
