"""The kernel choice each process makes for the default target: timed (`packed_view(model)`) and fixed
(`packed_view(model, timed=False)`, what seeded sampled calls run), in N fresh processes.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s79/crossovers_per_process.py N > OUT.txt

Run it alone and while other jobs load the CPU: the timed choice can differ between processes under load, the
fixed one cannot.
"""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import torch
torch.set_num_threads(1)
import specdec
from specdec import cpu_linear
from specdec.attention import attention_view
viewed = attention_view(specdec.load_default().target)
def rows(view):
    return {f"{m.source.out_features}x{m.source.in_features}": m.min_rows
            for m in view.modules() if isinstance(m, cpu_linear.PackedLinear)}
print("fixed", rows(cpu_linear.packed_view(viewed, timed=False)), "timed", rows(cpu_linear.packed_view(viewed)))
"""


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"# library {commit}: {count} processes; per layer shape (outputs x inputs), the rows from which oneDNN "
          "runs (33: never)")
    for index in range(count):
        out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True).stdout
        print(f"process {index + 1}: {out.strip()}")


if __name__ == "__main__":
    main()
