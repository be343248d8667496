"""Stop 73: `specdec bench` with every call's GenerationStats kept, in every repeat (the harness keeps the first
repeat's only), one JSON line a call: where draft_model's quiet calls spend time beyond `none`'s.

    OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/results/goodput/checks_s73/dm_repeats.py OUT.jsonl -- \\
        <specdec bench arguments>
"""
import json
import sys
import time

import specdec.benchmarks.execute as execute

from specdec.cli import main

log = open(sys.argv[1], "w")
harness_method = execute.specdec_method


def logged_method(cell, loaded, reference):
    run = harness_method(cell, loaded, reference)
    index = [0]

    def logged(prompts):
        started = time.process_time()
        sequences, stats, lossless = run(prompts)
        cpu = time.process_time() - started
        control = stats.controller or {}
        log.write(json.dumps({
            "cell": cell.cell_id, "label": cell.label, "call": index[0], "cpu": cpu, "setup": stats.setup_cpu_time,
            "prefill": stats.prefill_time, "draft": stats.draft_time, "verify": stats.verify_time,
            "other": stats.other_time, "steps": stats.steps, "nodraft": stats.no_draft_row_steps,
            "probes": control.get("probes", 0), "fwd": (stats.drafter_stats or {}).get("draft_forwards", 0)}) + "\n")
        log.flush()
        index[0] += 1
        return sequences, stats, lossless

    return logged


execute.specdec_method = logged_method
sys.exit(main(["bench"] + sys.argv[3:]))
