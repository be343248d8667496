"""Stop 75, tried and reverted: `GoodputController._judge_looks` crediting a static batch's looking step with its tokens at
the worth the cut priced them (`row_weights`; "new judge", as it was written then) against the fall in the most tokens
any row has left ("old judge", kept), and anpd's constant schedule (k=2, min_match=2, no controller), static unpadded
batches of B (or continuous), interleaved rounds against batched plain decoding. Its "new judge" is the installed one:
run it with `judge_weights.patch` applied (`git apply`; it patches the old judge in for its cell).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s75/judge_ab.py 8 6 static
"""

import sys
import time

import numpy as np
import torch
from specdec.benchmarks.batching import load_prompts, run_cell

import specdec
import specdec.costs as costs
from specdec import controller as ctl
from specdec.controller import (
    FIRST_REST,
    FRUITLESS_LOOKS,
    LOOK_BALANCE_DECAY,
    MAX_BATCH_REST,
    batch_bucket,
    mean_context,
)

torch.set_num_threads(1)
B = int(sys.argv[1])
rounds = int(sys.argv[2])
mode = sys.argv[3]
drafter = sys.argv[4] if len(sys.argv) > 4 else "anpd"
pair = specdec.load_default()
target, tok = pair.target, pair.tokenizer
prompts = load_prompts(tok, target.config.max_position_embeddings, 16, 64, 384)
batches = [prompts[i : i + B] for i in range(0, 16, B)]


def old_judge(self, plan, accepted, timings):
    if not (plan.plain or any(plan.free)):
        return
    count = len(plan.choice)
    spent = sum(timings.get(key) or 0.0 for key in ("draft", "verify", "other"))
    context = mean_context(plan.contexts)
    price = self.table.verify(count, count, self.packed, context) + self._overhead(False)
    if spent <= 0 or price <= 0:
        return
    if plan.plain:
        ratio = spent / price
        self._plain_ratio = ratio if self._plain_ratio is None else 0.9 * self._plain_ratio + 0.1 * ratio
        return
    if plan.base is None or not plan.left:
        progress = 1.0 + sum(accepted) / count
    else:
        progress = max(plan.left) - max(0, max(left - a - 1 for left, a in zip(plan.left, accepted)))
    gain = progress * price * (self._plain_ratio or 1.0) - spent
    self._look_balance = LOOK_BALANCE_DECAY * self._look_balance + gain
    self._looks_since_rest += 1
    rests, key = self.table.batch_rests, (self.name, batch_bucket(count), plan.base is not None)
    if gain > 0 and self._look_balance > 0:
        rests[key] = FIRST_REST
    elif self._look_balance < 0 and self._looks_since_rest >= FRUITLESS_LOOKS:
        self._batch_rest = rests.get(key, FIRST_REST)
        rests[key] = min(MAX_BATCH_REST, 2 * self._batch_rest)
        self._look_balance, self._looks_since_rest = 0.0, 0


new_judge = ctl.GoodputController._judge_looks
dm = {"model": pair.draft} if drafter == "draft_model" else {}
cells = [("none", None, None), ("old judge", dm, old_judge), ("new judge", dm, new_judge)]
if drafter == "anpd":
    cells.append(("const k2 mm2", {"schedule": "constant", "k": 2, "min_match": 2}, None))
cms = {n: costs.CostModel(costs.device_key("cpu")) for n, *_ in cells}
times = {n: [] for n, *_ in cells}
info = {}
for r in range(-1, rounds):
    for name, o, judge in cells:
        if judge is not None:
            ctl.GoodputController._judge_looks = judge
        c0 = time.process_time()
        if mode == "cont":
            outs = [
                run_cell(
                    target,
                    prompts,
                    "continuous",
                    "none" if o is None else drafter,
                    o or {},
                    64,
                    max_batch_size=B,
                    cost_model=cms[name],
                )
            ]
        elif o is None:
            outs = [run_cell(target, b, "autoregressive", "none", {}, 64) for b in batches]
        else:
            outs = [run_cell(target, b, "unpadded", drafter, o, 64, cost_model=cms[name]) for b in batches]
        dt = time.process_time() - c0
        ctl.GoodputController._judge_looks = new_judge
        if r >= 0:
            times[name].append(dt)
            s = [x.stats for x in outs]
            info[name] = (
                sum(x.new_tokens for x in s) / sum(x.steps for x in s),
                sum(x.batch_steps for x in s),
                np.mean([x.no_draft_share for x in s]),
            )
for name, *_ in cells:
    ratios = np.array(times["none"]) / np.array(times[name])
    print(
        f"B={B} {mode} {drafter} {name:13s} speed/none {ratios.mean():.3f} +- {ratios.std(ddof=1) / np.sqrt(len(ratios)):.3f} tau {info[name][0]:.2f} batch steps {info[name][1]} no-draft {info[name][2]:.2f}",
        flush=True,
    )
rel = np.array(times["old judge"]) / np.array(times["new judge"])
print(f"  new over old judge: {rel.mean():.3f} +- {rel.std(ddof=1) / np.sqrt(len(rel)):.3f}", flush=True)
