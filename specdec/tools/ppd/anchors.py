"""Many anchors per window: the target's greedy continuation and the prompt tokens' predictions at every
chosen cut point of a window in a few forwards, instead of one window per cut point.

A window x_0..x_{L-1} is run once (its KV cached). Anchor t stands for the prefix x_<=t. The frozen
target's greedy continuation from each anchor, y_1(t), y_2(t), ..., is built with extra *slots*: pass i
feeds y_i(t) for every anchor at position t + i, each slot seeing x_<=t and its own anchor's earlier
slots only, so its logits are exactly the target's distribution for y_{i+1}(t) given (x_<=t, y_1..y_i).
The prompt tokens ride along the same way: prompt k (1-based) of EPT group j at anchor t sits at
position t + k and sees x_<=t and group j's earlier prompts of the same anchor (the ensemble mask of
`distill.ensemble_mask`, once per anchor). With one anchor at L - 1 this is exactly `distill.py`.

Distance k (1-based) throughout: the label of anchor t at distance k is y_{k+1}(t), the target's own
greedy token k + 1 ahead of the anchor; prompt k predicts it (y_1(t) is the anchor's own next token).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from specdec.forward_arguments import cache_keyword

from .distill import _crop_to


def _additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


def _prefix_part(prefix_length: int, anchor_of_slot: torch.Tensor) -> torch.Tensor:
    """[S, L] bool: slot sees prefix position p iff p <= its anchor."""
    keys = torch.arange(prefix_length, device=anchor_of_slot.device)
    return keys[None, :] <= anchor_of_slot[:, None]


@torch.no_grad()
def greedy_chains(model: torch.nn.Module, ids: torch.Tensor, anchors: torch.Tensor, depth: int,
                  keep_hidden: bool = False
                  ) -> tuple[DynamicCache, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The target's greedy continuation y_1..y_{depth+1} from every anchor of `ids` [B, L].

    Returns (cache holding exactly the window, teacher logits [B, A, depth, V] where [:, a, i] is the
    distribution of y_{i+2}(anchor a), greedy tokens [B, A, depth + 1], and - with keep_hidden - the
    final hidden state (the LM head's input) at each anchor [B, A, hidden], what a Medusa head reads).
    """
    batch, length = ids.shape
    device = ids.device
    anchors = anchors.to(device)
    num = anchors.numel()
    captured: list[torch.Tensor] = []
    hook = None
    if keep_hidden:
        hook = model.get_output_embeddings().register_forward_hook(lambda _m, args, _o: captured.append(args[0]))
    cache = DynamicCache()
    positions = torch.arange(length, device=device)[None, :].expand(batch, length)
    try:
        logits = model(input_ids=ids, position_ids=positions, use_cache=True, **{cache_keyword(model): cache}).logits
    finally:
        if hook is not None:
            hook.remove()
    hidden = captured[0][:, anchors].float() if keep_hidden else None
    tokens = [logits[:, anchors].argmax(dim=-1)]  # y_1 [B, A]
    dtype = model.get_input_embeddings().weight.dtype
    earlier = torch.zeros(num, 0, dtype=torch.bool, device=device)
    same_anchor = torch.eye(num, dtype=torch.bool, device=device)
    targets = []
    for i in range(1, depth + 1):
        allowed = torch.cat([_prefix_part(length, anchors), earlier, same_anchor], dim=1)
        mask = _additive(allowed, dtype).expand(batch, -1, -1, -1)
        position = (anchors + i)[None, :].expand(batch, num)
        logits = model(input_ids=tokens[-1], position_ids=position, attention_mask=mask, use_cache=True,
                       **{cache_keyword(model): cache}).logits
        targets.append(logits.float())
        tokens.append(logits.argmax(dim=-1))
        earlier = torch.cat([earlier, same_anchor], dim=1)
    _crop_to(cache, length)
    teacher = torch.stack(targets, dim=2) if targets else torch.zeros(batch, num, 0, 0)
    return cache, teacher, torch.stack(tokens, dim=2), hidden


def anchored_mask(prefix_length: int, anchors: torch.Tensor, num_prompts: int, num_ept: int,
                  dtype: torch.dtype) -> torch.Tensor:
    """Additive mask [1, 1, S, L + S] for prompt slots ordered (anchor a, prompt k, group j)."""
    device = anchors.device
    per_anchor = num_prompts * num_ept
    index = torch.arange(anchors.numel() * per_anchor, device=device)
    anchor, prompt_k, group = index // per_anchor, (index % per_anchor) // num_ept, index % num_ept
    among = ((anchor[:, None] == anchor[None, :]) & (group[:, None] == group[None, :])
             & (prompt_k[None, :] <= prompt_k[:, None]))
    return _additive(torch.cat([_prefix_part(prefix_length, anchors[anchor]), among], dim=1), dtype)


def anchored_student_logits(model: torch.nn.Module, cache: DynamicCache, prefix_length: int,
                            anchors: torch.Tensor, embeddings: torch.Tensor) -> torch.Tensor:
    """Prompt predictions [B, A, m, V] (EPT-averaged raw logits) at every anchor, from embeddings
    [m, n_ept, hidden]; the cache (holding the window) is left as it was."""
    num_prompts, num_ept, hidden = embeddings.shape
    batch = cache.layers[0].keys.shape[0]
    weight = model.get_input_embeddings().weight
    anchors = anchors.to(weight.device)
    num = anchors.numel()
    slots = num * num_prompts * num_ept
    inputs = embeddings.to(weight).reshape(1, 1, num_prompts * num_ept, hidden).expand(batch, num, -1, -1)
    offsets = (1 + torch.arange(num_prompts, device=weight.device)).repeat_interleave(num_ept)
    positions = (anchors[:, None] + offsets[None, :]).reshape(1, slots).expand(batch, -1)
    mask = anchored_mask(prefix_length, anchors, num_prompts, num_ept, weight.dtype).expand(batch, -1, -1, -1)
    logits = model(inputs_embeds=inputs.reshape(batch, slots, hidden), position_ids=positions, attention_mask=mask,
                   use_cache=True, **{cache_keyword(model): cache}).logits
    _crop_to(cache, prefix_length)
    return logits.float().reshape(batch, num, num_prompts, num_ept, -1).mean(dim=3)
