"""Per-distance, per-rank accuracy of any future-token predictor on fixed held-out windows.

One definition for every method (PPD prompts, the Medusa baseline): at anchor t of a window, the
label at distance k is y_{k+1}(t), the frozen target's own greedy token k + 1 ahead of x_<=t
(`anchors.greedy_chains`), and the predictor's rank-r guess counts if it equals that label. A
predictor gets the window's cache, length, anchors and the anchors' final hidden states and returns
logits [B, A, m, V]; both methods are scored on the same anchors of the same windows.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers import DynamicCache

from .anchors import anchored_student_logits, greedy_chains

Predictor = Callable[[DynamicCache, int, torch.Tensor, torch.Tensor | None], torch.Tensor]
MIN_CONTEXT = 8  # anchors with fewer tokens of context are not scored (nor trained on)


def eval_anchors(length: int, min_context: int = MIN_CONTEXT, stride: int = 1) -> torch.Tensor:
    """Every `stride`-th position with at least `min_context` tokens up to and including it, counted
    back from the window's end (so the last token is always an anchor)."""
    first = min(min_context, length) - 1
    return torch.arange(length - 1, first - 1, -stride).flip(0)


def rank_of_truth(logits: torch.Tensor, truth: torch.Tensor, topk: int) -> torch.Tensor:
    """Rank (0..topk-1) of `truth` among the top-k of `logits` [..., V]; topk when it is not there."""
    hit = logits.topk(topk, dim=-1).indices == truth[..., None]
    return torch.where(hit.any(dim=-1), hit.float().argmax(dim=-1), torch.full_like(truth, topk))


@torch.no_grad()
def anchored_rank_counts(model: torch.nn.Module, windows: torch.Tensor, predictors: dict[str, Predictor],
                         depth: int, topk: int = 10, batch: int = 1, min_context: int = MIN_CONTEXT,
                         stride: int = 1) -> dict[str, torch.Tensor]:
    """Per predictor, counts [depth, topk + 1]: how often the label at distance k+1 is its rank-r guess
    (column topk = not in the top-k), over every (`stride`-th) anchor of every window. All predictors
    see the same labels from one teacher pass."""
    device = model.get_input_embeddings().weight.device
    counts = {name: torch.zeros(depth, topk + 1, dtype=torch.long) for name in predictors}
    anchors = eval_anchors(windows.shape[1], min_context, stride).to(device)
    for start in range(0, len(windows), batch):
        ids = windows[start : start + batch].to(device)
        cache, _, greedy, hidden = greedy_chains(model, ids, anchors, depth, keep_hidden=True)
        truth = greedy[:, :, 1 : depth + 1]
        for name, predictor in predictors.items():
            predictions = predictor(cache, ids.shape[1], anchors, hidden)[:, :, :depth]  # [B, A, m, V]
            rank = rank_of_truth(predictions, truth.to(predictions.device), topk)
            for k in range(depth):
                counts[name][k] += torch.bincount(rank[:, :, k].reshape(-1).cpu(), minlength=topk + 1)
    return counts


def accuracies_from_counts(counts: torch.Tensor) -> list[list[float]]:
    """a[k][r] = P(label at distance k+1 is exactly rank r): the tree builder's input."""
    topk = counts.shape[1] - 1
    return (counts[:, :topk].double() / counts.sum(dim=1, keepdim=True).clamp(min=1)).tolist()


def summary(accuracies: list[list[float]]) -> dict[str, list[float]]:
    """Top-1 and top-k (cumulative) accuracy per distance, rounded for tables."""
    return {"top1": [round(row[0], 4) for row in accuracies],
            f"top{len(accuracies[0])}": [round(sum(row), 4) for row in accuracies]}


def ppd_predictor(model: torch.nn.Module, embeddings: torch.Tensor, max_slots: int = 3072) -> Predictor:
    """PPD prompts as a predictor; anchors are run in chunks of at most `max_slots` prompt slots."""
    per_anchor = embeddings.shape[0] * embeddings.shape[1]
    chunk = max(1, max_slots // per_anchor)

    def predict(cache: DynamicCache, length: int, anchors: torch.Tensor, hidden: torch.Tensor | None
                ) -> torch.Tensor:
        parts = [anchored_student_logits(model, cache, length, anchors[i : i + chunk], embeddings)
                 for i in range(0, anchors.numel(), chunk)]
        return torch.cat(parts, dim=1)

    return predict
