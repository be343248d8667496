"""`specdec train-ppd`: train PPD prompt-token embeddings for a frozen model by self-distillation.

Only the m x n_ept prompt embeddings train (initialised from real token embeddings). Each step cuts
random windows from the training text ("random insertion" = random truncation, T §4.3.1), lets the
frozen target greedy-decode m + 1 tokens, and fits prompt token k to the target's distribution
for the token k + 1 ahead with the decayed KL loss (docs/ppd.md). AdamW, cosine schedule, no warmup.
Training state is checkpointed beside the output so an interrupted run resumes with --resume.
At the end the per-rank accuracies are measured on held-out windows and stored in the checkpoint:
they are what the dynamic sparse tree is built from.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from .distill import distillation_loss, rank_counts, student_logits, teacher_continuation
from .prompts import PromptCheckpoint, init_from_vocab, model_fingerprint

# Evaluation sets of the project: never train on them (specdec/data/README.md).
FORBIDDEN = ("spec_bench", "humaneval", "gsm8k/test")


def read_texts(paths: Sequence[str | Path], max_docs: int | None = None) -> list[str]:
    """Documents from files or directories: .jsonl rows (question + answer, or text), other files whole;
    directories contribute their *.py and *.txt files in sorted order."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if any(bad in str(path.resolve()) for bad in FORBIDDEN):
            raise ValueError(f"{path} is an evaluation set of this project; PPD must not train on it")
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*") if p.suffix in (".py", ".txt") and p.is_file()))
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"training data {str(path)!r} does not exist")
    docs: list[str] = []
    for file in files:
        text = file.read_text(encoding="utf-8", errors="replace")
        if file.suffix == ".jsonl":
            for line in text.splitlines():
                if line.strip():
                    row = json.loads(line)
                    docs.append(row["text"] if "text" in row else f"{row.get('question', '')}\n{row.get('answer', '')}")
        else:
            docs.append(text)
        if max_docs is not None and len(docs) >= max_docs:
            return docs[:max_docs]
    if not docs:
        raise ValueError("no training text found in " + ", ".join(map(str, paths)))
    return docs


def token_stream(docs: list[str], tokenizer, shuffle_seed: int = 0) -> torch.Tensor:
    """All documents tokenized and concatenated (eos between when the tokenizer has one), in a
    seeded shuffled order so a held-out tail mixes code and prose."""
    order = torch.randperm(len(docs), generator=torch.Generator().manual_seed(shuffle_seed)).tolist()
    eos = getattr(tokenizer, "eos_token_id", None)
    ids: list[int] = []
    for index in order:
        ids.extend(tokenizer(docs[index])["input_ids"])
        if eos is not None:
            ids.append(eos)
    return torch.tensor(ids, dtype=torch.long)


def sample_windows(stream: torch.Tensor, batch: int, length: int, generator: torch.Generator) -> torch.Tensor:
    starts = torch.randint(0, len(stream) - length, (batch,), generator=generator)
    return torch.stack([stream[s : s + length] for s in starts.tolist()])


def measure_accuracies(model, embeddings: torch.Tensor, stream: torch.Tensor, samples: int, max_len: int,
                       topk: int = 10, seed: int = 1234, batch: int = 16) -> tuple[list[list[float]], torch.Tensor]:
    """Per-rank accuracies a[k][r] on random windows of `stream` (cut points of random length)."""
    generator = torch.Generator().manual_seed(seed)
    counts = torch.zeros(embeddings.shape[0], topk + 1, dtype=torch.long)
    done = 0
    device = model.get_input_embeddings().weight.device
    while done < samples:
        size = min(batch, samples - done)
        length = int(torch.randint(8, max_len + 1, (1,), generator=generator))
        prefix = sample_windows(stream, size, length, generator).to(device)
        counts += rank_counts(model, prefix, embeddings, topk)
        done += size
    accuracies = (counts[:, :topk].double() / counts.sum(dim=1, keepdim=True)).tolist()
    return accuracies, counts


def _load_model(spec: str, tokenizer_path: str | None = None):
    from specdec.api import load_model

    tokenizer = None
    if tokenizer_path is not None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer_path, local_files_only=True)
    model, tokenizer = load_model(spec, tokenizer)
    if tokenizer is None:
        raise ValueError(f"{spec}: training needs a tokenizer; put one beside the model or pass --tokenizer DIR")
    return model, tokenizer


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec train-ppd", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help='local model directory or "default"')
    parser.add_argument("--tokenizer", default=None, help="tokenizer directory (default: beside the model)")
    parser.add_argument("--data", nargs="+", required=True, help="text/.jsonl files or directories of .py/.txt")
    parser.add_argument("--out", default="ppd_prompts.safetensors")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-len", type=int, default=256, help="longest training prefix (tokens)")
    parser.add_argument("--num-prompts", type=int, default=3)
    parser.add_argument("--num-ept", type=int, default=1, help="ensemble prompt tokens per prompt token")
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--decay", type=float, default=0.8, help="per-distance loss weight decay^(k-1)")
    parser.add_argument("--eval-samples", type=int, default=256, help="held-out windows for the accuracies")
    parser.add_argument("--heldout-fraction", type=float, default=0.05)
    parser.add_argument("--max-docs", type=int, default=None)
    parser.add_argument("--save-every", type=int, default=100)
    parser.add_argument("--resume", action="store_true", help="continue from OUT.train.pt if present")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    return parser


