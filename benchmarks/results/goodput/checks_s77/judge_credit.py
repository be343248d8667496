"""Stop 77: anpd under the goodput controller in batches of B, the looks' judge (`_judge_looks`) crediting a
weighed step with the cut's own weights (`_credit`, the library since stop 77) or with the fall of the batch's
last end (before), against anpd's fixed rule (the batching benchmark's 16 prompts, 64 new tokens, exact
verifier; static unpadded or continuous), interleaved for ROUNDS rounds after a warm-up round beside batched
plain decoding twice (`none2`: the A/A). Each cell keeps one cost model over its rounds. Prints each cell's
CPU-time ratio to `none` (mean, standard error, per round), tau, and per round its batch steps, drafted and
accepted nodes, steps with a draft, and the batch steps it saved against `none` per accepted token (what a
token was worth in hindsight, in steps).

Each cell is a JSON object of anpd options, with keys of its own: `_hard_max` credits a weighed looking step
with the fall of the last place's end (`lane_ends`, the library before stop 77); `_worth1` keeps every static
batch's learnt worth at 1 (`_learn_static_worth` off: the weights' credit as it is); `_floor` (and `_depth`)
make the cut keep each row's longest prefix whose nodes' estimates are all at least the floor (at most
`_depth` nodes); `_alike` weighs every row's tokens alike; `_patch` sets specdec.controller constants for the
cell.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s77/judge_credit.py 8 6 static \
        anpd '{"_hard_max":true}' '{}' '{"_worth1":true}' '{"schedule":"constant","k":2,"min_match":2}'
"""

import json
import sys
import time

import numpy as np
import torch
from specdec.benchmarks.batching import load_prompts, run_cell

import specdec
import specdec.costs as costs
from specdec import controller as ctl

torch.set_num_threads(1)
B, rounds, mode, drafter = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
option_sets = [json.loads(text) for text in sys.argv[5:]]
pair = specdec.load_default()
target, tok = pair.target, pair.tokenizer
prompts = load_prompts(tok, target.config.max_position_embeddings, 16, 64, 384)
device = costs.device_key(next(target.parameters()).device)
base_options = {"model": pair.draft} if drafter == "draft_model" else {}
cells = [("none", "none", {}), ("none2", "none", {})] + [
    (f"{drafter}{json.dumps(o)}", drafter, {**base_options, **o}) for o in option_sets
]
models = {name: costs.CostModel(device) for name, _, _ in cells}
times: dict[str, list[float]] = {name: [] for name, _, _ in cells}
taus: dict[str, list[float]] = {name: [] for name, _, _ in cells}
counts: dict[str, np.ndarray] = {name: np.zeros(4) for name, _, _ in cells}
original_solve = ctl.GoodputController._solve
original_credit = ctl.GoodputController._credit
original_learn = ctl.GoodputController._learn_static_worth


def alike(remaining, *args, **kwargs):
    return [1.0] * len(remaining), None


def hard_max_credit(self, plan, accepted):
    """The credit before stop 77: the fall of the last place's end (`lane_ends`), less the plain step's one."""
    after = [max(0, left - a - 1) for left, a in zip(plan.left, accepted)]
    return max(ctl.lane_ends(plan.left, plan.queued)) - max(ctl.lane_ends(after, plan.queued)) - 1.0


def floor_cut(floor, depth):
    def solve(self, rows, batch, draft_seconds, base=None, margin=0.0):
        if draft_seconds is None:  # before drafting: the plan's own pricing
            return original_solve(self, rows, batch, draft_seconds, base, margin)
        kept = []
        for r in rows:
            k = 0
            while k < min(len(r.probs), depth) and r.probs[k] >= floor:
                k += 1
            kept.append(max(k, min(r.forced, len(r.probs))))
        return kept

    return solve


for round_index in range(-1, rounds):
    for name, cell_drafter, cell_options in cells:
        options = dict(cell_options)
        patch = dict(options.pop("_patch", {}))
        if options.pop("_alike", False):
            patch["row_weights"] = alike
        if options.pop("_hard_max", False):
            ctl.GoodputController._credit = hard_max_credit
        if options.pop("_worth1", False):
            ctl.GoodputController._learn_static_worth = lambda self: None
        if "_floor" in options:
            ctl.GoodputController._solve = floor_cut(options.pop("_floor"), options.pop("_depth", 64))
        saved = {key: getattr(ctl, key) for key in patch}
        for key, value in patch.items():
            setattr(ctl, key, value)
        started = time.process_time()
        if mode == "continuous":
            outs = [
                run_cell(
                    target,
                    prompts,
                    "continuous",
                    cell_drafter,
                    options,
                    64,
                    max_batch_size=B,
                    cost_model=models[name],
                )
            ]
        else:
            outs = [
                run_cell(
                    target,
                    prompts[i : i + B],
                    "unpadded" if cell_drafter != "none" else "autoregressive",
                    cell_drafter,
                    options,
                    64,
                    cost_model=models[name],
                )
                for i in range(0, 16, B)
            ]
        seconds = time.process_time() - started
        for key, value in saved.items():
            setattr(ctl, key, value)
        ctl.GoodputController._solve = original_solve
        ctl.GoodputController._credit = original_credit
        ctl.GoodputController._learn_static_worth = original_learn
        if round_index >= 0:
            times[name].append(seconds)
            taus[name].append(sum(o.stats.new_tokens for o in outs) / sum(o.stats.steps for o in outs))
            for o in outs:
                s = o.stats
                counts[name] += [
                    s.batch_steps,
                    s.drafted_tokens,
                    s.accepted_tokens,
                    sum(1 for d in s.drafted_per_step if d),
                ]
none_steps = counts["none"][0] / rounds
for name, _, _ in cells:
    ratios = np.array(times["none"]) / np.array(times[name])
    print(
        f"B={B} {mode} {name:40s} speed/none {ratios.mean():.3f} +- {ratios.std(ddof=1) / np.sqrt(len(ratios)):.3f} "
        f"tau {np.mean(taus[name]):.2f} rounds {[round(float(x), 3) for x in ratios]}",
        flush=True,
    )
    steps, drafted, accepted, drafted_steps = counts[name] / rounds
    if drafted:
        print(
            f"    per round: batch steps {steps:.0f}, drafted {drafted:.0f}, accepted {accepted:.0f} "
            f"({accepted / drafted:.2f}), steps with a draft {drafted_steps:.0f}, "
            f"steps saved per accepted token {(none_steps - steps) / accepted:.3f}",
            flush=True,
        )
