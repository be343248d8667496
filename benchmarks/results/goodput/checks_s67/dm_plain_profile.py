"""Stop 67: what a draft_model call that decodes every step plainly costs over `none` on the second pair (the bundled
draft as target, /work/second/draft128/final as draft; see benchmarks/scripts/goodput/second_model_command.sh). Two
Spec-Bench prompts per category, 64 new tokens, one cost model per cell kept across calls, two warm-up rounds, then 3
rounds interleaved (order reversed every other round): per cell the summed process CPU seconds and the engine's
`other_time` (host work outside draft and verify). With an argument, one more draft_model round under cProfile, the
controller's and engine's functions by cumulative time.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s67/dm_plain_profile.py prof
"""
import cProfile
import pstats
import sys
import time

import torch
from specdec.benchmarks.datasets import PromptBuilder, load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

import specdec
from specdec import registry
from specdec.costs import CostModel, device_key
from specdec.target import context_length


def main() -> None:
    torch.set_num_threads(1)
    target = AutoModelForCausalLM.from_pretrained("/work/second/target", dtype=torch.float32)
    draft = AutoModelForCausalLM.from_pretrained("/work/second/draft128/final", dtype=torch.float32)
    builder = PromptBuilder(AutoTokenizer.from_pretrained("/work/second/target"), context_length(target), 64)
    prompts = [builder.encode([], s.turns[0])[0] for s in load_dataset("spec_bench", per_category=2)]
    costs = {name: CostModel(device_key("cpu")) for name in ("none", "dm")}
    drafters = {"none": registry.create("drafter", "none", {}),
                "dm": registry.create("drafter", "draft_model", {"model": draft})}

    def run(name: str) -> tuple[float, float]:
        """(process CPU seconds, engine other_time) of the cell over every prompt."""
        cpu = other = 0.0
        for prompt in prompts:
            started = time.process_time()
            out = specdec.generate(target, prompt, max_new_tokens=64, drafter=drafters[name], cost_model=costs[name])
            cpu += time.process_time() - started
            other += out.stats.other_time
        return cpu, other

    for _ in range(2):  # warm-ups
        run("none")
        run("dm")
    totals = {"none": [0.0, 0.0], "dm": [0.0, 0.0]}
    for round_index in range(3):
        for name in ("none", "dm") if round_index % 2 == 0 else ("dm", "none"):
            cpu, other = run(name)
            totals[name][0] += cpu
            totals[name][1] += other
    print({name: [round(x, 3) for x in values] for name, values in totals.items()})
    if len(sys.argv) > 1:
        profile = cProfile.Profile()
        profile.enable()
        run("dm")
        profile.disable()
        pstats.Stats(profile).sort_stats("cumtime").print_stats("controller|costs|engine|draft_model", 20)


if __name__ == "__main__":
    main()
