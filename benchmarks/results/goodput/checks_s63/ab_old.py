"""batch_ab.py with a switch `old`: main's (41e0015) row_weights (pace-divided tokens, tied rows credited with
the others' first-node acceptance)."""
import subprocess
import sys
from unittest import mock

sys.path.insert(0, "benchmarks/scripts/goodput")
import batch_ab

from specdec import controller as goodput

src = subprocess.run(["git", "show", "41e0015:specdec/controller.py"], capture_output=True, text=True).stdout
start, end = src.index("def row_weights("), src.index("def lane_ends(")
ns = {"Sequence": goodput.Sequence, "Waiting": goodput.Waiting, "lane_ends": goodput.lane_ends}
exec("from __future__ import annotations\n" + src[start:end], ns)
old_row_weights = ns["row_weights"]

def old_weights(self, row_ids, max_depth, waiting, parts):
    if parts is None:
        return [1.0] * len(row_ids), None
    rows = [self.rows[r] for r in row_ids]
    return old_row_weights(max_depth, [row.pace for row in rows], waiting, *parts,
                           [row.estimates[row.member or self.order[0]].conditional(0) for row in rows])

batch_ab.SWITCHES["old"] = lambda: [mock.patch.object(goodput.GoodputController, "_weights", old_weights)]
batch_ab.main()
