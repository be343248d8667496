"""Second pair, quick preset's prompts (2 per category, 64 new tokens): cells interleaved per prompt, each cell with a
cost model of its own; CPU time of none over each cell's, per category and overall, and its drafted row-steps.
`python sm_ab.py ROUNDS cell...`; a cell `draft_model+oldridge` runs with the draft fit's single ridge (before b6770ba)."""
import sys
import time
from unittest import mock

from _second_pair import draft, interleaved_table
from _second_pair import target as tgt

import specdec
import specdec.costs

rounds, cells = int(sys.argv[1]), sys.argv[2:]
def run(cell, ids, cm):
    name, _, switch = cell.partition("+")
    patches = [mock.patch.object(specdec.costs, "DRAFT_RIDGE", 1e-4)] if switch == "oldridge" else []
    for patch in patches:
        patch.start()
    try:
        t0 = time.process_time()
        out = specdec.generate(tgt, ids, max_new_tokens=64, cost_model=cm, drafter=name,
                               drafter_options={"model": draft} if name == "draft_model" else {})
        return time.process_time() - t0, out.stats.steps - out.stats.no_draft_row_steps
    finally:
        for patch in patches:
            patch.stop()
interleaved_table(cells, rounds, run)
