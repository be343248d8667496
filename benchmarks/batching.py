"""Multi-sample speculative decoding (EMS-SD): throughput of batched autoregressive decoding, the
vanilla padded method and the unpadded cache, at several batch sizes, side by side in one process.

    python -m specdec.benchmarks.batching --out benchmarks/results/batching

Each cell generates for one batch of Spec-Bench prompts (mixed categories, different lengths) and
reports generated tokens per second over the whole batch, tau, the padded mode's cache padding
ratio (EMS-SD's R: holes added while decoding / generated tokens), the verification inputs' padding
ratio, and the KV cache memory (used: the largest [rows, slots] region one forward read, i.e. what an
exactly-sized cache needs; allocated: the preallocated buffers). Every row's output is checked against
batched autoregressive decoding (greedy, so they must be equal). The results README is written by hand
from `table.md`, `result.json` and `throughput.png`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

import specdec
import specdec.target as specdec_target

from .datasets import PromptBuilder, load_dataset
from .machine import machine_info

MODES = ("autoregressive", "padded", "unpadded-kv", "unpadded")


def load_prompts(tokenizer, context: int, count: int, new_tokens: int, max_prompt: int) -> list[list[int]]:
    samples = load_dataset("spec_bench", per_category=max(1, count // 6 + 1))
    builder = PromptBuilder(tokenizer, min(context, max_prompt + new_tokens), new_tokens)
    prompts = [builder.encode([], sample.turns[0])[0] for sample in samples]
    return prompts[:count]


def run_cell(target, prompts, mode: str, drafter: str, options: dict, new_tokens: int) -> specdec.GenerationOutput:
    """mode: autoregressive, padded (vanilla), unpadded (EMS-SD: unpadded cache + packed inputs) or
    unpadded-kv (the unpadded cache with inputs padded to the widest row: EMS-SD's ablation)."""
    kwargs = dict(max_new_tokens=new_tokens, verifier="exact", eos_token_id=[])
    if mode == "autoregressive":
        return specdec.generate(target, prompts, drafter="none", **kwargs)
    batch_mode = "unpadded" if mode == "unpadded-kv" else mode
    previous = specdec_target.PACKED_INPUTS_DEFAULT
    specdec_target.PACKED_INPUTS_DEFAULT = mode != "unpadded-kv"
    try:
        return specdec.generate(target, prompts, drafter=drafter, drafter_options=options, batch_mode=batch_mode,
                                **kwargs)
    finally:
        specdec_target.PACKED_INPUTS_DEFAULT = previous


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--drafters", nargs="+", default=["anpd", "draft_model"])
    parser.add_argument("--modes", nargs="+", default=["padded", "unpadded-kv", "unpadded"],
                        choices=MODES[1:], help="speculative cells per drafter (autoregressive always runs)")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--max-prompt-tokens", type=int, default=384, help="left-truncate prompts to this")
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs per cell, interleaved across the cells of a batch size so that changing "
                             "load from other jobs hits every cell alike; the median CPU time is reported")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (1 gives steadier numbers when other jobs share the CPU)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    pair = specdec.load_default()
    target, tokenizer = pair.target, pair.tokenizer
    options = {"anpd": {}, "draft_model": {"model": pair.draft}}
    context = target.config.max_position_embeddings
    all_prompts = load_prompts(tokenizer, context, max(args.batch_sizes), args.new_tokens, args.max_prompt_tokens)
    specdec.generate(target, all_prompts[:2], drafter="none", max_new_tokens=4)  # warm-up
    result = {"command": "python -m specdec.benchmarks.batching " + " ".join(argv or sys.argv[1:]),
              "machine": machine_info(), "new_tokens": args.new_tokens, "repeats": args.repeats, "rows": []}

    rows = result["rows"]
    for batch in args.batch_sizes:
        prompts = all_prompts[:batch]
        cells = [("autoregressive", "none")] + [(m, d) for d in args.drafters for m in args.modes]
        runs: dict[tuple[str, str], list[tuple[float, float]]] = {cell: [] for cell in cells}
        outputs = {}
        for _ in range(args.repeats):
            for mode, drafter in cells:
                start, cpu_start = time.perf_counter(), time.process_time()
                out = run_cell(target, prompts, mode, drafter, options.get(drafter, {}), args.new_tokens)
                runs[mode, drafter].append((time.perf_counter() - start, time.process_time() - cpu_start))
                outputs[mode, drafter] = out
        reference = outputs["autoregressive", "none"].sequences
        for mode, drafter in cells:
            out, stats = outputs[mode, drafter], outputs[mode, drafter].stats
            walls, cpus = [w for w, _ in runs[mode, drafter]], [c for _, c in runs[mode, drafter]]
            cpu = _median(cpus)
            row = {
                "batch": batch, "mode": mode, "drafter": drafter, "seconds": min(walls), "cpu_seconds": cpu,
                "cpu_seconds_all": cpus, "seconds_all": walls, "tokens": stats.new_tokens,
                "tokens_per_second": stats.new_tokens / min(walls), "tokens_per_cpu_second": stats.new_tokens / cpu,
                "tau": stats.mean_accepted, "equal_to_autoregressive": out.sequences == reference,
                "kv_padding_ratio": stats.kv_holes_added / stats.new_tokens if stats.new_tokens else 0.0,
                "input_padding_ratio": stats.input_padding_ratio, "kv_cache_bytes": stats.kv_cache_bytes,
                "kv_used_bytes": stats.kv_used_bytes, "batch_steps": stats.batch_steps,
            }
            rows.append(row)
            flag = "" if row["equal_to_autoregressive"] else "  <-- OUTPUT MISMATCH"
            print(f"B={batch:<3} {mode:<14} {drafter:<12} {row['tokens_per_cpu_second']:8.1f} tok/cpu-s (median) "
                  f"{row['tokens_per_second']:8.1f} tok/s (best wall)  tau {row['tau']:.2f}"
                  f"  kv pad {row['kv_padding_ratio']:.1%}  input pad {row['input_padding_ratio']:.1%}"
                  f"  kv used {row['kv_used_bytes'] / 2**20:.1f} MiB{flag}", flush=True)
        if args.out is not None:  # after every batch size, so an interrupted sweep keeps what it measured
            result["machine"]["load_average_end"] = _load_average()
            write_outputs(result, args.out)
    return 0 if all(r["equal_to_autoregressive"] for r in rows) else 1


