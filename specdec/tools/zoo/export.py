"""Copy trained models from runs/ into the package as bfloat16 safetensors.

bf16 halves the shipped size (the pair must stay under 60 MB); ``evaluate``
reports the held-out loss of the shipped weights, so any rounding cost shows.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
from transformers import AutoTokenizer, LlamaForCausalLM

from specdec.tools.zoo.train import PRESETS, llama_config
from specdec.zoo import default_model_dir


def load_run(run_dir: Path) -> LlamaForCausalLM:
    """The finished model of a run, or its latest checkpoint if it was stopped early."""
    if (run_dir / "final" / "model.safetensors").is_file():
        return LlamaForCausalLM.from_pretrained(run_dir / "final", dtype=torch.float32)
    meta = json.loads((run_dir / "meta.json").read_text())
    tokenizer = AutoTokenizer.from_pretrained(run_dir.parent / "tokenizer")
    shape = PRESETS[meta["config"]["name"]].model
    model = LlamaForCausalLM(llama_config(shape, tokenizer))
    model.load_state_dict(torch.load(run_dir / "ckpt.pt", weights_only=False)["model"])
    return model


def run_summary(run_dir: Path) -> dict:
    meta = json.loads((run_dir / "meta.json").read_text())
    log = json.loads((run_dir / "loss.json").read_text())
    cfg = meta["config"]
    last = log[-1]
    return {
        "preset": cfg["name"],
        "config": cfg,
        "params": meta["params"],
        "per_token_macs": meta["per_token_macs"],
        "steps_done": last["step"],
        "steps_planned": cfg["steps"],
        "tokens_seen": last["tokens"],
        "train_tokens_per_epoch": meta["manifest"]["train_tokens"],
        "train_time_s": last["elapsed_s"],
        "final_train_loss_mean_last_20": round(statistics.fmean(r["loss"] for r in log[-20:]), 4),
        **({"final_next_token_loss_mean_last_20": round(statistics.fmean(r["next_token_loss"] for r in log[-20:]), 4)}
           if "next_token_loss" in last else {}),
        # a distilled model: which weights it started from and learned from
        **{key: meta[key] for key in ("init_from_sha256", "teacher_sha256") if key in meta},
    }


def export(runs: Path, out: Path, note: str = "", names: tuple[str, ...] = ("target", "draft")) -> dict:
    """Export the runs in `names`; models not named keep their shipped weights and recipe entry
    (e.g. a retrained target beside the draft already shipped)."""
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(runs / "tokenizer")
    recipe: dict = {"models": {}, "note": note}
    if set(names) != {"target", "draft"}:
        shipped = json.loads((out / "recipe.json").read_text())
        recipe["models"] = {k: v for k, v in shipped["models"].items() if k not in names}
        recipe["manifest"] = shipped["manifest"]
    for name in names:
        model = load_run(runs / name)
        model.to(torch.bfloat16).save_pretrained(out / name)
        tokenizer.save_pretrained(out / name)
        recipe["models"][name] = run_summary(runs / name)
        recipe["manifest"] = json.loads((runs / name / "meta.json").read_text())["manifest"]
    t, d = recipe["models"]["target"], recipe["models"]["draft"]
    recipe["draft_to_target_compute_ratio"] = round(d["per_token_macs"] / t["per_token_macs"], 4)
    (out / "recipe.json").write_text(json.dumps(recipe, indent=2) + "\n")
    return recipe


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Export runs/{target,draft} into the package.")
    parser.add_argument("--runs", type=Path, default=Path("runs"))
    parser.add_argument("--out", type=Path, default=default_model_dir())
    parser.add_argument("--note", default="", help="free text for the model card (e.g. machine load)")
    parser.add_argument("--only", choices=("target", "draft"), help="export one model; keep the other as shipped")
    args = parser.parse_args(argv)
    recipe = export(args.runs, args.out, args.note, (args.only,) if args.only else ("target", "draft"))
    print(json.dumps({k: v for k, v in recipe.items() if k != "manifest"}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
