"""Stop 76: anpd under the goodput controller against fixed rules (anpd's constant schedule, no controller) and against
the controller with one of its parts switched off, in batches of B (the batching benchmark's 16 prompts, 64 new tokens,
exact verifier), static unpadded or continuous, interleaved for ROUNDS rounds after a warm-up round, beside batched
plain decoding twice (`none2`: the A/A). Each cell keeps one cost model over its rounds. Prints each cell's CPU-time
ratio to `none` (mean, standard error, per round) and tau.

Each cell is a JSON object of anpd options, with three keys of its own: `_patch` sets specdec.controller constants for
the cell (e.g. {"FRUITLESS_LOOKS": 100000}: the batch never rests from its looks), `_alike` weighs every row's tokens
alike (`row_weights` as in a long queue), `_keep` makes the cut keep every node proposed (the controller still plans,
rests and learns), `_rows_judge` judges a continuous batch's last-wave looks on its rows alone (`_judge_looks` before
stop 76's change: the waiting prompts left out of the progress), `_tag` only makes a cell's name unique (the same cell twice, another place
in the round).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s76/fixed_vs_controller.py 4 8 continuous \
        anpd '{}' '{"schedule":"constant","k":2,"min_match":2}'
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
base = {"model": pair.draft} if drafter == "draft_model" else {}
cells = [("none", "none", {}), ("none2", "none", {})] + [
    (f"{drafter}{json.dumps(o)}", drafter, {**base, **o}) for o in option_sets
]
models = {name: costs.CostModel(device) for name, _, _ in cells}
times: dict[str, list[float]] = {name: [] for name, _, _ in cells}
taus: dict[str, list[float]] = {name: [] for name, _, _ in cells}


def alike(remaining, *args, **kwargs):
    return [1.0] * len(remaining), None


original_solve = ctl.GoodputController._solve


original_judge = ctl.GoodputController._judge_looks


def rows_judge(self, plan, accepted, timings):
    queued, plan.queued = plan.queued, []
    try:
        return original_judge(self, plan, accepted, timings)
    finally:
        plan.queued = queued


def keep_all(self, rows, batch, draft_seconds, base=None, margin=0.0):
    if draft_seconds is not None:  # the cut (after drafting): keep what was proposed
        return [len(r.probs) for r in rows]
    return original_solve(self, rows, batch, draft_seconds, base, margin)


for round_index in range(-1, rounds):
    for name, cell_drafter, cell_options in cells:
        options = dict(cell_options)
        patch = dict(options.pop("_patch", {}))
        options.pop("_tag", None)
        if options.pop("_alike", False):
            patch["row_weights"] = alike
        ctl.GoodputController._solve = keep_all if options.pop("_keep", False) else original_solve
        ctl.GoodputController._judge_looks = (
            rows_judge if options.pop("_rows_judge", False) else original_judge
        )
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
        ctl.GoodputController._judge_looks = original_judge
        if round_index >= 0:
            times[name].append(seconds)
            taus[name].append(sum(o.stats.new_tokens for o in outs) / sum(o.stats.steps for o in outs))
for name, _, _ in cells:
    ratios = np.array(times["none"]) / np.array(times[name])
    print(
        f"B={B} {mode} {name:40s} speed/none {ratios.mean():.3f} +- {ratios.std(ddof=1) / np.sqrt(len(ratios)):.3f} "
        f"tau {np.mean(taus[name]):.2f} rounds {[round(float(x), 3) for x in ratios]}",
        flush=True,
    )
