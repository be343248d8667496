"""`specdec train-ppd`: train PPD prompt-token embeddings for a frozen model by self-distillation.

Only the m x n_ept prompt embeddings train. Each step takes `--batch-size` windows of the training
text, lets the frozen target greedy-decode m + 1 tokens from many anchors (cut points) of each window
at once (`anchors.py`: "random insertion", T §4.3.1, at every chosen position instead of one per
window) and fits prompt token k to the target's distribution for the token k + 1 ahead with the
decayed KL loss (docs/ppd.md). AdamW, cosine schedule over --steps or --time-budget, whichever ends
first. Training state is checkpointed beside the output so an interrupted run resumes with --resume.
At the end the per-rank accuracies are measured on fixed held-out windows (`evaluate.py`) and stored
in the checkpoint: they are what the dynamic sparse tree is built from.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch

from specdec.drafters.ppd.prompts import PromptCheckpoint, init_prompts, model_fingerprint

from .anchors import anchored_student_logits, greedy_chains
from .data import eval_windows, read_texts, sample_windows, split_streams, token_stream  # noqa: F401  (public API)
from .evaluate import MIN_CONTEXT, accuracies_from_counts, anchored_rank_counts, ppd_predictor, summary


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec train-ppd", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help='local model directory or "default"')
    parser.add_argument("--tokenizer", default=None, help="tokenizer directory (default: beside the model)")
    parser.add_argument("--data", nargs="+", default=["stdlib"],
                        help='"stdlib" (the interpreter\'s standard library minus held-out modules) or text/.jsonl '
                             "files or directories of .py/.txt")
    parser.add_argument("--eval-data", nargs="+", default=None, help="held-out text for the accuracies "
                        "(default: stdlib's held-out modules for --data stdlib, else the stream's tail)")
    parser.add_argument("--out", default="ppd_prompts.safetensors")
    parser.add_argument("--steps", type=int, default=400,
                        help="optimizer steps (upper bound with --time-budget); the default recipe (400 steps of one "
                             "window, every anchor, 4 EPTs) takes ~13 min on one core of a 2-core EPYC VM")
    parser.add_argument("--time-budget", type=float, default=None,
                        help="seconds of training; the cosine schedule follows whichever of steps/time ends first")
    parser.add_argument("--batch-size", type=int, default=1, help="windows per step")
    parser.add_argument("--window", type=int, default=256, help="tokens per training window")
    parser.add_argument("--anchors", type=int, default=0,
                        help="anchors (cut points) per window, random positions; 0 = as many as --max-slots allows")
    parser.add_argument("--max-slots", type=int, default=1024, help="prompt slots per window and forward")
    parser.add_argument("--num-prompts", type=int, default=3)
    parser.add_argument("--num-ept", type=int, default=4, help="ensemble prompt tokens per prompt token")
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--warmup", type=float, default=0.0, help="fraction of the schedule with linear warmup")
    parser.add_argument("--decay", type=float, default=0.8, help="per-distance loss weight decay^(k-1)")
    parser.add_argument("--loss", choices=("kl", "ce"), default="kl",
                        help="kl: KL(teacher || student) (the papers' KD); ce: cross-entropy on the greedy token")
    parser.add_argument("--init", choices=("vocab", "random"), default="vocab",
                        help="vocab: random real token embeddings; random: Gaussian of the embeddings' scale")
    parser.add_argument("--eval-windows", type=int, default=32, help="held-out windows for the accuracies")
    parser.add_argument("--eval-length", type=int, default=256, help="tokens per held-out window")
    parser.add_argument("--eval-stride", type=int, default=1, help="score every s-th anchor of each window")
    parser.add_argument("--heldout-fraction", type=float, default=0.05)
    parser.add_argument("--max-docs", type=int, default=None)
    parser.add_argument("--save-every", type=int, default=50)
    parser.add_argument("--resume", action="store_true", help="continue from OUT.train.pt if present")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def default_args(**overrides) -> argparse.Namespace:
    """The CLI defaults as a namespace (for tests, notebooks and benchmarks), with overrides."""
    args = build_parser().parse_args(["--model", str(overrides.get("model", "default"))])
    for key, value in overrides.items():
        setattr(args, key, value)
    return args


def _load_model(spec: str, tokenizer_path: str | None = None):
    from specdec.api import load_model

    tokenizer = None
    if tokenizer_path is not None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer_path, local_files_only=True)
    model, tokenizer = load_model(spec, tokenizer)
    if model.get_input_embeddings().weight.device.type == "cpu" and model.dtype in (torch.bfloat16, torch.float16):
        model = model.float()  # half precision is slow and inexact on CPUs; the upcast keeps the fingerprint
    if tokenizer is None:
        raise ValueError(f"{spec}: training needs a tokenizer; put one beside the model or pass --tokenizer DIR")
    return model, tokenizer


def pick_anchors(length: int, count: int, generator: torch.Generator, min_context: int = MIN_CONTEXT) -> torch.Tensor:
    """`count` distinct random anchor positions (sorted) with at least `min_context` tokens of context."""
    first = min(min_context, length) - 1
    available = length - first
    if count >= available:
        return torch.arange(first, length)
    return (first + torch.randperm(available, generator=generator)[:count]).sort().values


def objective(student: torch.Tensor, teacher: torch.Tensor, greedy: torch.Tensor, decay: float, kind: str
              ) -> torch.Tensor:
    """(1/m) sum_k decay^(k-1) loss_k, mean over anchors. student/teacher [N, m, V], greedy labels [N, m].
    kl: KL(teacher_k || student_k) over the full vocabulary (P Eq. 1, the reference code's direction);
    ce: cross-entropy on the greedy token (hard labels)."""
    num_prompts = student.shape[1]
    log_student = torch.log_softmax(student, dim=-1)
    if kind == "kl":
        log_teacher = torch.log_softmax(teacher, dim=-1)
        per_token = (log_teacher.exp() * (log_teacher - log_student)).sum(dim=-1)  # [N, m]
    elif kind == "ce":
        per_token = -log_student.gather(-1, greedy[..., None]).squeeze(-1)
    else:
        raise ValueError(f"unknown loss {kind!r}")
    weights = decay ** torch.arange(num_prompts, device=student.device, dtype=per_token.dtype)
    return (per_token.mean(dim=0) * weights).sum() / num_prompts


def lr_factor(progress: float, warmup: float) -> float:
    """Linear warmup over the first `warmup` fraction, then cosine to zero."""
    if warmup > 0 and progress < warmup:
        return max(progress / warmup, 1e-3)
    rest = (progress - warmup) / max(1e-9, 1.0 - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, max(0.0, rest))))


def evaluate_prompts(model, embeddings: torch.Tensor, heldout: torch.Tensor, windows: int, length: int,
                     stride: int = 1) -> torch.Tensor:
    """Rank counts [m, 11] of the prompts on the fixed held-out windows."""
    device = model.get_input_embeddings().weight.device
    batch = eval_windows(heldout, windows, length)
    predictor = ppd_predictor(model, embeddings.to(device))
    return anchored_rank_counts(model, batch, {"ppd": predictor}, embeddings.shape[0], stride=stride)["ppd"]


def _recipe(args: argparse.Namespace) -> dict:
    keys = ("steps", "time_budget", "batch_size", "window", "anchors", "max_slots", "num_prompts", "num_ept", "lr",
            "warmup", "decay", "loss", "init", "seed")
    return {key: getattr(args, key) for key in keys}


def train(args: argparse.Namespace, model=None, tokenizer=None,
          streams: tuple[torch.Tensor, torch.Tensor, str] | None = None) -> PromptCheckpoint:
    """Run training as configured by `args` (see `default_args`); `model`/`tokenizer` override --model,
    `streams` (train tokens, held-out tokens, note) the data flags (benchmarks tokenize once)."""
    from tqdm import tqdm

    if args.threads:
        torch.set_num_threads(args.threads)
    if model is None:
        model, tokenizer = _load_model(args.model, getattr(args, "tokenizer", None))
    model.eval()
    for param in model.parameters():
        param.requires_grad_(False)
    device = model.get_input_embeddings().weight.device
    context = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", 4096)
    window = min(args.window, context - args.num_prompts - 2)
    train_stream, heldout, heldout_note = streams or split_streams(
        args.data, tokenizer, window, args.eval_data, args.heldout_fraction, args.max_docs, args.seed)
    per_window = args.anchors or max(1, args.max_slots // (args.num_prompts * args.num_ept))

    out = Path(args.out)
    state_file = out.with_name(out.name + ".train.pt")
    initial = init_prompts(model, args.num_prompts, args.num_ept, args.init, args.seed)
    embeddings = torch.nn.Parameter(initial.to(device))
    optimizer = torch.optim.AdamW([embeddings], lr=args.lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(args.seed)
    start, losses, accs, elapsed_before, seen = 0, [], [], 0.0, 0
    if args.resume and state_file.is_file():
        saved = torch.load(state_file, weights_only=False)
        if saved["fingerprint"] != model_fingerprint(model):
            raise ValueError(f"{state_file} belongs to a different model; delete it or drop --resume")
        with torch.no_grad():
            embeddings.copy_(saved["embeddings"].to(device))
        optimizer.load_state_dict(saved["optimizer"])
        generator.set_state(saved["generator"])
        start, losses, accs = saved["step"], saved["losses"], saved.get("accs", [])
        elapsed_before, seen = saved.get("elapsed", 0.0), saved.get("anchors_seen", 0)

    started = time.time()

    def elapsed() -> float:
        return elapsed_before + time.time() - started

    def save_state(step: int) -> None:
        torch.save({"embeddings": embeddings.detach().cpu(), "optimizer": optimizer.state_dict(),
                    "generator": generator.get_state(), "step": step, "losses": losses, "accs": accs,
                    "elapsed": elapsed(), "anchors_seen": seen, "fingerprint": model_fingerprint(model)}, state_file)

    budget = args.time_budget
    progress = tqdm(total=args.steps, initial=start, desc="train-ppd", mininterval=2.0, disable=args.quiet)
    step = start
    while step < args.steps and (budget is None or elapsed() < budget):
        done = max(step / args.steps, elapsed() / budget if budget else 0.0)
        for group in optimizer.param_groups:
            group["lr"] = args.lr * lr_factor(done, args.warmup)
        ids = sample_windows(train_stream, args.batch_size, window, generator).to(device)
        anchors = pick_anchors(ids.shape[1], per_window, generator).to(device)
        cache, teacher, greedy, _ = greedy_chains(model, ids, anchors, args.num_prompts)
        student = anchored_student_logits(model, cache, ids.shape[1], anchors, embeddings)  # [B, A, m, V]
        labels = greedy[:, :, 1:]
        loss = objective(student.flatten(0, 1), teacher.flatten(0, 1), labels.flatten(0, 1), args.decay, args.loss)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
        seen += labels.shape[0] * labels.shape[1]
        losses.append(loss.item())
        accs.append((student.detach().argmax(dim=-1) == labels).float().mean(dim=(0, 1)).tolist())
        recent = accs[-20:]
        running = [sum(row[k] for row in recent) / len(recent) for k in range(args.num_prompts)]
        progress.update(1)
        progress.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}",
                             top1="/".join(f"{a:.2f}" for a in running))
        if args.save_every and step % args.save_every == 0:
            save_state(step)
    progress.close()
    train_seconds = elapsed()
    if args.save_every:
        save_state(step)

    final = embeddings.detach().cpu()
    eval_started = time.time()
    counts = evaluate_prompts(model, final, heldout, args.eval_windows, args.eval_length, args.eval_stride)
    accuracies = accuracies_from_counts(counts)
    info = {"trained": True, "recipe": _recipe(args), "steps_done": step, "anchors_seen": seen,
            "train_seconds": round(train_seconds, 1),
            "eval_seconds": round(time.time() - eval_started, 1), "threads": torch.get_num_threads(),
            "loss": f"{args.loss}, decay {args.decay}^(k-1), EPT logit mean", "data": [str(p) for p in args.data],
            "train_tokens": int(len(train_stream)), "heldout": heldout_note, "heldout_tokens": int(len(heldout)),
            "eval": f"{args.eval_windows} windows x {args.eval_length} tokens, every {args.eval_stride}. anchor with "
                    f">= {MIN_CONTEXT} tokens of context; label = the target's greedy token k+1 ahead",
            "eval_counts": counts.tolist(), "summary": summary(accuracies),
            "final_loss_avg20": sum(losses[-20:]) / max(1, len(losses[-20:])),
            "first_loss": losses[0] if losses else None, "losses_every_10": losses[::10],
            "train_top1_per_10_steps": [[round(sum(row[k] for row in accs[i : i + 10]) / len(accs[i : i + 10]), 3)
                                         for k in range(args.num_prompts)] for i in range(0, len(accs), 10)]}
    checkpoint = PromptCheckpoint(final, model_fingerprint(model), accuracies, info)
    checkpoint.save(out)
    brief = summary(accuracies)
    print(f"saved {out} | {step} steps, {train_seconds:.0f} s | held-out top-1 per distance {brief['top1']} | "
          f"top-{len(accuracies[0])} {brief[f'top{len(accuracies[0])}']}")
    return checkpoint


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    train(args)
    return 0
