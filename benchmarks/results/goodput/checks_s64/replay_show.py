"""Print a replay's calls (`sweep_replay.py`'s log, one line per controller call, the bench's warm-up calls first)
beside the steps each cell of the replay's `cells.jsonl` took on the same call.

    python replay_show.py replay_draft_model.log /work/scratch/s64/replay2_out/cells.jsonl [call,...]
"""
import json
import sys

log = [json.loads(line) for line in open(sys.argv[1])]
cells = {c["cell"]["label"]: c for c in map(json.loads, open(sys.argv[2]))}
chosen = {int(x) for x in sys.argv[3].split(",")} if len(sys.argv) > 3 else None
none = cells["none"]
calls = len(none["calls"])
log = log[len(log) - calls:]  # the timed repeat's calls
for index, entry in enumerate(log):
    if chosen is not None and index not in chosen:
        continue
    call = none["calls"][index]
    category = none["samples"][call["rows"][0]]["category"]
    steps = " ".join(f"{label} {cell['calls'][index]['stats']['steps']}" for label, cell in cells.items()
                     if cell['calls'][index].get('stats'))
    print(f"{index:2d} {category} turn {call['turn']} | {steps} | {' '.join(entry['steps'])}")
