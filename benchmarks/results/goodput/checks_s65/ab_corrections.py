"""Interleaved A/B of stop 65's two changes against stop 64's rules: how verify-cost corrections are read and learnt
between grid points (stop 64: a width reads and teaches the nearest grid point alone; 65: both neighbours, linearly)
and, with ACCEPTANCE=1, where a chain position verified for the first time enters (stop 64: at the prior; 65: at what
it was priced at). Same harness as `checks_s60/ab_kept.py` (one drafter and cost model per cell, kept across calls;
every first turn of the categories, 128 new tokens, the cell order reversed every other prompt); the old cells run
with stop 64's functions patched in; REFERENCE names more cells (`;`-separated drafter specs) run once. A figure is `none`'s process CPU time over the cell's, per category and overall; steps in brackets.

    ACCEPTANCE=1 REFERENCE="layer_skip:schedule=own" OMP_NUM_THREADS=1 .venv/bin/python \
        benchmarks/results/goodput/checks_s65/ab_corrections.py qa,rag 2 layer_skip anpd
"""
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts/goodput"))
from ab_rules import run_ab  # noqa: E402  (the harness, shared with stop 66's A/Bs since)
from stop64_rules import patches  # noqa: E402

run_ab(sys.argv[1].split(","), int(sys.argv[2]), sys.argv[3:],
       lambda: patches(os.environ.get("ACCEPTANCE") == "1"),
       filter(None, os.environ.get("REFERENCE", "").split(";")))
