"""PPD prompt-token ablation on one model: each recipe change alone from a baseline, same wall-time
budget per row, scored on the same held-out windows (plus the Medusa-1 head at the same budget).

    python -m specdec.benchmarks.ppd_ablation --model default --budget 240 --out benchmarks/results/ppd/ablation

Rows run one at a time in one process (the model is loaded and the text tokenized once); each row's
result is written to OUT/rows/<name>.json as soon as it ends, and rows already there are skipped, so an
interrupted ablation continues where it stopped. OUT/ablation.md is rewritten after every row.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
from specdec.benchmarks.machine import machine_info
from specdec.benchmarks.medusa_baseline import MedusaConfig, medusa_predictor, train_medusa
from specdec.drafters.ppd.prompts import PromptCheckpoint

from specdec.tools.ppd.data import eval_windows, read_texts, split_streams, token_stream
from specdec.tools.ppd.evaluate import accuracies_from_counts, anchored_rank_counts, ppd_predictor, summary
from specdec.tools.ppd.train import _load_model, default_args, train

# The recipe train-ppd shipped with before this ablation (1200 steps of it made the old default prompts):
# 8 windows per step, one cut point (anchor) each at a random length, 1 ensemble token, lr 1e-2, KL, 0.8 decay.
OLD = {"batch_size": 8, "anchors": 1, "num_ept": 1, "lr": 1e-2, "decay": 0.8, "loss": "kl", "init": "vocab",
       "window": 256, "warmup": 0.0}
GSM8K_TRAIN = str(Path(__file__).resolve().parents[1] / "specdec" / "data" / "gsm8k" / "train.jsonl")

# name -> (base recipe, changes, what it tests)
ROWS: dict[str, tuple[str, dict, str]] = {
    "old": ("old", {}, "baseline: the old train-ppd recipe"),
    "old+all_anchors": ("old", {"batch_size": 1, "anchors": 0}, "every cut point of each window (1 window/step)"),
    "old+ept4": ("old", {"num_ept": 4}, "4 ensemble tokens per prompt"),
    "old+ept16": ("old", {"num_ept": 16}, "16 ensemble tokens per prompt"),
    "old+lr3e-3": ("old", {"lr": 3e-3}, "lower learning rate"),
    "old+lr3e-2": ("old", {"lr": 3e-2}, "higher learning rate"),
    "old+warmup": ("old", {"warmup": 0.1}, "10% linear warmup"),
    "old+init_random": ("old", {"init": "random"}, "Gaussian init instead of token rows"),
    "old+window128": ("old", {"window": 128}, "shorter windows (cut points up to 128 tokens)"),
    "old+window512": ("old", {"window": 512}, "longer windows (cut points up to 512 tokens)"),
    "old+ce": ("old", {"loss": "ce"}, "no KD: cross-entropy on the greedy token"),
    "old+decay1": ("old", {"decay": 1.0}, "no decay across distances"),
    "old+decay0.5": ("old", {"decay": 0.5}, "stronger decay across distances"),
    "old+gsm8k": ("old", {"data": ["stdlib", GSM8K_TRAIN]}, "stdlib + GSM8K train prose"),
    "old+3x_time": ("old", {"budget_factor": 3.0}, "3x the wall time"),
}


def _row_args(base: dict, changes: dict, budget: float, out: str) -> argparse.Namespace:
    recipe = {**base, **{k: v for k, v in changes.items() if k not in ("budget_factor", "data")}}
    return default_args(**recipe, time_budget=budget * changes.get("budget_factor", 1.0), steps=10**9, out=out,
                        save_every=0, quiet=True, eval_windows=1, eval_stride=64)


def to_markdown(rows: dict[str, dict], header: str) -> str:
    lines = [header, "",
             "| row | change | d1 top-1 | d1 top-10 | d2 top-1 | d2 top-10 | d3 top-1 | d3 top-10 | train s | steps | "
             "anchors seen | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, row in rows.items():
        acc = row["summary"]
        cells = " | ".join(f"{acc['top1'][k]:.3f} | {acc['top10'][k]:.3f}" for k in range(3))
        lines.append(f"| {name} | {row['what']} | {cells} | {row['train_seconds'] or 0:.0f} | {row['steps']} | "
                     f"{row['anchors_seen']} | {row['load']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--budget", type=float, default=240.0, help="training seconds per row")
    parser.add_argument("--rows", nargs="*", default=None, help="run only these rows (default: all, then medusa)")
    parser.add_argument("--new", default=None, help='JSON recipe: also run "new" rows varying it one change at a time')
    parser.add_argument("--score", nargs="*", default=[], metavar="NAME=FILE[@K]",
                        help="also score these prompt checkpoints as rows (e.g. the shipped ones); @K: first K EPTs")
    parser.add_argument("--eval-windows", type=int, default=32)
    parser.add_argument("--eval-length", type=int, default=256)
    parser.add_argument("--eval-stride", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="benchmarks/results/ppd/ablation")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    (out / "rows").mkdir(parents=True, exist_ok=True)
    model, tokenizer = _load_model(args.model)
    model.eval().requires_grad_(False)
    base_recipes = {"old": OLD}
    rows = dict(ROWS)
    if args.new:
        new = {**OLD, **json.loads(args.new)}
        base_recipes["new"] = new
        rows.update(new_rows(new))
    rows["medusa"] = ("", {}, "Medusa-1 heads (cached labels, CE, lr 1e-2), same budget")
    rows["medusa:online"] = ("", {"protocol": "online", "loss": "kl"},
                             "Medusa-1 heads trained as the prompts are: a fresh window per step, every anchor, KD")
    rows["medusa:untrained"] = ("", {"time_budget": 0.0},
                                "floor: zero-init heads = the anchor's own next-token distribution, no training")
    rows["new:untrained"] = ("new", {"budget_factor": 0.0}, "floor: the prompts' initial token rows, no training")
    for spec in args.score:
        label, _, file = spec.partition("=")
        file, _, groups = file.partition("@")
        rows[label] = ("", {"checkpoint": file, "num_ept": int(groups or 0)},
                       f"checkpoint {file}" + (f", first {groups} EPT group(s) only" if groups else ""))
    wanted = args.rows or list(rows)

    streams = split_streams(["stdlib"], tokenizer, args.eval_length)
    windows = eval_windows(streams[1], args.eval_windows, args.eval_length)
    header = (f"Model {args.model}; {args.budget:.0f} s of training per row unless `train s` says otherwise (1 torch "
              "thread, shared 2-core CPU; floors and checkpoints: scored only); "
              f"scored on {args.eval_windows} held-out windows x {args.eval_length} tokens ({streams[2]}), every "
              f"{args.eval_stride}. anchor; distance k = the target's greedy token k+1 ahead of the anchor.")
    done: dict[str, dict] = {}
    for name in rows:
        path = out / "rows" / f"{name}.json"
        if path.is_file():
            done[name] = json.loads(path.read_text())
    for name in wanted:
        if name in done:
            continue
        base, changes, what = rows[name]
        started = time.time()
        if name.startswith("medusa"):
            heads, log = train_medusa(model, streams[0], MedusaConfig(**{"time_budget": args.budget, **changes}))
            predictor = medusa_predictor(model, heads)
            steps, seconds, seen, extra = log["steps"], log["seconds"], log["anchors_labelled"], {"log": log}
        elif "checkpoint" in changes:
            checkpoint = PromptCheckpoint.load(changes["checkpoint"])
            checkpoint.check_model(model, changes["checkpoint"])
            predictor = ppd_predictor(model, checkpoint.embeddings[:, : changes["num_ept"] or None])
            info = checkpoint.info
            steps, seconds, seen = info.get("steps_done"), info.get("train_seconds"), info.get("anchors_seen")
            extra = {"recipe": info.get("recipe")}
        else:
            row_streams = streams
            if "data" in changes:
                row_streams = (token_stream(read_texts(changes["data"]), tokenizer), streams[1], streams[2])
            with tempfile.TemporaryDirectory() as scratch:
                row_args = _row_args(base_recipes[base], changes, args.budget, str(Path(scratch) / "p.safetensors"))
                checkpoint = train(row_args, model, tokenizer, streams=row_streams)
            predictor = ppd_predictor(model, checkpoint.embeddings)
            info = checkpoint.info
            steps, seconds, seen = info["steps_done"], info["train_seconds"], info["anchors_seen"]
            extra = {"recipe": info["recipe"], "train_top1_per_10_steps": info["train_top1_per_10_steps"]}
        eval_started = time.time()
        counts = anchored_rank_counts(model, windows, {name: predictor}, 3, stride=args.eval_stride)[name]
        row = {"what": what, "base": base, "changes": changes, "summary": summary(accuracies_from_counts(counts)),
               "counts": counts.tolist(), "train_seconds": seconds, "steps": steps, "anchors_seen": seen,
               "eval_seconds": round(time.time() - eval_started, 1), "row_seconds": round(time.time() - started, 1),
               "load": os.getloadavg()[0], **extra}
        path = out / "rows" / f"{name}.json"
        path.write_text(json.dumps(row, indent=1) + "\n")
        done[name] = row
        print(f"{name}: {row['summary']} ({steps} steps, {seconds} s)", file=sys.stderr, flush=True)
        ordered = {key: done[key] for key in rows if key in done}
        (out / "ablation.md").write_text(to_markdown(ordered, header))
    (out / "machine.json").write_text(json.dumps(machine_info(), indent=1) + "\n")
    return 0


def new_rows(new: dict) -> dict[str, tuple[str, dict, str]]:
    """One change at a time from the new recipe (what each ingredient is worth once the others are in)."""
    rows = {"new": ("new", {}, "the new recipe: 4 EPTs, every anchor of one window per step")}
    for key, values in (("num_ept", (1, 16, 64)), ("lr", (3e-3, 3e-2)), ("loss", ("ce",)), ("decay", (1.0,)),
                        ("window", (128,))):
        for value in values:
            if new.get(key) != value:
                rows[f"new:{key}={value}"] = ("new", {key: value}, f"{key} {value}")
    rows["new:3x_time"] = ("new", {"budget_factor": 3.0}, "3x the wall time")
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
