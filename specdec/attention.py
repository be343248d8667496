"""The runtime's attention: SDPA over the KV heads as the cache stores them, and ragged batches.

Why: tree verification and ragged batches pass an explicit 4-D mask, and with a mask transformers' SDPA
path expands a grouped-query model's keys and values to one copy per query head (`repeat_kv`) in every
layer of every step: for a Qwen2.5-7B (28 query heads, 4 KV heads) that copies the whole cache 7 times
over per layer. Here the query heads that share a KV head are folded into the query length instead
([B, H, T, D] -> [B, Hkv, G*T, D], the mask repeated G times along its query rows), one SDPA call over
the stored heads, and unfolded after: the same numbers, with the cache read as it is.

One attention function, registered once with transformers as `specdec_sdpa` (`SPECDEC_ATTENTION`). The
runtime selects it through its own view of the model (`attention_view`): a structural copy sharing
every parameter and buffer, whose modules read a copy of the config that names this function. The
user's model and config are never modified. The forward's ragged layout (packed inputs, per-row
attention; `specdec.target`) travels with the forward call as the keyword `specdec_layout`.
"""

from __future__ import annotations

import copy
import inspect
import re
import sys
import weakref
from typing import Any

import torch
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

SPECDEC_ATTENTION = "specdec_sdpa"

# Views of the models the runtime has run, kept only as long as the model lives (weak keys).
_VIEWS: weakref.WeakKeyDictionary[torch.nn.Module, tuple[tuple[int, ...], torch.nn.Module]] = (
    weakref.WeakKeyDictionary())


def grouped_sdpa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attention_mask: torch.Tensor | None, scaling: float | None = None, **kwargs: Any) -> torch.Tensor:
    """query [B, H, T, D], key/value [B, Hkv, S, D] -> [B, T, H, D]. With a mask and fewer KV heads than query
    heads, the G = H / Hkv query heads of each KV head are folded into the query length (never expanding
    the keys and values); otherwise transformers' SDPA path, which needs no expansion then."""
    batch, heads, steps, dim = query.shape
    kv_heads = key.shape[1]
    if attention_mask is None or kv_heads == heads or kwargs.get("position_bias") is not None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)[0]
    groups = heads // kv_heads
    folded = query.reshape(batch, kv_heads, groups * steps, dim)  # head h = kv * G + g, as repeat_kv orders them
    mask = attention_mask
    if mask.shape[1] == 1:
        mask = mask[:, :, None].expand(-1, -1, groups, -1, -1).reshape(mask.shape[0], 1, groups * steps, -1)
    else:
        mask = mask.reshape(mask.shape[0], kv_heads, groups * steps, -1)
    out = torch.nn.functional.scaled_dot_product_attention(folded, key, value, attn_mask=mask, scale=scaling)
    return out.reshape(batch, heads, steps, dim).transpose(1, 2).contiguous()


def specdec_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                      specdec_layout: Any = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention-function contract: query [B, H, T, D] (or [1, H, N, D] packed), key/value
    [B, Hkv, S, D] from the cache; returns ([B, T, H, D] or [1, N, H, D], None). `specdec_layout`: the
    forward's ragged layout (`specdec.target.Layout`), None for a plain [B, T] forward."""
    if specdec_layout is None:
        return grouped_sdpa(module, query, key, value, attention_mask, scaling, **kwargs), None
    return specdec_layout.attend(module, query, key, value, attention_mask, scaling, **kwargs), None


AttentionInterface.register(SPECDEC_ATTENTION, specdec_attention)
AttentionMaskInterface.register(SPECDEC_ATTENTION, sdpa_mask)  # masks transformers builds itself (plain causal)


def attention_view(model: torch.nn.Module) -> torch.nn.Module:
    """The model as the runtime runs it: for a model on SDPA attention, a structural copy whose modules share
    every parameter, buffer and hook with `model` but read a copy of its config naming `specdec_sdpa`;
    other models (eager attention: soft-capping and the like) come back as they are. Kept per model
    (weakly) and rebuilt when the model's modules change. Never modifies `model`. A model whose attention
    does not dispatch through transformers' registry (`dispatches_attention`) comes back as it is, and
    runs transformers' own SDPA path."""
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return model
    modules = tuple(id(module) for module in model.modules())
    cached = _VIEWS.get(model)
    if cached is None or cached[0] != modules:
        cached = (modules, _copy(model, _configs(model)) if dispatches_attention(model) else model)
        _VIEWS[model] = cached
    return cached[1]


def dispatches_attention(model: torch.nn.Module) -> bool:
    """Whether the model's attention goes through transformers' attention-function registry and nothing in its
    modeling code branches on the name "sdpa" (Falcon, for one, runs its own SDPA call when the config says
    "sdpa" and would take another path under any other name). Read from the source of the modules its
    layers are defined in (a subclass defined elsewhere keeps its parents' layers)."""
    names = {type(module).__module__ for module in model.modules()} - {None}
    sources = []
    for name in sorted(n for n in names if not n.startswith("torch.")):
        try:
            sources.append(inspect.getsource(sys.modules[name]))
        except (KeyError, OSError, TypeError):
            return False
    return any("ALL_ATTENTION_FUNCTIONS" in source for source in sources) and not any(
        _NAMES_SDPA.search(source) for source in sources)


_NAMES_SDPA = re.compile(r"_attn_implementation\b[^\n]*[\"']sdpa[\"']")


def _configs(model: torch.nn.Module) -> dict[int, Any]:
    """Every config object the model's modules hold -> its copy naming specdec's attention."""
    copies: dict[int, Any] = {}
    for module in model.modules():
        config = module.__dict__.get("config")
        if config is not None and id(config) not in copies and hasattr(config, "_attn_implementation_internal"):
            twin = copy.copy(config)
            twin._attn_implementation_internal = SPECDEC_ATTENTION
            copies[id(config)] = twin
    return copies


def _copy(module: torch.nn.Module, configs: dict[int, Any]) -> torch.nn.Module:
    if "forward" in module.__dict__:  # patched on the instance (accelerate's hooks, for one): keep it
        return module
    clone = copy.copy(module)  # same parameters, buffers and hooks; its own child list and config
    config = module.__dict__.get("config")
    if config is not None and id(config) in configs:
        clone.config = configs[id(config)]
    clone._modules = {name: None if child is None else _copy(child, configs) for name, child in module._modules.items()}
    return clone
