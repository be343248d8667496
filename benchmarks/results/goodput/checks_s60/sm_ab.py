"""Second pair, quick preset's prompts (2 per category, 64 new tokens): cells interleaved per prompt, each cell with a
cost model of its own; CPU time of none over each cell's, per category and overall, and its drafted row-steps.
`python sm_ab.py ROUNDS cell...`; a cell is `drafter[:option=value,...][@controller_option=value,...]` (draft_model gets
the second pair's draft; controller options since stop 62).
Stop 59's `checks_s59/sm_ab.py` with drafter options instead of its ridge switch."""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "checks_s59"))
from _second_pair import draft, interleaved_table  # noqa: E402  (stop 59's set-up)
from _second_pair import target as tgt  # noqa: E402

import specdec  # noqa: E402

rounds, cells = int(sys.argv[1]), sys.argv[2:]


def options(cell):
    head, _, controller = cell.partition("@")
    name, _, given = head.partition(":")
    opts = {"model": draft} if name == "draft_model" else {}
    for item in filter(None, given.split(",")):
        key, value = item.split("=")
        opts[key] = value
    return name, opts, {k: float(v) for k, v in (item.split("=") for item in filter(None, controller.split(",")))} or True


def run(cell, ids, cm):
    name, opts, controller = options(cell)
    t0 = time.process_time()
    out = specdec.generate(tgt, ids, max_new_tokens=64, cost_model=cm, drafter=name, drafter_options=opts,
                           controller=controller)
    return time.process_time() - t0, out.stats.steps - out.stats.no_draft_row_steps


interleaved_table(cells, rounds, run)
