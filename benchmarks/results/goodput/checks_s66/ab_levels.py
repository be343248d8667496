"""Interleaved A/B of stop 66's change against stop 65's rule: how a verify step's time teaches the cost curve (stop 65:
the grid points around its width at a rate of 0.25 alone; 66: the curve's level at LEVEL_RATE and the points at
POINT_RATE). The harness of `benchmarks/scripts/goodput/ab_rules.py` (one drafter and cost model per cell, kept across
calls; every first turn of the categories, 128 new tokens, the cell order reversed every other prompt); the old cells
run with stop 65's rates patched in; REFERENCE names more cells (`;`-separated drafter specs) run once. A figure is
`none`'s process CPU time over the cell's, per category and overall; steps in brackets.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s66/ab_levels.py \
        mt_bench,translation,summarization,qa,math_reasoning,rag 2 layer_skip draft_model anpd ppd
"""
import os
import sys
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts/goodput"))
from ab_rules import run_ab  # noqa: E402

from specdec import costs  # noqa: E402

run_ab(sys.argv[1].split(","), int(sys.argv[2]), sys.argv[3:],
       lambda: [mock.patch.object(costs, "LEVEL_RATE", 0.0),  # stop 65: no level, the grid points at 0.25
               mock.patch.object(costs, "POINT_RATE", 0.25)],
       filter(None, os.environ.get("REFERENCE", "").split(";")))
