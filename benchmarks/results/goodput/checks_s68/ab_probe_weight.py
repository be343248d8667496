"""Interleaved A/B of how drafter="auto" splits a row's probe budget among its members (`_probe_weight`): old cells
split it evenly among all members (1 / the member count, as before stop 68), new ones among the costly members by
how often each may probe (1 / `_probe_discount`). The harness of `benchmarks/scripts/goodput/ab_rules.py` (one drafter
and cost model per cell, kept across calls; every first turn of the categories, 128 new tokens, the cell order
reversed every other prompt); REFERENCE names more cells (`;`-separated drafter specs) run once. A figure is `none`'s
process CPU time over the cell's, per category and overall; steps in brackets.

    OMP_NUM_THREADS=1 REFERENCE="layer_skip:schedule=own" .venv/bin/python \\
        benchmarks/results/goodput/checks_s68/ab_probe_weight.py mt_bench,translation,summarization,qa,math_reasoning,rag 2 auto
"""
import os
import sys
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts/goodput"))
from ab_rules import run_ab  # noqa: E402

from specdec import controller  # noqa: E402


def even_split(self, name):
    """Before stop 68: every member an equal part."""
    return 1.0 / len(self.order)


run_ab(sys.argv[1].split(","), int(sys.argv[2]), sys.argv[3:],
       lambda: [mock.patch.object(controller.GoodputController, "_probe_weight", even_split)],
       filter(None, os.environ.get("REFERENCE", "").split(";")))
