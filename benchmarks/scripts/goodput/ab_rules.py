"""The interleaved A/B harness of stops 65-66's rule checks: `none`, optional reference cells, and per drafter an
old cell (the old rule patched in) beside a new one; one drafter and cost model per cell, kept across calls; every
first turn of the categories, 128 new tokens, the cell order reversed every other prompt. Prints, per category and
overall, `none`'s process CPU time over each cell's, with its steps in brackets. Used by
`benchmarks/results/goodput/checks_s65/ab_corrections.py` and `checks_s66/ab_levels.py`, `ab_ridge.py`."""
import sys
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "results/goodput/variant_ab_s52"))
from _prompts import default_pair_and_prompts  # noqa: E402  (stop 52's helper)

import specdec  # noqa: E402
from specdec import costs, registry  # noqa: E402


def run_ab(categories: list[str], rounds: int, drafters: Iterable[str],
           old_rule: Callable[[], Iterable[AbstractContextManager]], references: Iterable[str] = ()) -> None:
    """`old_rule()`: the patches that put the old rule in place, entered around every call of an old cell;
    `references`: drafter specs run once, under the new rules."""
    pair, calls = default_pair_and_prompts(categories)

    def drafter_of(spec: str):
        """`name[:key=value,...]`; draft_model gets the bundled draft."""
        name, _, given = spec.partition(":")
        options = dict(item.split("=") for item in filter(None, given.split(",")))
        if name == "draft_model":
            options["model"] = pair.draft
        return registry.create("drafter", name, options)

    def fresh(spec: str, old: bool = False):
        return drafter_of(spec), costs.CostModel(costs.device_key("cpu")), old

    cells = {"none": fresh("none")}
    cells.update({spec: fresh(spec) for spec in references})
    for name in drafters:
        cells[f"old:{name}"], cells[f"new:{name}"] = fresh(name, old=True), fresh(name)
    order = list(cells)

    def run(spec: str, ids: list[int], tokens: int):
        drafter, model, old = cells[spec]
        with ExitStack() as stack:
            for patch in old_rule() if old else ():
                stack.enter_context(patch)
            return specdec.generate(pair.target, ids, max_new_tokens=tokens, drafter=drafter, cost_model=model)

    for spec in order:
        run(spec, calls[0][1], 16)
    totals = {(spec, cat): [0.0, 0] for spec in order for cat in categories}
    for round_index in range(rounds):
        for i, (cat, ids) in enumerate(calls):
            for spec in (order if (i + round_index) % 2 == 0 else order[::-1]):
                started = time.process_time()
                out = run(spec, ids, 128)
                totals[spec, cat][0] += time.process_time() - started
                totals[spec, cat][1] += out.stats.steps
    for cat in categories + ["all"]:
        chosen = categories if cat == "all" else [cat]
        base = sum(totals["none", c][0] for c in chosen)
        print(cat + ": " + " | ".join(f"{spec} {base / sum(totals[spec, c][0] for c in chosen):.3f} "
                                      f"({sum(totals[spec, c][1] for c in chosen)})" for spec in order), flush=True)
