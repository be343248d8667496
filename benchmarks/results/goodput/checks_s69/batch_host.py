"""Stop 69: what a static batch's step costs besides the target's forward, per cell: none, draft_model and anpd on
the batching benchmark's 16 prompts (64 new tokens) in static batches of B, one cost model per cell kept across
calls, one warm-up pass, then `rounds` interleaved passes (order reversed every other group). Per cell: process CPU
seconds, batch steps, and the engine's draft / verify / other seconds (other: host work outside draft and verify,
the controller's plan, cut and observe among it), per batch step in ms. With `prof`, one more pass of each speculative
cell under cProfile, the controller's functions by own time.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s69/batch_host.py 8 16 [--rounds 3] [--prof]
"""
import argparse
import cProfile
import pstats
import time

import torch
from specdec.benchmarks.batching import load_prompts

import specdec
from specdec.costs import CostModel, device_key
from specdec.target import context_length


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("sizes", type=int, nargs="+")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prof", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    pair = specdec.load_default()
    prompts = load_prompts(pair.tokenizer, context_length(pair.target), 16, 64, 384)
    cells = {"none": ("none", {}), "draft_model": ("draft_model", {"model": pair.draft}), "anpd": ("anpd", {})}
    costs = {cell: CostModel(device_key("cpu")) for cell in cells}

    def run(cell: str, group: list[list[int]]) -> tuple[float, specdec.GenerationStats]:
        name, options = cells[cell]
        started = time.process_time()
        out = specdec.generate(pair.target, group, drafter=name, drafter_options=options, max_new_tokens=64,
                               verifier="exact", eos_token_id=[], cost_model=costs[cell])
        return time.process_time() - started, out.stats

    for batch in args.sizes:
        groups = [prompts[i:i + batch] for i in range(0, len(prompts), batch)]
        for cell in cells:
            run(cell, groups[0])
        totals = {cell: [0.0, 0, 0.0, 0.0, 0.0, 0.0, 0] for cell in cells}
        for round_index in range(args.rounds):
            for index, group in enumerate(groups):
                order = list(cells) if (index + round_index) % 2 == 0 else list(cells)[::-1]
                for cell in order:
                    spent, stats = run(cell, group)
                    t = totals[cell]
                    t[0] += spent
                    t[1] += stats.batch_steps
                    t[2] += stats.draft_time
                    t[3] += stats.verify_time
                    t[4] += stats.other_time
                    t[5] += stats.setup_cpu_time
                    t[6] += stats.no_draft_row_steps
        for cell, (cpu, steps, draft, verify, other, setup, plain) in totals.items():
            print(f"B={batch} {cell:<12} cpu {cpu:7.2f} s  none/cell {totals['none'][0] / cpu:.3f}  steps {steps:5d}  "
                  f"per step: cpu {1e3 * (cpu - setup) / steps:6.2f} draft {1e3 * draft / steps:6.2f} "
                  f"verify {1e3 * verify / steps:6.2f} other {1e3 * other / steps:6.2f} ms  setup {setup:.2f} s  "
                  f"plain row-steps {plain}", flush=True)
        if args.prof:
            for cell in ("draft_model", "anpd"):
                profile = cProfile.Profile()
                profile.enable()
                for group in groups:
                    run(cell, group)
                profile.disable()
                print(f"## B={batch} {cell} under cProfile, by own time")
                pstats.Stats(profile).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
