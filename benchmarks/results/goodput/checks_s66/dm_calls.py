"""Per call, draft_model (the controller) against its heuristic rule in the committed sweeps: `none`'s fastest CPU time
over the cell's per call, and the controller's plain steps and chain depths on the first repeat. Reads only the sweeps'
`cells.jsonl` (no model runs).

    python3 benchmarks/results/goodput/checks_s66/dm_calls.py translation spec_bench spec_bench_8988e9a ...
"""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
category, folders = sys.argv[1], sys.argv[2:]
for folder in folders:
    cells = {}
    for line in open(ROOT / folder / "cells.jsonl"):
        row = json.loads(line)
        cells[row["cell"]["label"]] = row
    calls = [turn["call"] for sample in cells["none"]["samples"] if sample["category"] == category
             for turn in sample["turns"]]
    print(f"{folder}: calls {calls[0]}-{calls[-1]} ({category})")
    none = [min(call["cpu_times"]) for call in cells["none"]["calls"]]
    for label in ("draft_model", "draft_model(schedule=heuristic)"):
        cell = cells[label]["calls"]
        ratios = " ".join(f"{none[i] / min(cell[i]['cpu_times']):.2f}" for i in calls)
        stats = [cell[i]["stats"] for i in calls]
        plain = [s.get("controller", {}).get("plain_row_steps", "-") for s in stats]
        deep = [len(s["drafted_by_depth"]) for s in stats]
        print(f"  {label:32s} none/cell {ratios} | steps {[s['steps'] for s in stats]} plain {plain} "
              f"longest chain {deep} drafted {[sum(s['drafted_by_depth']) for s in stats]} "
              f"accepted {[sum(s['accepted_by_depth']) for s in stats]}")
