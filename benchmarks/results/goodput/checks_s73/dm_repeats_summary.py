"""Stop 73: `dm_repeats.py`'s calls summed per cell, then per repeat (each cell's warm-up calls dropped: the quick
preset makes 14 calls a repeat).

    .venv/bin/python benchmarks/results/goodput/checks_s73/dm_repeats_summary.py FILE.jsonl
"""
import collections
import json
import sys

CALLS = 14
records = [json.loads(line) for line in open(sys.argv[1])]
by_cell: dict[str, list[dict]] = collections.defaultdict(list)
for record in records:
    by_cell[record["label"]].append(record)
print("calls per cell", {label: len(calls) for label, calls in by_cell.items()})
for label, calls in by_cell.items():
    by_cell[label] = calls[len(calls) % CALLS:]
keys = ["cpu", "setup", "prefill", "draft", "verify", "other", "steps", "nodraft", "probes", "fwd"]
for label, calls in by_cell.items():
    totals = {key: sum(call[key] for call in calls) for key in keys}
    print(f"{label:12s}", " ".join(f"{key} {value:.3f}" if isinstance(value, float) else f"{key} {value}"
                                   for key, value in totals.items()))
labels = list(by_cell)
for repeat in range(len(by_cell[labels[0]]) // CALLS):
    parts = []
    for label in labels:
        calls = by_cell[label][repeat * CALLS:(repeat + 1) * CALLS]
        parts.append(f"{label[:6]} cpu {sum(c['cpu'] for c in calls):.3f} set {sum(c['setup'] for c in calls) * 1e3:5.0f} "
                     f"oth {sum(c['other'] for c in calls) * 1e3:4.0f} dr {sum(c['draft'] for c in calls) * 1e3:4.0f} "
                     f"pr {sum(c['probes'] for c in calls)} drafted {sum(c['steps'] - c['nodraft'] for c in calls)}")
    print(repeat, " | ".join(parts))
