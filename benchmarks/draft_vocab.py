"""How many tokens the default draft should score: draft_model with a reduced draft vocabulary
(`draft_vocab`, FR-Spec) of N in {full, 4096, 2048, 1024} most frequent training-corpus tokens.

    python -m specdec.benchmarks.draft_vocab --threads 1 --out benchmarks/results/draft_vocab

The winner becomes the default recorded in the bundled draft's `token_ranking.json`, which the
batching and Spec-Bench benchmarks then use, so the prompts here are 32 Spec-Bench prompts that are
*not* the batching benchmark's 16 (the next ones of the same per-category list). Each cell runs the
whole list at batch size B (continuous batching, `max_batch_size=B`), greedy, 64 new tokens, with
the constant (k=3) and confidence (gamma 0.4) schedules, interleaved with batched autoregressive
decoding `--repeats` times; reported: generated tokens per CPU-second (median), the speedup over
autoregressive decoding, tau, and the share of the target's generated tokens inside the subset
(a token outside it can never be drafted). Every output is checked against autoregressive decoding.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

import specdec

from .batching import load_prompts
from .machine import machine_info

SIZES = (0, 4096, 2048, 1024)  # 0 = the full vocabulary
SCHEDULES = ("constant", "confidence")


def heldout_prompts(tokenizer, count: int) -> list[list[int]]:
    """The first `count` of 60 Spec-Bench prompts (same builder and truncation as the batching benchmark)
    that are not among the batching benchmark's 16."""
    benchmark = load_prompts(tokenizer, 1024, 16, 64, 384)
    pool = [p for p in load_prompts(tokenizer, 1024, 60, 64, 384) if p not in benchmark]
    if len(pool) < count:
        raise ValueError(f"only {len(pool)} held-out prompts available, {count} asked")
    return pool[:count]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/draft_vocab"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    pair = specdec.load_default()
    ranking = json.loads((Path(pair.draft.name_or_path) / "token_ranking.json").read_text())["ranking"]
    prompts = heldout_prompts(pair.tokenizer, args.prompts)

    def run(batch: int, drafter: str, options: dict) -> tuple[float, specdec.GenerationOutput]:
        started = time.process_time()
        out = specdec.generate(pair.target, prompts, drafter=drafter, drafter_options=options, max_new_tokens=64,
                               eos_token_id=[], max_batch_size=batch)
        return time.process_time() - started, out

    cells = []
    for batch in args.batch_sizes:
        times: dict[tuple, list[float]] = {}
        outputs: dict[tuple, specdec.GenerationOutput] = {}
        for _ in range(args.repeats):
            times.setdefault(("none",), []).append(run(batch, "none", {})[0])
            for size in SIZES:
                for schedule in SCHEDULES:
                    options = {"model": pair.draft, "schedule": schedule, "draft_vocab": size}
                    seconds, out = run(batch, "draft_model", options)
                    times.setdefault((size, schedule), []).append(seconds)
                    outputs[(size, schedule)] = out
        reference = run(batch, "none", {})[1].sequences
        tokens = [t for p, seq in zip(prompts, reference) for t in seq[len(p):]]
        for (size, schedule), out in outputs.items():
            kept = set(ranking[:size]) if size else None
            cells.append({
                "batch": batch, "draft_vocab": size, "schedule": schedule, "new_tokens": out.stats.new_tokens,
                "tau": out.stats.new_tokens / out.stats.steps,
                "coverage": 1.0 if kept is None else sum(t in kept for t in tokens) / len(tokens),
                "cpu_seconds_all": times[(size, schedule)], "autoregressive_cpu_seconds_all": times[("none",)],
                "equal": out.sequences == reference,
            })
    command = " ".join(sys.argv[1:] if argv is None else argv)
    result = {"command": f"python -m specdec.benchmarks.draft_vocab {command}", "machine": machine_info(),
              "prompts": len(prompts), "new_tokens": 64, "repeats": args.repeats, "cells": cells}
    write_outputs(result, args.out)
    return 0 if all(c["equal"] for c in cells) else 1


def write_outputs(result: dict, out: Path) -> None:
    """result.json and table.md; speedups from the median CPU times of the interleaved runs."""
    for cell in result["cells"]:
        median = statistics.median(cell["cpu_seconds_all"])
        cell["tokens_per_cpu_second"] = cell["new_tokens"] / median
        cell["speedup"] = statistics.median(cell["autoregressive_cpu_seconds_all"]) / median
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = ["| B | draft_vocab | schedule | tok/CPU-s | vs autoregressive | tau | coverage | equal |",
             "|---|---|---|---|---|---|---|---|"]
    for c in result["cells"]:
        lines.append(f"| {c['batch']} | {c['draft_vocab'] or 'full'} | {c['schedule']} | "
                     f"{c['tokens_per_cpu_second']:.1f} | {c['speedup']:.3f}x | {c['tau']:.2f} | "
                     f"{c['coverage']:.3f} | {'yes' if c['equal'] else 'NO'} |")
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    raise SystemExit(main())
