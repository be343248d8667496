"""PPD on the bundled default model: prompt-token accuracy, tau and speedup vs plain greedy, the hardware
profile plot, memory overhead, and the other drafters' tau on the same prompts.

    python -m specdec.benchmarks.ppd_bench --out benchmarks/results/ppd

Every method runs on the same prompts in one process, interleaved per prompt, so load on a shared
machine hits all of them alike; speedup = (sum new tokens / sum wall time incl. prefill) of the method
over plain greedy decoding through the same engine (`drafter="none"`). Greedy outputs are checked
token-identical to plain greedy.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from specdec.benchmarks.datasets import PromptBuilder, load_dataset
from specdec.benchmarks.machine import machine_info
from specdec.drafters.ppd.drafter import PPDDrafter, PPDOptions, default_checkpoint_path, profile_path_for
from specdec.drafters.ppd.profile import load_profile
from specdec.drafters.ppd.prompts import PromptCheckpoint

import specdec
from specdec.api import load_model
from specdec.costs import device_key
from specdec.tools.ppd.distill import rank_counts
from specdec.tools.ppd.profile import plot_profile

DATASETS = {"humaneval": ("humaneval", None), "gsm8k": ("gsm8k", None), "spec_bench": ("spec_bench", None)}


def _prompts(tokenizer, context: int, max_new: int, per_dataset: int) -> dict[str, list[tuple[str, list[int]]]]:
    """A few prompts of each dataset (Spec-Bench: first turn, spread over its categories), left-truncated
    so 128 new tokens fit in the context."""
    builder = PromptBuilder(tokenizer, context, max_new)
    out: dict[str, list[tuple[str, list[int]]]] = {}
    for name, (kind, _) in DATASETS.items():
        samples = load_dataset(kind)
        if kind == "spec_bench":  # one per category, round robin, until per_dataset
            by_category: dict[str, list] = {}
            for sample in samples:
                by_category.setdefault(sample.category, []).append(sample)
            picked, index = [], 0
            while len(picked) < per_dataset:
                for group in by_category.values():
                    if index < len(group) and len(picked) < per_dataset:
                        picked.append(group[index])
                index += 1
            samples = picked
        else:
            samples = samples[:per_dataset]
        out[name] = [(s.sample_id if kind != "spec_bench" else f"{s.category}/{s.sample_id}",
                      builder.encode([], s.turns[0])[0]) for s in samples]
    return out


def _run(model, ids: list[int], drafter: Any, options: dict | None, max_new: int) -> dict:
    start = time.perf_counter()
    out = specdec.generate(model, ids, drafter=drafter, verifier="exact", drafter_options=options,
                           max_new_tokens=max_new)
    wall = time.perf_counter() - start
    stats = out.stats
    return {"tokens": out.sequences[0], "new": stats.new_tokens, "steps": stats.steps, "wall": wall,
            "tau": stats.mean_accepted}


@torch.no_grad()
def accuracy_at_distances(model, embeddings: torch.Tensor, sequences: list[list[int]], prompt_lengths: list[int],
                          every: int = 4, topk: int = 10) -> dict:
    """Top-1/top-10 of prompt k for the greedy token k+1 ahead, at cut points inside each greedy
    generation (the reference evaluation: prompts appended at decoding steps of the target's own output)."""
    counts = torch.zeros(embeddings.shape[0], topk + 1, dtype=torch.long)
    for sequence, start in zip(sequences, prompt_lengths):
        for cut in range(start, len(sequence) - embeddings.shape[0] - 1, every):
            counts += rank_counts(model, torch.tensor([sequence[:cut]]), embeddings, topk)
    total = counts.sum(dim=1).clamp(min=1).double()
    return {"top1": (counts[:, 0] / total).tolist(), f"top{topk}": (counts[:, :topk].sum(dim=1) / total).tolist(),
            "samples": int(counts[0].sum())}


def to_markdown(report: dict) -> str:
    """The tables of results.json in readable form."""
    lines = [f"Command: `{report['command']}`", "",
             f"Tree: n={report['tree_size']} with m={report['num_prompts']} prompt tokens "
             f"(builder's expected tau {report['expected_tau']:.2f}); {report['max_new_tokens']} new tokens max; "
             f"torch threads {report['threads']}.", "",
             "| dataset | method | tau | tokens/s | speedup vs plain greedy | identical to greedy | prompts |",
             "|---|---|---|---|---|---|---|"]
    for dataset, methods in report["summary"].items():
        for method, row in methods.items():
            lines.append(f"| {dataset} | {method} | {row['tau']:.2f} | {row['tokens_per_s']:.1f} | "
                         f"{row['speedup']:.2f}x | {row['identical']} | {row['prompts']} |")
    acc = report["accuracy_on_benchmark_outputs"]
    lines += ["", f"Prompt-token accuracy on the target's greedy outputs of these prompts ({acc['samples']} cut points):",
              "", "| distance | top-1 | top-10 |", "|---|---|---|"]
    for k, (top1, top10) in enumerate(zip(acc["top1"], acc["top10"]), start=1):
        lines.append(f"| {k} | {top1:.3f} | {top10:.3f} |")
    held = report.get("checkpoint_accuracies_heldout")
    if held:
        lines += ["", "On held-out training-distribution text (stored in the checkpoint):", "",
                  "| distance | top-1 | top-10 |", "|---|---|---|"]
        for k, row in enumerate(held, start=1):
            lines.append(f"| {k} | {row[0]:.3f} | {sum(row):.3f} |")
    mem = report["memory"]
    lines += ["", f"Memory: {mem['prompt_parameters']} prompt parameters = {mem['prompt_embedding_bytes']} bytes "
              f"(float32) vs {mem['model_parameter_bytes']} bytes of model parameters = "
              f"{mem['overhead_percent']:.4f}%; checkpoint file {mem['checkpoint_file_bytes']} bytes.", ""]
    if report["failures"]:
        lines += ["Methods that failed to run: " + json.dumps(report["failures"]), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="benchmarks/results/ppd")
    parser.add_argument("--per-dataset", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--others", nargs="*", default=["anpd", "draft_model", "ppd_draft_model"], help="drafters to compare with")
    parser.add_argument("--tree-size", type=int, default=None, help="override the profiled size")
    parser.add_argument("--accuracy-every", type=int, default=8, help="cut-point stride for the accuracy table")
    parser.add_argument("--model", default="default", help="default, or a local model directory (development)")
    parser.add_argument("--checkpoint", default=None, help="prompt checkpoint (default: the shipped one)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    model, tokenizer = load_model(args.model)
    checkpoint_path = Path(args.checkpoint) if args.checkpoint else default_checkpoint_path()
    checkpoint = PromptCheckpoint.load(checkpoint_path)
    checkpoint.check_model(model)
    context = model.config.max_position_embeddings
    prompts = _prompts(tokenizer, context, args.max_new_tokens, args.per_dataset)
    ppd_options = {} if args.tree_size is None else {"tree_size": args.tree_size}
    if args.checkpoint:
        ppd_options["checkpoint"] = args.checkpoint
    probe = PPDDrafter(PPDOptions(**ppd_options))
    specdec.generate(model, [1, 2, 3], drafter=probe, verifier="exact", max_new_tokens=4)  # warm-up, resolves size

    methods = ["none", "ppd"] + list(args.others)
    results: dict[str, dict[str, list[dict]]] = {m: {d: [] for d in prompts} for m in methods}
    failures: dict[str, str] = {}
    for dataset, items in prompts.items():
        for sample_id, ids in items:
            for method in methods:
                if method in failures:
                    continue
                options = ppd_options if method == "ppd" else None
                try:
                    run = _run(model, ids, method, options, args.max_new_tokens)
                except Exception as error:  # another engineer's drafter may not be ready: record, go on
                    failures[method] = repr(error)
                    print(f"{method} failed: {error!r}", file=sys.stderr)
                    continue
                run["id"] = sample_id
                run["prompt_tokens"] = len(ids)
                results[method][dataset].append(run)
            base = results["none"][dataset][-1]
            for method in methods[1:]:
                if method not in failures and results[method][dataset]:
                    results[method][dataset][-1]["identical"] = results[method][dataset][-1]["tokens"] == base["tokens"]
            line = " ".join(f"{m}={results[m][dataset][-1]['tau']:.2f}/{results[m][dataset][-1]['wall']:.2f}s"
                            for m in methods if m not in failures and results[m][dataset])
            print(f"[{dataset}] {sample_id}: {line}", flush=True)

    summary: dict[str, dict[str, dict[str, float]]] = {}
    for dataset in prompts:
        base = results["none"][dataset]
        base_tps = sum(r["new"] for r in base) / sum(r["wall"] for r in base)
        summary[dataset] = {}
        for method in methods:
            runs = results[method][dataset]
            if method in failures or not runs:
                continue
            tps = sum(r["new"] for r in runs) / sum(r["wall"] for r in runs)
            summary[dataset][method] = {
                "tau": sum(r["new"] for r in runs) / sum(r["steps"] for r in runs),
                "tokens_per_s": tps, "speedup": tps / base_tps,
                "identical": all(r.get("identical", True) for r in runs), "prompts": len(runs)}

    sequences = [r["tokens"] for d in prompts for r in results["none"][d]]
    starts = [r["prompt_tokens"] for d in prompts for r in results["none"][d]]
    full = [ids + seq for (_, ids), seq in zip([p for d in prompts.values() for p in d], sequences)]
    accuracy = accuracy_at_distances(model, checkpoint.embeddings, full, starts, every=args.accuracy_every)

    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    prompt_bytes = checkpoint.embeddings[:, : probe._num_ept].numel() * 4
    memory = {"prompt_embedding_bytes": prompt_bytes, "model_parameter_bytes": param_bytes,
              "overhead_percent": 100.0 * prompt_bytes / param_bytes,
              "prompt_parameters": checkpoint.embeddings[:, : probe._num_ept].numel(),
              "checkpoint_file_bytes": checkpoint_path.stat().st_size}

    key = device_key(model.get_input_embeddings().weight.device)
    profile_file = profile_path_for(checkpoint_path)
    profile_entry = load_profile(profile_file)["devices"].get(key) if profile_file.is_file() else None
    if profile_entry is not None:
        plot_profile(profile_entry, out_dir / "profile.png", f"PPD hardware profile, default model, {key}")

    report = {"command": "python -m specdec.benchmarks.ppd_bench " + " ".join(argv or sys.argv[1:]),
              "machine": machine_info(), "threads": args.threads, "max_new_tokens": args.max_new_tokens,
              "tree_size": probe.tree_size, "num_prompts": probe.num_prompts,
              "expected_tau": probe.trees.expected_tau,
              "checkpoint_info": {k: v for k, v in checkpoint.info.items() if k != "losses_every_10"},
              "checkpoint_accuracies_heldout": checkpoint.accuracies, "accuracy_on_benchmark_outputs": accuracy,
              "summary": summary, "memory": memory, "profile": profile_entry, "failures": failures,
              "runs": {m: {d: [{k: v for k, v in r.items() if k != "tokens"} for r in runs]
                           for d, runs in per.items()} for m, per in results.items()}}
    (out_dir / "results.json").write_text(json.dumps(report, indent=1) + "\n")
    (out_dir / "results.md").write_text(to_markdown(report))
    print(json.dumps({"summary": summary, "accuracy": accuracy, "memory": memory}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
