"""Run `specdec bench` with layer_skip's chain exit logged: each time `ExitRow.keep_drafting` stops a chain before
its budget, one JSON line to $EXIT_LOG with the index of its controller call (warm-up calls first), the depth, the drafted nodes' path chances
(scaled by their scores), the planned conditionals of the deeper positions, and the draft/verify seconds it priced.

    EXIT_LOG=out.jsonl .venv/bin/python benchmarks/results/goodput/checks_s65/exit_replay.py bench --preset full \\
        --per-category 5 --max-new-tokens 128 --repeats 1 --drafter none --drafter layer_skip \\
        --out /tmp/replay --no-progress --fresh
"""
import json
import os
import sys

from specdec import chain_exit, cli
from specdec import controller as goodput

LOG = open(os.environ["EXIT_LOG"], "a")
CALLS = {"finished": 0}  # controller calls finished so far: a line's "call" is the index of the call it belongs to
_keep, _finish = chain_exit.ExitRow.keep_drafting, goodput.GoodputController.finish


def finish(self):
    _finish(self)
    CALLS["finished"] += 1


def keep_drafting(self, depth, score):
    go = _keep(self, depth, score)
    if not go or depth >= len(self.conditionals):
        LOG.write(json.dumps({
            "call": CALLS["finished"], "depth": depth, "go": go, "budget": len(self.conditionals),
            "score": round(score, 3), "means": [round(m, 3) for m in self.score_means],
            "paths": [round(p, 3) for p in self.paths],
            "conditionals": [round(c, 3) for c in self.conditionals],
            "draft_ms": [round(1e3 * s, 3) for s in self.draft],
            "verify_ms": [round(1e3 * s, 3) for s in self.verify],
            "overheads_ms": [round(1e3 * s, 3) for s in self.overheads]}) + "\n")
    return go


chain_exit.ExitRow.keep_drafting = keep_drafting
goodput.GoodputController.finish = finish
sys.exit(cli.main(sys.argv[1:]))
