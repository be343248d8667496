"""draft_model on the default pair, Spec-Bench prompts of the categories (128 new tokens), each cell with a cost model of its
own, every prompt under each cell in turn: per call and summed, steps, drafted and accepted tokens, draft and verify
seconds, the controller's plain reasons and probes. Cells: `reach` (the controller since stop 61), `noreach` (the draft
model's chains held to the plan's length: `follows_exit` patched to False). Run from the repository root:
`OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s61/dm_totals.py summarization,rag noreach reach`"""
import sys
from unittest import mock

sys.path.insert(0, "benchmarks/results/goodput/variant_ab_s52")
from _prompts import default_pair_and_prompts  # noqa: E402
from specdec.drafters.draft_model import DraftModelDrafter

import specdec
from specdec.costs import CostModel, device_key

pair, calls = default_pair_and_prompts(sys.argv[1].split(","))
cells = sys.argv[2:]  # e.g. reach noreach
cms = {c: CostModel(device_key("cpu")) for c in cells}
for c in cells:
    specdec.generate(pair.target, calls[0][1], max_new_tokens=16, cost_model=cms[c], drafter="draft_model", drafter_options={"model": pair.draft})
tot = {c: [0]*7 for c in cells}
for cat, ids in calls:
    for c in cells:
        with mock.patch.object(DraftModelDrafter, "follows_exit", lambda self, follows=c == "reach": follows):
            st = specdec.generate(pair.target, ids, max_new_tokens=128, cost_model=cms[c], drafter="draft_model", drafter_options={"model": pair.draft}).stats
        parts = [st.steps, sum(st.drafted_per_step), sum(st.accepted_per_step), st.draft_time, st.verify_time, st.other_time, st.new_tokens]
        tot[c] = [a + b for a, b in zip(tot[c], parts)]
        print(cat, c, parts[:3], f"{parts[3]:.2f} {parts[4]:.2f}", st.controller.get("plain_reasons"), st.controller.get("probes"), flush=True)
for c, (steps, dr, acc, d, v, o, n) in tot.items():
    print(f"{c:8s} steps {steps} drafted {dr} accepted {acc} ({acc/max(dr,1):.2f}) draft {d:.2f}s verify {v:.2f}s other {o:.2f}s tokens {n}")
