"""Render MODEL_CARD.md from recipe.json (training) and eval.json (evaluation).

Keeping the card generated means its numbers cannot drift from the scripts.
"""

from __future__ import annotations

import json
from pathlib import Path


def _fmt_s(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def _model_row(name: str, recipe: dict, ev: dict) -> str:
    m = recipe["models"][name]
    c = m["config"]["model"]
    shape = f"{c['num_hidden_layers']} layers, hidden {c['hidden_size']}, {c['num_attention_heads']} heads, MLP {c['intermediate_size']}"
    return (
        f"| {name} | {shape} | {ev['params'][name]:,} | {ev['per_token_macs'][name]:,} | "
        f"{m['tokens_seen']:,} ({m['steps_done']} steps) | {_fmt_s(m['train_time_s'])} | "
        f"{m.get('final_next_token_loss_mean_last_20', m['final_train_loss_mean_last_20']):.3f} |"
    )


def _train_line(name: str, m: dict) -> str:
    c = m["config"]
    line = (
        f"{name}: AdamW (betas 0.9/0.95, weight decay {c['weight_decay']}), peak LR {c['lr']}, "
        f"{c['warmup_steps']} warm-up steps then cosine to {c['min_lr_ratio']:.0%} of peak, "
        f"{'fp32 weights with bfloat16 autocast' if c.get('bf16_autocast') else 'fp32'}, "
        f"batch {c['batch_size']} x {c['seq_len']} tokens, {c['steps']} steps, seed {c['seed']}."
    )
    if c.get("teacher"):
        line += (
            f" Distilled (preset `{c['name']}`): started from `{c['init_from']}` (weights sha256 "
            f"`{m['init_from_sha256'][:16]}`), loss {c['kd_weight']:g} x KL(teacher || {name}) + "
            f"{1 - c['kd_weight']:g} x next-token loss, teacher `{c['teacher']}` (sha256 `{m['teacher_sha256'][:16]}`);"
            " tokens seen and training time above are this stage's."
        )
    return line


def _distilled(recipe: dict) -> bool:
    return bool(recipe["models"]["draft"]["config"].get("teacher"))


def render(recipe: dict, ev: dict) -> str:
    man = recipe["manifest"]
    o = ev["overall"]
    lines = [
        "# specdec default model pair",
        "",
        "A small Llama target and a 2-layer Llama draft, trained from scratch on this project's",
        "offline corpus by `python -m specdec.tools.zoo.train` on a 2-core CPU. They exist so that",
        "speculative decoding can be demonstrated and benchmarked on something that behaves like a",
        "language model with no network. They are tiny: expect plausible-looking Python and",
        "GSM8K-style prose, not correct programs or answers.",
        "",
        "Load with `specdec.zoo.load_default()` (float32, eval mode; weights are stored in bfloat16).",
        "Every number below is written by `python -m specdec.tools.zoo.evaluate` from `recipe.json`",
        "(training) and `eval.json` (evaluation) in this folder.",
        "",
        "## Models",
        "",
        "| model | shape | parameters (tied embeddings) | matmul MACs / token (incl. LM head) | tokens seen | training wall time | final next-token training loss (mean of last 20 steps) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        _model_row("target", recipe, ev),
        _model_row("draft", recipe, ev),
        "",
        f"Draft / target per-token compute: **{ev['compute_ratio']:.3f}** (weight matmuls including the",
        "LM head; the context-dependent attention-score term is left out).",
        "",
        f"Tokenizer: byte-level BPE, vocabulary {ev['uniform_ppl']}, `<|endoftext|>` as bos/eos/pad, trained on the",
        "training split only; shared by both models. Context length 1024 (trained on 256-token blocks).",
        *[_train_line(name, recipe["models"][name]) for name in ("target", "draft")],
        ("The draft is distilled on the target over the same corpus: it learns the target's next-token "
         "distributions, which speculative decoding verifies against." if _distilled(recipe)
         else "Both models are plain next-token LMs on the same corpus (no distillation)."),
        "",
        *([f"Training conditions: {recipe['note']}", ""] if recipe.get("note") else []),
        "## Corpus",
        "",
        f"- Python {man['python']} standard library `*.py` files: {man['stdlib_files']} files,",
        f"  {man['stdlib_bytes']:,} bytes, sorted file-list sha256 `{man['stdlib_file_list_sha256']}`.",
        f"  Directories named {', '.join(f'`{d}`' for d in man['excluded_dirs'])} and `test_*.py` files are skipped.",
        f"- GSM8K train split, `{man['gsm8k_file']}` (question + answer; openai/grade-school-math, MIT):",
        f"  {man['gsm8k_lines']} lines, {man['gsm8k_bytes']:,} bytes.",
        "  Never read: spec_bench, humaneval, gsm8k test.",
        f"- Content sha256 over everything read: `{man['content_sha256']}`.",
        f"- Training split: {man['train_docs']} documents, {man['train_tokens']:,} tokens per epoch.",
        "",
        "## Held-out set",
        "",
        f"- Stdlib modules never trained on: {', '.join(f'`{m}`' for m in man['heldout_modules'])}",
        f"  ({len(man['heldout_stdlib_files'])} files).",
        f"- GSM8K prose: {man['heldout_gsm8k_lines']} of gsm8k/train.jsonl.",
        f"- Scored in {ev['seq_len']}-token blocks, teacher-forced, at most {ev['max_tokens_per_split']:,} tokens per split.",
        "",
        "## Held-out results",
        "",
        "| split | tokens | target loss | target ppl | draft loss | draft ppl | greedy agreement |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in list(ev["splits"].items()) + [("all", o)]:
        lines.append(
            f"| {name} | {r['tokens']:,} | {r['target_loss']:.3f} | {r['target_ppl']:.2f} | "
            f"{r['draft_loss']:.3f} | {r['draft_ppl']:.2f} | {r['greedy_agreement']:.3f} |"
        )
    lines += [
        "",
        f"A uniform model over the vocabulary has perplexity {ev['uniform_ppl']}. Greedy agreement is the",
        "fraction of held-out positions where the draft's argmax equals the target's under teacher forcing.",
    ]
    if "fp32_target_code_loss" in ev:
        lines += [
            f"bfloat16 rounding check: the unrounded fp32 target scores {ev['fp32_target_code_loss']:.4f} on held-out",
            f"code vs {ev['splits']['code']['target_loss']:.4f} for the shipped bf16 weights (both run in float32).",
        ]
    lines += ["", f"## Greedy samples (unedited, held-out prompts, {ev['new_tokens']} new tokens)", ""]
    for i, s in enumerate(ev["samples"], 1):
        for who in ("target", "draft"):
            lines += [f"### Sample {i}, {who}", "", "```", s["prompt"] + s[who], "```", ""]
    lines += [
        "## Reproduce",
        "",
        "```",
        "python -m specdec.tools.zoo.tokenizer --out runs/tokenizer",
        f"python -m specdec.tools.zoo.train target --steps {recipe['models']['target']['steps_planned']}",
        *([
            "python -m specdec.tools.zoo.train draft --steps 800",
            "python -m specdec.tools.zoo.export  # ships target and the plain draft, the distillation's start",
            "mkdir -p runs/kd && cp -r runs/tokenizer runs/kd/tokenizer",
            f"python -m specdec.tools.zoo.train {recipe['models']['draft']['preset']} --run-dir runs/kd/draft "
            "--tokenizer runs/kd/tokenizer",
            "python -m specdec.tools.zoo.export --runs runs/kd --only draft",
        ] if _distilled(recipe) else [
            f"python -m specdec.tools.zoo.train draft --steps {recipe['models']['draft']['steps_planned']}",
            "python -m specdec.tools.zoo.export",
        ]),
        "python -m specdec.tools.zoo.evaluate --fp32-runs runs",
        "```",
        "",
        "Training resumes from `runs/<preset>/ckpt.pt` when re-run; the loss curve is in `runs/<preset>/loss.json`.",
        f"Evaluation took {ev['eval_time_s']:.0f} s.",
        "",
    ]
    return "\n".join(lines)


def write_card(root: Path, ev: dict) -> Path:
    recipe = json.loads((root / "recipe.json").read_text())
    path = root / "MODEL_CARD.md"
    path.write_text(render(recipe, ev))
    return path