def _load_average() -> list[float] | None:
    try:
        import os

        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def write_outputs(result: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(result, indent=2))
    rows = result["rows"]
    lines = ["| B | mode | drafter | tok/CPU-s (median) | speedup vs AR (CPU) | tok/s (best wall) | tau | "
             "KV padding ratio | input padding | KV used MiB | KV allocated MiB | equal |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    ar_cpu = {r["batch"]: r["tokens_per_cpu_second"] for r in rows if r["mode"] == "autoregressive"}
    for r in rows:
        lines.append(f"| {r['batch']} | {r['mode']} | {r['drafter']} | {r['tokens_per_cpu_second']:.1f} | "
                     f"{r['tokens_per_cpu_second'] / ar_cpu[r['batch']]:.2f}x | {r['tokens_per_second']:.1f} | "
                     f"{r['tau']:.2f} | {r['kv_padding_ratio']:.1%} | {r['input_padding_ratio']:.1%} | "
                     f"{r['kv_used_bytes'] / 2**20:.1f} | {r['kv_cache_bytes'] / 2**20:.1f} | "
                     f"{'yes' if r['equal_to_autoregressive'] else '**NO**'} |")
    (out / "table.md").write_text("\n".join(lines) + "\n")
    figure, (axis, pad_axis) = plt.subplots(1, 2, figsize=(11, 4.5))
    series = sorted({(r["mode"], r["drafter"]) for r in rows})
    for mode, drafter in series:
        points = [(r["batch"], r["tokens_per_cpu_second"]) for r in rows
                  if r["mode"] == mode and r["drafter"] == drafter]
        label = "autoregressive" if mode == "autoregressive" else f"{drafter} ({mode})"
        style = {"unpadded": "-", "unpadded-kv": "-.", "padded": "--"}.get(mode, ":")
        axis.plot(*zip(*points), style, marker="o", label=label)
        if mode == "padded":
            pads = [(r["batch"], 100 * r["kv_padding_ratio"]) for r in rows
                    if r["mode"] == mode and r["drafter"] == drafter]
            pad_axis.plot(*zip(*pads), "--", marker="o", label=f"{drafter}: KV holes / generated tokens")
            inputs = [(r["batch"], 100 * r["input_padding_ratio"]) for r in rows
                      if r["mode"] == mode and r["drafter"] == drafter]
            pad_axis.plot(*zip(*inputs), ":", marker="s", label=f"{drafter}: input padding")
    for ax in (axis, pad_axis):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axis.set_ylabel("generated tokens per CPU-second (whole batch, median)")
    axis.set_title("Unpadded (EMS-SD) vs padded (vanilla) vs autoregressive")
    pad_axis.set_ylabel("%")
    pad_axis.set_title("Padding of the padded mode")
    figure.tight_layout()
    figure.savefig(out / "throughput.png", dpi=120)


if __name__ == "__main__":
    raise SystemExit(main())
