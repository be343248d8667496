"""Summarise `exit_replay.py`'s log: per controller call, where the exit stopped chains (depth: times), the plan's
budgets, the step in priced verify time from the stop's width to the next one (ms: times), and the least planned
conditional past the stop; then the first records of the calls named.

    python benchmarks/results/goodput/checks_s65/exit_show.py replays/exit_s64.jsonl 23,35
"""
import collections
import json
import sys

rows = [json.loads(line) for line in open(sys.argv[1])]
shown = {int(x) for x in sys.argv[2].split(",")} if len(sys.argv) > 2 else set()
by_call = collections.defaultdict(list)
for row in rows:
    by_call[row["call"]].append(row)
for call, records in sorted(by_call.items()):
    stops = [r for r in records if not r["go"]]
    jumps = collections.Counter(round(r["verify_ms"][r["depth"] + 1] - r["verify_ms"][r["depth"]], 1)
                                for r in stops if r["depth"] + 1 < len(r["verify_ms"]))
    deepest = collections.Counter(round(min(r["conditionals"][r["depth"]:] or [1.0]), 2) for r in stops)
    print(f"call {call}: {len(stops)} stops; depth {collections.Counter(r['depth'] for r in stops).most_common(3)}; "
          f"budget {collections.Counter(r['budget'] for r in stops).most_common(2)}; "
          f"verify step ms {jumps.most_common(3)}; least conditional past {deepest.most_common(3)}")
for call in sorted(shown):
    for r in by_call[call][:3]:
        print(json.dumps(r))
