"""Where a drafter's time goes in a static batch against batched autoregressive decoding (1 thread, CPU time).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/scripts/batching/static_phases.py [B] [anpd|draft_model]

The batching benchmark's 16 prompts in consecutive batches of B (64 new tokens, greedy, exact verifier), the
drafter under the goodput controller beside `none`, interleaved per batch, 3 repeats after 2 warm-ups. Prints
the CPU-time ratio, the summed phases of both (`GenerationStats`: draft, verify, other, setup), batch steps,
drafted and accepted tokens, and the controller's reasons for plain rows of the last call: whether the drafted
tokens ended the batches sooner, and what the drafter and the controller cost.
"""

from __future__ import annotations

import sys
import time

import torch
from specdec.benchmarks.batching import load_prompts, run_cell

import specdec

PHASES = ("draft_time", "verify_time", "other_time", "setup_cpu_time")


def main(batch: int = 8, drafter: str = "anpd") -> None:
    torch.set_num_threads(1)
    pair = specdec.load_default()
    target = pair.target
    prompts = load_prompts(pair.tokenizer, target.config.max_position_embeddings, 16, 64, 384)
    options = {"anpd": {}, "draft_model": {"model": pair.draft}}[drafter]
    batches = [prompts[i : i + batch] for i in range(0, len(prompts), batch)]
    for _ in range(2):  # warm-up: cost curves at this batch size, caches
        for rows in batches:
            run_cell(target, rows, "autoregressive", "none", {}, 64)
            run_cell(target, rows, "unpadded", drafter, options, 64)
    cpu = {"none": 0.0, drafter: 0.0}
    sums: dict[str, dict[str, float]] = {"none": {}, drafter: {}}
    for _ in range(3):
        for rows in batches:
            for cell in ("none", drafter):
                started = time.process_time()
                out = (run_cell(target, rows, "autoregressive", "none", {}, 64) if cell == "none"
                       else run_cell(target, rows, "unpadded", drafter, options, 64))
                cpu[cell] += time.process_time() - started
                stats = out.stats
                values = {name: getattr(stats, name) for name in PHASES}
                values.update(batch_steps=stats.batch_steps, drafted=sum(stats.row_drafted),
                              accepted=sum(stats.row_accepted), tokens=stats.new_tokens)
                for name, value in values.items():
                    sums[cell][name] = sums[cell].get(name, 0.0) + value
    print(f"B={batch} {drafter}: CPU time of none over {drafter}: {cpu['none'] / cpu[drafter]:.3f} "
          f"({cpu['none']:.2f} s vs {cpu[drafter]:.2f} s)")
    for cell, values in sums.items():
        print(cell, {name: round(value, 3) for name, value in values.items()})
    controller = out.stats.controller or {}
    print("last call: no-draft share", round(controller.get("no_draft_share", 0.0), 3), controller.get("plain_reasons"))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8, sys.argv[2] if len(sys.argv) > 2 else "anpd")
