"""The second model pair (trained by `benchmarks/scripts/goodput/second_model_command.sh`'s recipe into /work/second)
and the quick preset's prompts (2 per category, first turns, room for 64 new tokens), in float32 with one torch thread:
what stop 59's scripts here run on."""
import torch
from specdec.benchmarks.datasets import PromptBuilder, load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

from specdec.target import context_length

torch.set_num_threads(1)
target = AutoModelForCausalLM.from_pretrained("/work/second/target", dtype=torch.float32).eval()
draft = AutoModelForCausalLM.from_pretrained("/work/second/draft128/final", dtype=torch.float32).eval()
_builder = PromptBuilder(AutoTokenizer.from_pretrained("/work/second/target"), context_length(target), 64)
#: (category, prompt token ids)
calls = [(s.category, _builder.encode([], s.turns[0])[0]) for s in load_dataset("spec_bench", per_category=2)]
