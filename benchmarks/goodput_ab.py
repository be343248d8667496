"""Interleaved A/B of drafters against plain decoding: every prompt runs under every cell in turn, so
load drift on a shared machine hits all cells alike (the harness runs one cell over all prompts, then the
next, and on this 2-core VM cell-to-cell drift is about 5%, more than several targets' margins).

    OMP_NUM_THREADS=1 python benchmarks/goodput_ab.py --out benchmarks/results/goodput/interleaved \
        none anpd anpd:schedule=constant draft_model draft_model:schedule=heuristic auto

A cell is a drafter name with options as `name:key=value,...` (draft_model gets the bundled draft). The
first cell is the reference. Per prompt, the ratio is the reference's process CPU time over the cell's
(every output is checked equal to the reference's, so tokens are the same); a category's figure and the
overall one are means of per-prompt ratios, averaged over rounds. Writes `ab.md` and `ab.json`.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from statistics import mean

import torch
from specdec.benchmarks.datasets import PromptBuilder, load_dataset
from specdec.benchmarks.machine import machine_info

import specdec
from specdec.target import context_length


def make_drafter(cell: str, draft_model):
    name, _, text = cell.partition(":")
    options = dict(item.split("=", 1) for item in text.split(",")) if text else {}
    if name == "draft_model":
        options["model"] = draft_model
    return specdec.registry.create("drafter", name, options)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cells", nargs="+", help="the reference first (e.g. none)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--per-category", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    pair = specdec.load_default()
    target = pair.target
    builder = PromptBuilder(pair.tokenizer, context_length(target), args.max_new_tokens)
    samples = load_dataset("spec_bench", per_category=args.per_category)
    prompts = [(s.category, builder.encode([], s.turns[0])[0]) for s in samples]
    drafters = {cell: make_drafter(cell, pair.draft) for cell in args.cells}
    for drafter in drafters.values():  # warm-up: cost curves, caches, first-call setup
        specdec.generate(target, prompts[0][1], drafter=drafter, max_new_tokens=16)
    ratios: dict[str, dict[str, list[float]]] = {cell: {} for cell in args.cells[1:]}
    mismatches: dict[str, int] = {cell: 0 for cell in args.cells[1:]}
    started = time.time()
    for _ in range(args.rounds):
        for category, prompt in prompts:
            seconds, outputs = {}, {}
            for cell, drafter in drafters.items():
                cpu = time.process_time()
                out = specdec.generate(target, prompt, drafter=drafter, max_new_tokens=args.max_new_tokens)
                seconds[cell] = time.process_time() - cpu
                outputs[cell] = out.sequences
            reference = args.cells[0]
            for cell in args.cells[1:]:
                ratios[cell].setdefault(category, []).append(seconds[reference] / seconds[cell])
                mismatches[cell] += outputs[cell] != outputs[reference]
    categories = list(dict.fromkeys(category for category, _ in prompts))
    table = {cell: {c: mean(ratios[cell][c]) for c in categories} | {"overall": mean(
        r for c in categories for r in ratios[cell][c])} for cell in args.cells[1:]}
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"cells": args.cells, "per_category": args.per_category, "max_new_tokens": args.max_new_tokens,
              "rounds": args.rounds, "seconds": round(time.time() - started), "ratios": table,
              "per_prompt": ratios, "mismatches": mismatches, "machine": machine_info()}
    (args.out / "ab.json").write_text(json.dumps(result, indent=1))
    header = f"| cell (CPU time of {args.cells[0]} / cell) | " + " | ".join(categories) + " | overall | outputs equal |"
    lines = [header, "|" + "---|" * (len(categories) + 3)]
    for cell, row in table.items():
        lines.append(f"| {cell} | " + " | ".join(f"{row[c]:.3f}" for c in categories)
                     + f" | **{row['overall']:.3f}** | {'yes' if not mismatches[cell] else 'NO'} |")
    (args.out / "ab.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if any(mismatches.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
