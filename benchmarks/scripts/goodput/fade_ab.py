"""Interleaved A/B of stop 40's controller change (evidence fading between verdicts, and a plain row's probe
wait pricing one interval's catch-up) against the behaviour before it, on Spec-Bench prompts:

    OMP_NUM_THREADS=1 python benchmarks/scripts/goodput/fade_ab.py --drafter draft_model --rounds 3
    OMP_NUM_THREADS=1 python benchmarks/scripts/goodput/fade_ab.py --drafter layer_skip --rounds 2

Cells: `none`; the drafter under the controller as before (STEP_FADE = 1, the wait priced at the row's current
catch-up); the drafter as now; its own rule where it has one (draft_model: transformers' heuristic; layer_skip:
schedule=own; anpd: schedule=constant; `--own key=value` for others).
Every prompt runs under every cell in turn (drift hits all cells alike), each cell with its own drafter and
CostModel (as the harness's separate cells). A prompt's ratio is `none`'s process CPU time over the cell's
(outputs are checked equal); printed after each round: means per category and overall, cumulative.
"""

from __future__ import annotations

import argparse
import time
from statistics import mean

import torch
from specdec.benchmarks.datasets import PromptBuilder, load_dataset
from specdec.benchmarks.goodput_ab import make_drafter

import specdec
import specdec.acceptance as acceptance
from specdec.controller import GoodputController
from specdec.costs import CostModel, device_key
from specdec.target import context_length


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--drafter", default="draft_model")
    parser.add_argument("--own", default=None, help="the drafter's own rule as key=value (default: draft_model "
                        "schedule=heuristic, layer_skip schedule=own, anpd schedule=constant; none for others)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    fade = acceptance.STEP_FADE
    probe_wait = GoodputController._probe_wait
    before = {"on": False}

    def wait(self, option, instead=0.0, row_seconds=None, lag=None):  # before: the row's current catch-up
        return probe_wait(self, option, instead, row_seconds, None if before["on"] else lag)

    GoodputController._probe_wait = wait
    pair = specdec.load_default()
    target = pair.target
    builder = PromptBuilder(pair.tokenizer, context_length(target), 128)
    prompts = [(s.category, builder.encode([], s.turns[0])[0]) for s in load_dataset("spec_bench", per_category=5)]
    rules = {"draft_model": "schedule=heuristic", "layer_skip": "schedule=own", "anpd": "schedule=constant"}
    rule = args.own or rules.get(args.drafter)
    cells = [("none", None, True, None), ("before", args.drafter, True, True), ("now", args.drafter, True, False)]
    if rule:
        cells.append(("own rule", f"{args.drafter}:{rule}", args.drafter != "draft_model", None))
    drafters = {name: make_drafter(cell, pair.draft) if cell else None for name, cell, _, _ in cells}
    costs = {name: CostModel(device_key("cpu")) for name, *_ in cells}

    def run(name: str, controller: bool, old: bool | None, prompt: list[int], tokens: int):
        if old is not None:
            before["on"] = old
            acceptance.STEP_FADE = 1.0 if old else fade
        return specdec.generate(target, prompt, drafter=drafters[name], max_new_tokens=tokens,
                                controller=controller, cost_model=costs[name])

    for name, _, controller, old in cells:  # warm-up
        run(name, controller, old, prompts[0][1], 16)
    categories = list(dict.fromkeys(category for category, _ in prompts))
    ratios: dict[str, dict[str, list[float]]] = {name: {} for name, *_ in cells[1:]}
    for round_index in range(args.rounds):
        for category, prompt in prompts:
            seconds, outputs = {}, {}
            for name, _, controller, old in cells:
                started = time.process_time()
                outputs[name] = run(name, controller, old, prompt, 128).sequences
                seconds[name] = time.process_time() - started
            for name in ratios:
                assert outputs[name] == outputs["none"], name
                ratios[name].setdefault(category, []).append(seconds["none"] / seconds[name])
        print(f"after round {round_index + 1}:", flush=True)
        for name, per in ratios.items():
            figures = {category[:5]: round(mean(per[category]), 3) for category in categories}
            overall = mean(ratio for category in categories for ratio in per[category])
            print(f"  {name:9s} {figures} overall {overall:.3f}", flush=True)


if __name__ == "__main__":
    main()
