"""Multi-sample speculative decoding (EMS-SD): throughput of batched autoregressive decoding, the
vanilla padded method and the unpadded cache, at several batch sizes, side by side in one process.

    python -m specdec.benchmarks.batching --out benchmarks/results/batching

Each cell generates for one batch of Spec-Bench prompts (mixed categories, different lengths) and
reports generated tokens per second over the whole batch, tau, the padded mode's cache padding
ratio (holes / slots in use) and the verification inputs' padding ratio, and the KV cache memory.
Every row's output is checked against batched autoregressive decoding (greedy, so they must be equal).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

import specdec

from .datasets import PromptBuilder, load_dataset
from .machine import machine_info

MODES = ("autoregressive", "padded", "unpadded")


def load_prompts(tokenizer, context: int, count: int, new_tokens: int, max_prompt: int) -> list[list[int]]:
    samples = load_dataset("spec_bench", per_category=max(1, count // 6 + 1))
    builder = PromptBuilder(tokenizer, min(context, max_prompt + new_tokens), new_tokens)
    prompts = [builder.encode([], sample.turns[0])[0] for sample in samples]
    return prompts[:count]


def run_cell(target, prompts, mode: str, drafter: str, options: dict, new_tokens: int) -> specdec.GenerationOutput:
    kwargs = dict(max_new_tokens=new_tokens, verifier="exact", eos_token_id=[])
    if mode == "autoregressive":
        return specdec.generate(target, prompts, drafter="none", **kwargs)
    return specdec.generate(target, prompts, drafter=drafter, drafter_options=options, batch_mode=mode, **kwargs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--drafters", nargs="+", default=["anpd", "draft_model"])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--max-prompt-tokens", type=int, default=384, help="left-truncate prompts to this")
    parser.add_argument("--repeats", type=int, default=1)
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

    rows = []
    for batch in args.batch_sizes:
        prompts = all_prompts[:batch]
        cells = [("autoregressive", "none")] + [(m, d) for d in args.drafters for m in ("padded", "unpadded")]
        reference = None
        for mode, drafter in cells:
            times, cpu_times, out = [], [], None
            for _ in range(args.repeats):
                start, cpu_start = time.perf_counter(), time.process_time()
                out = run_cell(target, prompts, mode, drafter, options.get(drafter, {}), args.new_tokens)
                times.append(time.perf_counter() - start)
                cpu_times.append(time.process_time() - cpu_start)
            elapsed, cpu = min(times), min(cpu_times)
            if reference is None:
                reference = out.sequences
            equal = out.sequences == reference
            stats = out.stats
            row = {
                "batch": batch, "mode": mode, "drafter": drafter, "seconds": elapsed,
                "cpu_seconds": cpu, "tokens": stats.new_tokens, "tokens_per_second": stats.new_tokens / elapsed,
                "tokens_per_cpu_second": stats.new_tokens / cpu,
                "tau": stats.mean_accepted, "equal_to_autoregressive": equal,
                "kv_padding_ratio": stats.kv_padding_slots / stats.kv_slots if stats.kv_slots else 0.0,
                "input_padding_ratio": stats.input_padding_ratio, "kv_cache_bytes": stats.kv_cache_bytes,
            }
            rows.append(row)
            flag = "" if equal else "  <-- OUTPUT MISMATCH"
            print(f"B={batch:<3} {mode:<14} {drafter:<12} {row['tokens_per_second']:8.1f} tok/s "
                  f"{row['tokens_per_cpu_second']:8.1f} tok/cpu-s  tau {row['tau']:.2f}"
                  f"  kv pad {row['kv_padding_ratio']:.1%}  input pad {row['input_padding_ratio']:.1%}{flag}",
                  flush=True)
    result = {"command": "python -m specdec.benchmarks.batching " + " ".join(argv or sys.argv[1:]),
              "machine": machine_info(), "new_tokens": args.new_tokens, "repeats": args.repeats, "rows": rows}
    if args.out is not None:
        write_outputs(result, args.out)
    return 0 if all(r["equal_to_autoregressive"] for r in rows) else 1


def write_outputs(result: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(result, indent=2))
    rows = result["rows"]
    lines = ["| B | mode | drafter | tok/s (wall) | tok/CPU-s | speedup vs AR (wall) | speedup vs AR (CPU) | tau | "
             "KV padding | input padding | KV MiB | equal |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    ar = {r["batch"]: r["tokens_per_second"] for r in rows if r["mode"] == "autoregressive"}
    ar_cpu = {r["batch"]: r["tokens_per_cpu_second"] for r in rows if r["mode"] == "autoregressive"}
    for r in rows:
        lines.append(f"| {r['batch']} | {r['mode']} | {r['drafter']} | {r['tokens_per_second']:.1f} | "
                     f"{r['tokens_per_cpu_second']:.1f} | {r['tokens_per_second'] / ar[r['batch']]:.2f}x | "
                     f"{r['tokens_per_cpu_second'] / ar_cpu[r['batch']]:.2f}x | {r['tau']:.2f} | {r['kv_padding_ratio']:.1%} | "
                     f"{r['input_padding_ratio']:.1%} | {r['kv_cache_bytes'] / 2**20:.1f} | "
                     f"{'yes' if r['equal_to_autoregressive'] else '**NO**'} |")
    machine = result["machine"]
    (out / "README.md").write_text(
        f"# Batched speculative decoding (EMS-SD)\n\n`{result['command']}`\n\n"
        f"Machine: {machine['cpu']}, {machine['cores']} cores, torch {machine['torch']}, transformers "
        f"{machine['transformers']}, commit {machine['git_commit'][:10]}, 1-min load average "
        f"{machine.get('load_average_1min')} (above the core count means other jobs shared the CPU).\n\n"
        f"{result['new_tokens']} new tokens per row, greedy, default model pair, Spec-Bench prompts "
        f"(mixed categories, left-truncated). Times are the best of {result['repeats']} runs; tok/CPU-s divides by "
        f"this process's CPU time, which is steadier than wall time when other jobs share the CPU.\n\n"
        + "\n".join(lines) + "\n\n![throughput](throughput.png)\n")
    figure, axis = plt.subplots(figsize=(7, 4.5))
    series = sorted({(r["mode"], r["drafter"]) for r in rows})
    for mode, drafter in series:
        points = [(r["batch"], r["tokens_per_cpu_second"]) for r in rows
                  if r["mode"] == mode and r["drafter"] == drafter]
        label = "autoregressive" if mode == "autoregressive" else f"{drafter} ({mode})"
        style = "-" if mode == "unpadded" else ("--" if mode == "padded" else ":")
        axis.plot(*zip(*points), style, marker="o", label=label)
    axis.set_xscale("log", base=2)
    axis.set_xlabel("batch size")
    axis.set_ylabel("generated tokens per CPU-second (whole batch)")
    axis.set_title("Batched speculative decoding: unpadded (EMS-SD) vs padded (vanilla)")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(out / "throughput.png", dpi=120)


if __name__ == "__main__":
    raise SystemExit(main())
