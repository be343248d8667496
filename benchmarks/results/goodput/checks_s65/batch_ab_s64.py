"""`benchmarks/scripts/goodput/batch_ab.py` with one more switch, `s64`: the cell runs under stop 64's cost-curve and
new-position rules (`stop64_rules.py`), to A/B stop 65's fixes in batches.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s65/batch_ab_s64.py --sizes 2 4 --rounds 2 \\
        anpd+s64 anpd
"""
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
sys.path.insert(0, str(here))
sys.path.insert(0, str(here.parents[2] / "scripts" / "goodput"))
import batch_ab  # noqa: E402
from stop64_rules import patches  # noqa: E402

batch_ab.SWITCHES["s64"] = patches
batch_ab.main()
