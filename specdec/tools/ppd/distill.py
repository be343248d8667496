"""The two forwards PPD training and evaluation share: the teacher's greedy continuation (with its
full distributions) and the student's prompt-token predictions on top of the same prefix cache.

The prefix KV does not depend on the prompt embeddings, so the student reuses the teacher's cache
and runs only its m * n_ept prompt slots: gradients reach the embeddings through the prompt
positions' attention over the (constant) prefix keys, which is exact and much cheaper than
re-running the prefix with gradients.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from specdec.forward_arguments import cache_keyword


def _crop_to(cache: DynamicCache, length: int) -> None:
    """Keep the first `length` tokens (transformers 5.x crop() takes a negative count to drop)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


@torch.no_grad()
def teacher_continuation(model: torch.nn.Module, prefix: torch.Tensor, num_prompts: int
                         ) -> tuple[DynamicCache, torch.Tensor, torch.Tensor]:
    """Greedy-decode m + 1 tokens after `prefix` [B, L].

    Returns (cache holding exactly the prefix, teacher logits [B, m, V] where row i is the target's
    distribution for y_{i+2} given x, y_1..y_{i+1}, and the greedy tokens y_1..y_{m+1} [B, m + 1]).
    Prompt token i (1-based) stands in for y_i and is trained to predict y_{i+1}.
    """
    batch, length = prefix.shape
    device = prefix.device
    cache = DynamicCache()
    positions = torch.arange(length, device=device)[None, :].expand(batch, length)
    logits = model(input_ids=prefix, position_ids=positions, use_cache=True, **{cache_keyword(model): cache}).logits[:, -1]
    tokens = [logits.argmax(dim=-1)]
    targets = []
    for i in range(num_prompts):
        position = torch.full((batch, 1), length + i, device=device, dtype=torch.long)
        logits = model(input_ids=tokens[-1][:, None], position_ids=position, use_cache=True,
                       **{cache_keyword(model): cache}).logits[:, -1]
        targets.append(logits.float())
        tokens.append(logits.argmax(dim=-1))
    _crop_to(cache, length)
    return cache, torch.stack(targets, dim=1), torch.stack(tokens, dim=1)


def ensemble_mask(prefix_length: int, num_prompts: int, num_ept: int, dtype: torch.dtype,
                  device: torch.device) -> torch.Tensor:
    """Additive mask [1, 1, m*n, L + m*n] for prompt slots ordered (k, j) -> k*n + j: every slot sees
    the whole prefix and the slots of its own EPT group j at prompt index <= k (T Fig. 4.6)."""
    slots = num_prompts * num_ept
    index = torch.arange(slots, device=device)
    prompt_k, group = index // num_ept, index % num_ept
    among = (group[:, None] == group[None, :]) & (prompt_k[None, :] <= prompt_k[:, None])
    allowed = torch.cat([torch.ones(slots, prefix_length, dtype=torch.bool, device=device), among], dim=1)
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


def student_logits(model: torch.nn.Module, cache: DynamicCache, prefix_length: int, embeddings: torch.Tensor
                   ) -> torch.Tensor:
    """Prompt predictions [B, m, V] (EPT-averaged raw logits) from embeddings [m, n_ept, hidden] placed
    after a cached prefix; prompt k's EPTs all sit at position L - 1 + k. The cache is left as it was."""
    num_prompts, num_ept, hidden = embeddings.shape
    batch = cache.layers[0].keys.shape[0]
    weight = model.get_input_embeddings().weight
    inputs = embeddings.reshape(1, num_prompts * num_ept, hidden).to(weight.dtype).expand(batch, -1, -1)
    positions = (prefix_length + torch.arange(num_prompts, device=weight.device)).repeat_interleave(num_ept)
    mask = ensemble_mask(prefix_length, num_prompts, num_ept, weight.dtype, weight.device).expand(batch, -1, -1, -1)
    logits = model(inputs_embeds=inputs, position_ids=positions[None, :].expand(batch, -1), attention_mask=mask,
                   use_cache=True, **{cache_keyword(model): cache}).logits
    _crop_to(cache, prefix_length)
    return logits.float().reshape(batch, num_prompts, num_ept, -1).mean(dim=2)


def distillation_loss(student: torch.Tensor, teacher: torch.Tensor, decay: float = 0.8) -> torch.Tensor:
    """(1/m) sum_k decay^(k-1) KL(teacher_k || student_k), batch mean (P Eq. 1 weights, the reference
    code's direction: forward KL from the teacher; see docs/ppd.md)."""
    num_prompts = student.shape[1]
    log_student = torch.log_softmax(student, dim=-1)
    log_teacher = torch.log_softmax(teacher, dim=-1)
    per_token = (log_teacher.exp() * (log_teacher - log_student)).sum(dim=-1)  # [B, m]
    weights = decay ** torch.arange(num_prompts, device=student.device, dtype=per_token.dtype)
    return (per_token.mean(dim=0) * weights).sum() / num_prompts


@torch.no_grad()
def rank_counts(model: torch.nn.Module, prefix: torch.Tensor, embeddings: torch.Tensor, topk: int = 10
                ) -> torch.Tensor:
    """Counts [m, topk + 1]: how often the greedy token at distance k+1 is exactly prompt k's rank-r
    guess (column topk = not in the top-k). The reference definition (T §5.6.3, eval.py)."""
    num_prompts = embeddings.shape[0]
    cache, _, greedy = teacher_continuation(model, prefix, num_prompts)
    predictions = student_logits(model, cache, prefix.shape[1], embeddings)  # [B, m, V]
    top = predictions.topk(topk, dim=-1).indices  # [B, m, K]
    truth = greedy[:, 1:]  # prompt k (0-based) predicts y_{k+2}
    hit = top == truth[:, :, None]  # [B, m, K]
    rank = torch.where(hit.any(dim=-1), hit.float().argmax(dim=-1), torch.full_like(truth, topk))
    counts = torch.zeros(num_prompts, topk + 1, dtype=torch.long)
    for k in range(num_prompts):
        counts[k] += torch.bincount(rank[:, k].cpu(), minlength=topk + 1)
    return counts
