"""Interleaved A/B of stop 66's second change against its first state: the draft cost fit's ridge on its constant
(`DRAFT_RIDGE`: 1e-4 before, 10 after). The harness of `benchmarks/scripts/goodput/ab_rules.py` (one drafter and cost
model per cell, kept across calls; every first turn of the categories, 128 new tokens, the cell order reversed every
other prompt); the old cells run with the old ridge patched in; REFERENCE names more cells (`;`-separated drafter specs) run once. A figure is
`none`'s process CPU time over the cell's, per category and overall; steps in brackets.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s66/ab_ridge.py \
        mt_bench,translation,summarization,qa,math_reasoning,rag 2 layer_skip draft_model
"""
import os
import sys
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts/goodput"))
from ab_rules import run_ab  # noqa: E402

from specdec import costs  # noqa: E402

run_ab(sys.argv[1].split(","), int(sys.argv[2]), sys.argv[3:],
       lambda: [mock.patch.object(costs, "DRAFT_RIDGE", (1e-4,) + costs.DRAFT_RIDGE[1:])],  # f2f5d98
       filter(None, os.environ.get("REFERENCE", "").split(";")))
