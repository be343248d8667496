"""The second model pair (trained by `benchmarks/scripts/goodput/second_model_command.sh`'s recipe into /work/second)
and the quick preset's prompts (2 per category, first turns, room for 64 new tokens), in float32 with one torch thread:
what stop 59's scripts here run on; and the interleaved A/B table that `sm_ab.py` here and in `../checks_s60/` print
(moved here at stop 60 from this folder's `sm_ab.py`: the same loop)."""
import collections
from collections.abc import Callable

import torch
from specdec.benchmarks.datasets import PromptBuilder, load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

from specdec.costs import CostModel, device_key
from specdec.target import context_length

torch.set_num_threads(1)
target = AutoModelForCausalLM.from_pretrained("/work/second/target", dtype=torch.float32).eval()
draft = AutoModelForCausalLM.from_pretrained("/work/second/draft128/final", dtype=torch.float32).eval()
_builder = PromptBuilder(AutoTokenizer.from_pretrained("/work/second/target"), context_length(target), 64)
#: (category, prompt token ids)
calls = [(s.category, _builder.encode([], s.turns[0])[0]) for s in load_dataset("spec_bench", per_category=2)]


def interleaved_table(cells: list[str], rounds: int, run: Callable[[str, list[int], CostModel], tuple[float, int]]) -> None:
    """Every prompt under every cell in turn (the order rotated each prompt), each cell with a cost model of its own
    and warmed up by one call; `run(cell, ids, costs)` -> (CPU seconds, drafted row-steps). Prints the first cell's
    CPU time over each cell's, per category and overall, and each cell's drafted row-steps per round."""
    costs = {cell: CostModel(device_key("cpu")) for cell in cells}
    for cell in cells:
        run(cell, calls[0][1], costs[cell])
    totals = {cell: collections.Counter() for cell in cells}
    drafted: collections.Counter = collections.Counter()
    for round_index in range(rounds):
        for i, (category, ids) in enumerate(calls):
            shift = (i + round_index) % len(cells)
            for cell in cells[shift:] + cells[:shift]:
                seconds, steps = run(cell, ids, costs[cell])
                totals[cell][category] += seconds
                totals[cell]["overall"] += seconds
                drafted[cell] += steps
    categories = list(dict.fromkeys(category for category, _ in calls)) + ["overall"]
    print(f"# {rounds} rounds, none's CPU time over each cell's per category; drafted row-steps per round")
    print("cell | " + " | ".join(categories) + " | drafted")
    for cell in cells:
        print(cell + " | " + " | ".join(f"{totals[cells[0]][k] / totals[cell][k]:.3f}" for k in categories)
              + f" | {drafted[cell] / rounds:.1f}")
