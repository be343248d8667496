"""Stop 72: checks_s71/ab_order.py with two more variants, `nofp` and `noslot`, which set the module switches
`specdec.controller.FIRST_PROBE_BESIDE_PICK` and `SLOT_PROBE_INSTEAD` to False (the rules before c77ae47). Those
switches existed only in the working tree the A/Bs ran on (40d016b plus the diff in this folder's README); c77ae47
made both rules unconditional, so on later commits this script needs that diff applied again.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s72/ab_switches.py --upto rag --rounds 5 \\
        auto+nofp+noslot auto+noslot auto
"""
import sys
from unittest import mock

from specdec import controller as goodput

src = open("benchmarks/results/goodput/checks_s71/ab_order.py").read()
extra = ('VARIANTS = {\n'
         '    "nofp": lambda: [mock.patch.object(goodput, "FIRST_PROBE_BESIDE_PICK", False)],\n'
         '    "noslot": lambda: [mock.patch.object(goodput, "SLOT_PROBE_INSTEAD", False)],\n')
src = src.replace('VARIANTS = {\n', extra)
sys.argv = ["ab_order.py"] + sys.argv[1:]
exec(compile(src, "ab_order.py", "exec"), {"__name__": "__main__", "mock": mock, "goodput": goodput})
