"""`specdec bench` with `specdec.cpu_linear`'s kernel rule from before 211ec98 (each layer shape timed alone and warm:
STREAM_BYTES = 0). Stop 71 ran the second pair's command through it (`../second_model_s71_old_rule/`):

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s71/bench_old_rule.py bench --preset quick \\
        --model /work/second/target --draft /work/second/draft128/final --repeats 10 --threads 1 --baseline hf_generate \\
        --drafter none --drafter none:label=none-again --drafter anpd --drafter anpd:schedule=constant \\
        --drafter draft_model:model=@draft --drafter draft_model:model=@draft,schedule=heuristic \\
        --no-progress --fresh --out /work/runs/s71_sm_old
"""
import sys

from specdec import cpu_linear
from specdec.cli import main

cpu_linear.STREAM_BYTES = 0
sys.exit(main())