def train(args: argparse.Namespace, model=None, tokenizer=None) -> PromptCheckpoint:
    """Run training as configured by `args`; `model`/`tokenizer` override --model (tests, notebooks)."""
    from tqdm import tqdm

    if args.threads:
        torch.set_num_threads(args.threads)
    if model is None:
        model, tokenizer = _load_model(args.model, getattr(args, "tokenizer", None))
    model.eval()
    for param in model.parameters():
        param.requires_grad_(False)
    device = model.get_input_embeddings().weight.device
    docs = read_texts(args.data, args.max_docs)
    stream = token_stream(docs, tokenizer, args.seed)
    heldout = max(args.max_len + 8, int(len(stream) * args.heldout_fraction))
    if len(stream) < heldout + args.max_len + 8:
        raise ValueError(f"only {len(stream)} tokens of training text; need more than {heldout + args.max_len + 8}")
    train_stream, eval_stream = stream[:-heldout], stream[-heldout:]
    context = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", 4096)
    max_len = min(args.max_len, context - args.num_prompts - 2)

    out = Path(args.out)
    state_file = out.with_name(out.name + ".train.pt")
    embeddings = torch.nn.Parameter(init_from_vocab(model, args.num_prompts, args.num_ept, args.seed).to(device))
    optimizer = torch.optim.AdamW([embeddings], lr=args.lr, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: 0.5 * (1.0 + math.cos(math.pi * min(step, args.steps) / max(1, args.steps))))
    generator = torch.Generator().manual_seed(args.seed)
    start, losses = 0, []
    if args.resume and state_file.is_file():
        saved = torch.load(state_file, weights_only=False)
        if saved["fingerprint"] != model_fingerprint(model):
            raise ValueError(f"{state_file} belongs to a different model; delete it or drop --resume")
        with torch.no_grad():
            embeddings.copy_(saved["embeddings"].to(device))
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        generator.set_state(saved["generator"])
        start, losses = saved["step"], saved["losses"]

    def save_state(step: int) -> None:
        torch.save({"embeddings": embeddings.detach().cpu(), "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(), "generator": generator.get_state(), "step": step,
                    "losses": losses, "fingerprint": model_fingerprint(model)}, state_file)

    started = time.time()
    progress = tqdm(range(start, args.steps), initial=start, total=args.steps, desc="train-ppd", mininterval=2.0)
    for step in progress:
        length = int(torch.randint(8, max_len + 1, (1,), generator=generator))
        prefix = sample_windows(train_stream, args.batch_size, length, generator).to(device)
        cache, teacher, _ = teacher_continuation(model, prefix, args.num_prompts)
        student = student_logits(model, cache, length, embeddings)
        loss = distillation_loss(student, teacher, args.decay)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        progress.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}")
        if args.save_every and (step + 1) % args.save_every == 0:
            save_state(step + 1)
    if args.save_every:
        save_state(args.steps)

    final = embeddings.detach().cpu()
    accuracies, counts = measure_accuracies(model, final.to(device), eval_stream, args.eval_samples, max_len)
    info = {"trained": True, "steps": args.steps, "batch_size": args.batch_size, "max_len": max_len,
            "lr": args.lr, "decay": args.decay, "loss": "forward KL(teacher||student), EPT logit mean",
            "data": [str(p) for p in args.data], "train_tokens": int(len(train_stream)),
            "heldout_tokens": int(len(eval_stream)), "final_loss_avg20": sum(losses[-20:]) / max(1, len(losses[-20:])),
            "first_loss": losses[0] if losses else None, "eval_samples": args.eval_samples,
            "eval_counts": counts.tolist(), "seconds_this_run": round(time.time() - started, 1),
            "losses_every_10": losses[::10]}
    checkpoint = PromptCheckpoint(final, model_fingerprint(model), accuracies, info)
    checkpoint.save(out)
    top1 = [round(row[0], 3) for row in accuracies]
    top10 = [round(sum(row), 3) for row in accuracies]
    print(f"saved {out} | held-out top-1 per distance {top1} | top-{len(accuracies[0])} {top10}")
    return checkpoint


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    train(args)
    return 0
