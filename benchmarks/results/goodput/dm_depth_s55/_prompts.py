"""What every script of this folder starts from: the default pair (one torch thread) and Spec-Bench's first turns, 5
prompts per category, encoded for 128 new tokens; and the host-time measurement `step_host_time.py` and stop 53's
`host_work_s53/host_time.py` share."""
import time

import torch
from specdec.benchmarks.datasets import PromptBuilder, load_dataset

import specdec
from specdec.costs import CostModel, device_key
from specdec.target import context_length
from specdec.zoo import DefaultModels


def default_pair_and_prompts(categories: list[str]) -> tuple[DefaultModels, list[tuple[str, list[int]]]]:
    """(the default pair, [(category, prompt ids)] of the categories' first turns in Spec-Bench's order)."""
    torch.set_num_threads(1)
    pair = specdec.load_default()
    builder = PromptBuilder(pair.tokenizer, context_length(pair.target), 128)
    return pair, [(s.category, builder.encode([], s.turns[0])[0])
                  for s in load_dataset("spec_bench", per_category=5) if s.category in categories]


def host_time_per_step(target, prompts: list[list[int]], cells: dict[str, dict]) -> dict[str, list[float]]:
    """Per cell (generate options), summed over the prompts (128 new tokens each, cells interleaved, each with a cost
    model of its own warmed by one short call): [draft, verify and other seconds by the engine's phase timers, process
    CPU seconds, steps, drafted row-steps]."""
    models = {name: CostModel(device_key("cpu")) for name in cells}
    for name, options in cells.items():
        specdec.generate(target, prompts[0], max_new_tokens=16, cost_model=models[name], **options)
    totals = {name: [0.0] * 6 for name in cells}
    for prompt in prompts:
        for name, options in cells.items():
            started = time.process_time()
            stats = specdec.generate(target, prompt, max_new_tokens=128, cost_model=models[name], **options).stats
            parts = (stats.draft_time, stats.verify_time, stats.other_time, time.process_time() - started, stats.steps,
                     stats.steps - stats.no_draft_row_steps)
            totals[name] = [total + part for total, part in zip(totals[name], parts)]
    return totals
