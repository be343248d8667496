"""Interleaved A/B of a free drafter's least look (`controller.FREE_NODES`: the nodes anpd proposes every step before
the cut decides, grown past it by what the row's drafts reached, `GoodputController._free_budget`). The harness of
`benchmarks/scripts/goodput/ab_rules.py` (one drafter and cost model per cell, kept across calls; every first turn of
the categories, 128 new tokens, the cell order reversed every other prompt); the old cells run with FREE_NODES set to
OLD (default 16), the new ones with the code's value; REFERENCE names more cells (`;`-separated drafter specs) run
once. A figure is `none`'s process CPU time over the cell's, per category and overall; steps in brackets.

    OMP_NUM_THREADS=1 REFERENCE="anpd:schedule=constant" .venv/bin/python \
        benchmarks/results/goodput/checks_s67/ab_free_nodes.py mt_bench,translation,summarization,qa,math_reasoning,rag 2 anpd
"""
import os
import sys
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts/goodput"))
from ab_rules import run_ab  # noqa: E402

from specdec import controller  # noqa: E402

print(f"FREE_NODES: old {os.environ.get('OLD', '16')}, new {controller.FREE_NODES}", flush=True)
run_ab(sys.argv[1].split(","), int(sys.argv[2]), sys.argv[3:],
       lambda: [mock.patch.object(controller, "FREE_NODES", int(os.environ.get("OLD", "16")))],
       filter(None, os.environ.get("REFERENCE", "").split(";")))
