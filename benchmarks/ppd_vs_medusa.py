"""PPD prompt tokens vs a Medusa-1 head on the same model, text, budget, label and held-out windows.

    python -m specdec.benchmarks.ppd_vs_medusa --model default --time-budget 240 \\
        --out benchmarks/results/ppd/medusa

Distance k (1-based) for both: at anchor t (the prefix x_<=t) the label is y_{k+1}(t), the frozen
target's own greedy token k + 1 ahead (y_1(t) is what the anchor's own logits predict). PPD's prompt k
sits at position t + k and predicts it; Medusa head k reads the final hidden state at t and predicts
it. Both are scored on every (--eval-stride) anchor of the same fixed held-out windows, from one
teacher pass. PPD is trained with `specdec train-ppd`'s defaults under the same wall-time budget as
the heads (or an existing checkpoint is scored, and the heads get its recorded training time).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
from specdec.benchmarks.machine import machine_info
from specdec.benchmarks.medusa_baseline import MedusaConfig, medusa_predictor, train_medusa
from specdec.drafters.ppd.prompts import PromptCheckpoint

from specdec.tools.ppd.data import eval_windows, split_streams
from specdec.tools.ppd.evaluate import accuracies_from_counts, anchored_rank_counts, ppd_predictor, summary
from specdec.tools.ppd.train import _load_model, default_args, train
from specdec.tools.ppd.train import build_parser as ppd_parser

# train-ppd flags that --ppd-args may change (the recipe; data, budget and evaluation stay shared)
RECIPE_FLAGS = ("num_ept", "lr", "decay", "loss", "init", "window", "anchors", "max_slots", "batch_size", "warmup")


def targets(ppd: dict, medusa: dict) -> dict[str, bool]:
    """The issue's bar: distance 1 top-10 >= Medusa's and top-1 >= 0.9x; distances 2-3 top-10 >= Medusa's."""
    out = {"d1_top10": ppd["top10"][0] >= medusa["top10"][0], "d1_top1_0.9x": ppd["top1"][0] >= 0.9 * medusa["top1"][0]}
    for k in range(1, min(3, len(ppd["top10"]))):
        out[f"d{k + 1}_top10"] = ppd["top10"][k] >= medusa["top10"][k]
    return out


