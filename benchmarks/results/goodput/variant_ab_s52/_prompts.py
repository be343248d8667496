"""What every script of this folder starts from: the default pair (one torch thread) and Spec-Bench's first turns, 5
prompts per category, encoded for 128 new tokens."""
import torch
from specdec.benchmarks.datasets import PromptBuilder, load_dataset

import specdec
from specdec.target import context_length
from specdec.zoo import DefaultModels


def default_pair_and_prompts(categories: list[str]) -> tuple[DefaultModels, list[tuple[str, list[int]]]]:
    """(the default pair, [(category, prompt ids)] of the categories' first turns in Spec-Bench's order)."""
    torch.set_num_threads(1)
    pair = specdec.load_default()
    builder = PromptBuilder(pair.tokenizer, context_length(pair.target), 128)
    return pair, [(s.category, builder.encode([], s.turns[0])[0])
                  for s in load_dataset("spec_bench", per_category=5) if s.category in categories]
