"""Held-out evaluation of the bundled pair; writes the numbers into MODEL_CARD.md.

Every number in the model card comes from this script, so anyone can re-run
``python -m specdec.tools.zoo.evaluate`` and check it.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from specdec.tools.zoo.corpus import build_corpus
from specdec.tools.zoo.train import per_token_macs, token_stream
from specdec.zoo import default_model_dir

SAMPLE_PROMPTS = (
    "def parse_args(",
    'class CSVDialect:\n    """Describe a CSV dialect."""\n\n    def __init__(self',
    None,  # filled with the first held-out GSM8K question
)


@dataclass
class SplitResult:
    tokens: int
    target_loss: float
    draft_loss: float
    agreement: float

    def as_dict(self) -> dict:
        return {
            "tokens": self.tokens,
            "target_loss": round(self.target_loss, 4),
            "target_ppl": round(math.exp(self.target_loss), 2),
            "draft_loss": round(self.draft_loss, 4),
            "draft_ppl": round(math.exp(self.draft_loss), 2),
            "greedy_agreement": round(self.agreement, 4),
        }


@torch.no_grad()
def evaluate_split(
    target: PreTrainedModel,
    draft: PreTrainedModel,
    blocks: torch.Tensor,
    batch_size: int = 8,
) -> SplitResult:
    """Teacher-forced next-token loss of both models and their argmax agreement."""
    n_tok, t_sum, d_sum, agree = 0, 0.0, 0.0, 0
    for i in range(0, len(blocks), batch_size):
        ids = blocks[i : i + batch_size]
        labels = ids[:, 1:].reshape(-1)
        t_logits = target(input_ids=ids).logits[:, :-1].reshape(-1, target.config.vocab_size).float()
        d_logits = draft(input_ids=ids).logits[:, :-1].reshape(-1, draft.config.vocab_size).float()
        t_sum += torch.nn.functional.cross_entropy(t_logits, labels, reduction="sum").item()
        d_sum += torch.nn.functional.cross_entropy(d_logits, labels, reduction="sum").item()
        agree += (t_logits.argmax(-1) == d_logits.argmax(-1)).sum().item()
        n_tok += labels.numel()
    return SplitResult(n_tok, t_sum / n_tok, d_sum / n_tok, agree / n_tok)


def heldout_blocks(
    tokenizer: PreTrainedTokenizerBase, seq_len: int, max_tokens: int
) -> dict[str, torch.Tensor]:
    """Held-out code and prose as fixed-length blocks (deterministic, first ``max_tokens`` of each)."""
    corpus = build_corpus()
    out = {}
    for name, texts in (("code", corpus.heldout_code), ("prose", corpus.heldout_prose)):
        stream = torch.from_numpy(token_stream(texts, tokenizer).astype("int64"))[:max_tokens]
        n = len(stream) // seq_len
        out[name] = stream[: n * seq_len].view(n, seq_len)
    return out


def greedy_sample(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompt: str, n: int) -> str:
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids
    out = model.generate(ids, do_sample=False, max_new_tokens=n, pad_token_id=tokenizer.eos_token_id)
    return tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=False)


def load_pair(root: Path) -> tuple[PreTrainedModel, PreTrainedModel, PreTrainedTokenizerBase]:
    target = AutoModelForCausalLM.from_pretrained(root / "target", dtype=torch.float32).eval()
    draft = AutoModelForCausalLM.from_pretrained(root / "draft", dtype=torch.float32).eval()
    return target, draft, AutoTokenizer.from_pretrained(root / "target")


def run(root: Path, seq_len: int, max_tokens: int, new_tokens: int, fp32_runs: Path | None) -> dict:
    start = time.time()
    target, draft, tokenizer = load_pair(root)
    blocks = heldout_blocks(tokenizer, seq_len, max_tokens)
    results = {name: evaluate_split(target, draft, b) for name, b in blocks.items()}
    total = sum(r.tokens for r in results.values())
    overall = SplitResult(
        total,
        sum(r.target_loss * r.tokens for r in results.values()) / total,
        sum(r.draft_loss * r.tokens for r in results.values()) / total,
        sum(r.agreement * r.tokens for r in results.values()) / total,
    )
    report: dict = {
        "seq_len": seq_len,
        "max_tokens_per_split": max_tokens,
        "new_tokens": new_tokens,
        "splits": {k: v.as_dict() for k, v in results.items()},
        "overall": overall.as_dict(),
        "uniform_ppl": len(tokenizer),
        "params": {"target": target.num_parameters(), "draft": draft.num_parameters()},
        "per_token_macs": {"target": per_token_macs(target.config), "draft": per_token_macs(draft.config)},
    }
    report["compute_ratio"] = round(report["per_token_macs"]["draft"] / report["per_token_macs"]["target"], 4)
    if fp32_runs is not None and (fp32_runs / "target" / "final").is_dir():
        fp32_t = AutoModelForCausalLM.from_pretrained(
            fp32_runs / "target" / "final", dtype=torch.float32
        ).eval()
        code = evaluate_split(fp32_t, draft, blocks["code"])
        report["fp32_target_code_loss"] = round(code.target_loss, 4)
    prose_q = build_corpus().heldout_prose[0].split("\nAnswer:")[0] + "\nAnswer:"
    prompts = [p if p is not None else prose_q for p in SAMPLE_PROMPTS]
    report["samples"] = [
        {
            "prompt": p,
            "target": greedy_sample(target, tokenizer, p, new_tokens),
            "draft": greedy_sample(draft, tokenizer, p, new_tokens),
        }
        for p in prompts
    ]
    report["eval_time_s"] = round(time.time() - start, 1)
    return report


def main(argv: list[str] | None = None) -> int:
    from specdec.tools.zoo.card import write_card

    parser = argparse.ArgumentParser(description="Evaluate the shipped pair on the held-out set.")
    parser.add_argument(
        "--models", type=Path, default=default_model_dir(), help="dir with target/ and draft/"
    )
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--max-tokens", type=int, default=32768, help="per split (code, prose)")
    parser.add_argument("--new-tokens", type=int, default=64, help="length of each greedy sample")
    parser.add_argument("--fp32-runs", type=Path, help="runs/ dir: also score the unrounded fp32 target")
    parser.add_argument("--no-card", action="store_true", help="print the JSON only")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    report = run(args.models, args.seq_len, args.max_tokens, args.new_tokens, args.fp32_runs)
    (args.models / "eval.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    if not args.no_card:
        write_card(args.models, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