def to_markdown(report: dict) -> str:
    lines = [f"Command: `{report['command']}`", "",
             f"Machine: {report['machine']['cpu']}, torch threads {report['machine']['torch_threads']}, load average "
             f"{report['machine']['load_average']} at the end; git {report['machine'].get('git_commit')}.", "",
             f"Held-out: {report['eval']}.", "",
             "| method | budget s | trained on | d1 top-1 | d1 top-10 | d2 top-1 | d2 top-10 | d3 top-1 | d3 top-10 |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name in ("ppd", "medusa"):
        row = report[name]
        acc = row["summary"]
        cells = " | ".join(f"{acc['top1'][k]:.3f} | {acc['top10'][k]:.3f}" for k in range(len(acc["top1"])))
        lines.append(f"| {name} | {row['seconds']} | {row['trained_on']} | {cells} |")
    lines += ["", "Targets (PPD vs Medusa): " + ", ".join(f"{k} {'met' if v else 'missed'}"
                                                         for k, v in report["targets"].items()), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--tokenizer", default=None)
    parser.add_argument("--data", nargs="+", default=["stdlib"])
    parser.add_argument("--eval-data", nargs="+", default=None)
    parser.add_argument("--time-budget", type=float, default=None,
                        help="seconds for each method (default: the PPD checkpoint's training time, else 240)")
    parser.add_argument("--ppd-checkpoint", default=None, help="score this checkpoint instead of training PPD")
    parser.add_argument("--ppd-args", default="", help='extra train-ppd flags, e.g. "--num-ept 4"')
    parser.add_argument("--medusa-protocol", choices=("cached", "online"), default="cached")
    parser.add_argument("--medusa-loss", choices=("ce", "kl"), default="ce")
    parser.add_argument("--medusa-lr", type=float, default=1e-2)
    parser.add_argument("--label-fraction", type=float, default=0.5)
    parser.add_argument("--num-prompts", type=int, default=3)
    parser.add_argument("--eval-windows", type=int, default=32)
    parser.add_argument("--eval-length", type=int, default=256)
    parser.add_argument("--eval-stride", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="benchmarks/results/ppd/medusa")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    model, tokenizer = _load_model(args.model, args.tokenizer)
    model.eval().requires_grad_(False)

    if args.ppd_checkpoint:
        checkpoint = PromptCheckpoint.load(args.ppd_checkpoint)
        checkpoint.check_model(model, args.ppd_checkpoint)
        budget = args.time_budget or float(checkpoint.info.get("train_seconds", 240.0))
        ppd_seconds = checkpoint.info.get("train_seconds")
        ppd_trained_on = f"checkpoint {args.ppd_checkpoint}"
    else:
        budget = args.time_budget or 240.0
        ppd_args = default_args(model=args.model, data=args.data, eval_data=args.eval_data, time_budget=budget,
                                steps=10**9, seed=args.seed, num_prompts=args.num_prompts, eval_windows=1,
                                eval_stride=64, save_every=0)
        extra = vars(ppd_parser().parse_args(["--model", args.model, *args.ppd_args.split()]))
        for key in RECIPE_FLAGS:
            setattr(ppd_args, key, extra[key])
        with tempfile.TemporaryDirectory() as scratch:  # its own end-of-training score is skipped (eval below)
            ppd_args.out = str(Path(scratch) / "ppd_prompts.safetensors")
            checkpoint = train(ppd_args, model, tokenizer)
        ppd_seconds = checkpoint.info["train_seconds"]
        ppd_trained_on = f"train-ppd defaults{(' + ' + args.ppd_args) if args.ppd_args else ''}, " \
                         f"{checkpoint.info['steps_done']} steps"

    train_stream, heldout, heldout_note = split_streams(args.data, tokenizer, 256, args.eval_data, seed=args.seed)
    config = MedusaConfig(num_heads=args.num_prompts, time_budget=budget, protocol=args.medusa_protocol,
                          label_fraction=args.label_fraction, lr=args.medusa_lr, loss=args.medusa_loss, seed=args.seed)
    heads, medusa_log = train_medusa(model, train_stream, config)
    print(f"medusa: {medusa_log}", file=sys.stderr)

    started = time.time()
    windows = eval_windows(heldout, args.eval_windows, args.eval_length)
    device = model.get_input_embeddings().weight.device
    counts = anchored_rank_counts(model, windows, {"ppd": ppd_predictor(model, checkpoint.embeddings.to(device)),
                                                   "medusa": medusa_predictor(model, heads)},
                                  args.num_prompts, stride=args.eval_stride)
    results = {name: summary(accuracies_from_counts(c)) for name, c in counts.items()}
    report = {
        "command": "python -m specdec.benchmarks.ppd_vs_medusa " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": machine_info(),
        "eval": f"{args.eval_windows} windows x {args.eval_length} tokens of {heldout_note}, every "
                f"{args.eval_stride}. anchor with >= 8 tokens of context ({int(counts['ppd'][0].sum())} anchors); "
                "label at distance k = the target's greedy token k+1 ahead of the anchor",
        "eval_seconds": round(time.time() - started, 1),
        "ppd": {"summary": results["ppd"], "counts": counts["ppd"].tolist(), "seconds": ppd_seconds,
                "trained_on": ppd_trained_on, "num_ept": checkpoint.num_ept,
                "parameters": checkpoint.embeddings.numel(), "recipe": checkpoint.info.get("recipe")},
        "medusa": {"summary": results["medusa"], "counts": counts["medusa"].tolist(), "seconds": medusa_log["seconds"],
                   "trained_on": f"{args.medusa_protocol}, {args.medusa_loss}, {medusa_log['windows_labelled']} windows, "
                                 f"{medusa_log['epochs']} epochs, {medusa_log['steps']} steps",
                   "log": medusa_log},
        "targets": targets(results["ppd"], results["medusa"]),
    }
    name = "ppd_vs_medusa"
    (out_dir / f"{name}.json").write_text(json.dumps(report, indent=1) + "\n")
    (out_dir / f"{name}.md").write_text(to_markdown(report))
    print(to_markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
