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

Models on eager attention (soft-capping, attention sinks: what SDPA cannot compute) get the same treatment
from `specdec_eager`, `specdec_eager_softcap` and `specdec_eager_sinks` (`EAGER_ATTENTION`): transformers'
eager computation over the stored KV heads, for the three eager functions transformers' models share
(Llama's, Gemma 2's with soft-capping, GPT-OSS's with sinks), recognised by their source text. A model
whose eager function is another comes back as it is (transformers' eager path, which expands the cache).
"""

from __future__ import annotations

import copy
import importlib
import inspect
import re
import sys
import weakref
from collections.abc import Callable
from typing import Any

import torch
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import eager_mask, sdpa_mask

SPECDEC_ATTENTION = "specdec_sdpa"
#: The runtime's eager attention functions by the transformers eager function they compute (`_EAGER_SOURCES`).
EAGER_ATTENTION = {"plain": "specdec_eager", "softcap": "specdec_eager_softcap", "sinks": "specdec_eager_sinks"}
#: Where transformers defines each eager function: models whose own function has the same source text compute
#: the same thing (157 models share Llama's, 12 Gemma 2's in transformers 5.24).
_EAGER_SOURCES = {"plain": "transformers.models.llama.modeling_llama",
                  "softcap": "transformers.models.gemma2.modeling_gemma2",
                  "sinks": "transformers.models.gpt_oss.modeling_gpt_oss"}

# Views of the models the runtime has run, kept only as long as the model lives (weak keys).
_VIEWS: weakref.WeakKeyDictionary[torch.nn.Module, tuple[tuple[int, ...], torch.nn.Module]] = (
    weakref.WeakKeyDictionary())


#: Dtypes in which torch's CPU flash-attention kernel is ~4x slower for one query row than for two (`lone_query`);
#: in float16 and float32 one row is not the slower (float16: 0.74 against 0.77 ms over 900 keys).
_SLOW_LONE_QUERY = (torch.bfloat16,)


def lone_query(query: torch.Tensor, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """A one-row query [B, H, 1, D] (and its mask [B, 1 or H, 1, S]) repeated to two rows, where SDPA computes two
    rows faster than one: torch 2.13's CPU flash-attention kernel in bfloat16 takes 0.44 ms for one query row over
    900 keys and 0.11 ms for two (in float32 and float16 one row is not the slower), so every plain decoding step
    of a bfloat16 model on a CPU paid ~2.5 ms of a 10 ms step behind a 1000-token prompt (the bundled target in
    bfloat16, its checkpoint's dtype). Each row is computed on its own; the pair's first row is the lone row's
    result as the two-row kernel rounds it (in 5 of 200 random shapes it differed from the one-row kernel's in the
    last bit, as any other kernel choice may). None where the query is not one row, not on a CPU, or not in
    bfloat16."""
    if query.shape[2] != 1 or query.device.type != "cpu" or query.dtype not in _SLOW_LONE_QUERY:
        return None
    if mask is not None:
        mask = mask.expand(*mask.shape[:2], 2, mask.shape[3]).contiguous()
    return query.expand(-1, -1, 2, -1).contiguous(), mask  # (a stride-0 row halves the gain)


def grouped_sdpa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attention_mask: torch.Tensor | None, scaling: float | None = None, **kwargs: Any) -> torch.Tensor:
    """query [B, H, T, D], key/value [B, Hkv, S, D] -> [B, T, H, D]. With a mask and fewer KV heads than query
    heads, the G = H / Hkv query heads of each KV head are folded into the query length (never expanding
    the keys and values); otherwise transformers' SDPA path, which needs no expansion then. A one-row query
    on a CPU in bfloat16 runs as two rows (`lone_query`)."""
    batch, heads, steps, dim = query.shape
    kv_heads = key.shape[1]
    doubled = lone_query(query, attention_mask) if attention_mask is None or kv_heads == heads else None
    if doubled is not None:  # (with a mask and grouped heads the folded query has G rows already)
        out = grouped_sdpa(module, doubled[0], key, value, doubled[1], scaling, **{**kwargs, "is_causal": False})
        return out[:, :1]
    if attention_mask is None or kv_heads == heads or kwargs.get("position_bias") is not None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)[0]
    groups = heads // kv_heads
    folded = query.reshape(batch, kv_heads, groups * steps, dim)  # head h = kv * G + g, as repeat_kv orders them
    mask = _folded_mask(attention_mask, kv_heads, groups, steps)
    out = torch.nn.functional.scaled_dot_product_attention(folded, key, value, attn_mask=mask, scale=scaling)
    return out.reshape(batch, heads, steps, dim).transpose(1, 2).contiguous()


def _folded_mask(mask: torch.Tensor, kv_heads: int, groups: int, steps: int) -> torch.Tensor:
    """A mask [B, 1 or H, T, S] for queries folded to [B, Hkv, G*T, D]."""
    if mask.shape[1] == 1:
        return mask[:, :, None].expand(-1, -1, groups, -1, -1).reshape(mask.shape[0], 1, groups * steps, -1)
    return mask.reshape(mask.shape[0], kv_heads, groups * steps, -1)


def grouped_eager(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attention_mask: torch.Tensor | None, kind: str, dropout: float = 0.0, scaling: float | None = None,
                  softcap: float | None = None, **kwargs: Any) -> torch.Tensor:
    """transformers' eager attention of `kind` (see `_EAGER_SOURCES`) with the G = H / Hkv query heads of each KV
    head folded into the query length: query [B, H, T, D], key/value [B, Hkv, S, D] -> [B, T, H, D]. The same
    operations in the same order as transformers' function, without `repeat_kv`."""
    batch, heads, steps, dim = query.shape
    kv_heads = key.shape[1]
    groups = heads // kv_heads
    if scaling is None:
        scaling = module.head_dim**-0.5
    folded = query.reshape(batch, kv_heads, groups * steps, dim)
    scores = torch.matmul(folded, key.transpose(2, 3)) * scaling
    if kind == "softcap" and softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if attention_mask is not None:
        scores = scores + _folded_mask(attention_mask, kv_heads, groups, steps)
    if kind == "sinks":  # one learned logit per query head joins each softmax, then is dropped
        sinks = module.sinks.reshape(1, kv_heads, groups, 1, 1).expand(batch, -1, -1, steps, -1)
        combined = torch.cat([scores, sinks.reshape(batch, kv_heads, groups * steps, 1)], dim=-1)
        combined = combined - combined.max(dim=-1, keepdim=True).values
        weights = torch.nn.functional.softmax(combined, dim=-1, dtype=combined.dtype)[..., :-1]
        weights = torch.nn.functional.dropout(weights, p=dropout, training=module.training).to(value.dtype)
    else:
        weights = torch.nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
        weights = torch.nn.functional.dropout(weights, p=dropout, training=module.training)
    out = torch.matmul(weights, value)
    return out.reshape(batch, heads, steps, dim).transpose(1, 2).contiguous()


def _eager_attention(kind: str) -> Callable[..., tuple[torch.Tensor, None]]:
    def attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attention_mask: torch.Tensor | None, specdec_layout: Any = None,
                  **kwargs: Any) -> tuple[torch.Tensor, None]:
        if specdec_layout is not None:  # ragged layouts are planned only for models on SDPA (`specdec.target`)
            raise ValueError("the eager attention view takes no ragged layout")
        return grouped_eager(module, query, key, value, attention_mask, kind, **kwargs), None

    attention.__name__ = attention.__qualname__ = EAGER_ATTENTION[kind]
    return attention


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
for _kind, _name in EAGER_ATTENTION.items():
    AttentionInterface.register(_name, _eager_attention(_kind))
    AttentionMaskInterface.register(_name, eager_mask)


def attention_view(model: torch.nn.Module) -> torch.nn.Module:
    """The model as the runtime runs it: for a model on SDPA attention, a structural copy whose modules share
    every parameter, buffer and hook with `model` but read a copy of its config naming `specdec_sdpa`; on eager
    attention, the same naming the `EAGER_ATTENTION` function of its eager function's kind. Kept per model
    (weakly) and rebuilt when the model's modules change. Never modifies `model`. A model whose attention
    does not dispatch through transformers' registry (`dispatches_attention`), whose eager function is none of
    the known ones, or on another implementation, comes back as it is and runs transformers' own path."""
    config = getattr(model, "config", None)
    implementation = getattr(config, "_attn_implementation", None)
    if implementation not in ("sdpa", "eager"):
        return model
    modules = tuple(id(module) for module in model.modules())
    cached = _VIEWS.get(model)
    if cached is None or cached[0] != modules:
        name = SPECDEC_ATTENTION if implementation == "sdpa" else _eager_name(model)
        view = model
        if name is not None and dispatches_attention(model, implementation):
            view = _copy(model, _configs(model, name))
        cached = (modules, view)
        _VIEWS[model] = cached
    return cached[1]


def dispatches_attention(model: torch.nn.Module, implementation: str = "sdpa") -> bool:
    """Whether the model's attention goes through transformers' attention-function registry and nothing in its
    modeling code branches on the name of its `implementation` (Falcon, for one, runs its own SDPA call when the
    config says "sdpa" and would take another path under any other name). Read from the source of the modules
    its layers are defined in (a subclass defined elsewhere keeps its parents' layers)."""
    names_it = re.compile(r"_attn_implementation\b[^\n]*[\"']" + re.escape(implementation) + r"[\"']")
    sources = _modeling_sources(model)
    return sources is not None and any("ALL_ATTENTION_FUNCTIONS" in source for source in sources) and not any(
        names_it.search(source) for source in sources)


def _modeling_sources(model: torch.nn.Module) -> list[str] | None:
    """The source of every module the model's layers are defined in (None when one cannot be read)."""
    names = {type(module).__module__ for module in model.modules()} - {None}
    sources = []
    for name in sorted(n for n in names if not n.startswith("torch.")):
        try:
            sources.append(inspect.getsource(sys.modules[name]))
        except (KeyError, OSError, TypeError):
            return None
    return sources


def _eager_name(model: torch.nn.Module) -> str | None:
    """The `EAGER_ATTENTION` function computing what the model's eager attention computes: every modeling module
    of its layers that defines an `eager_attention_forward` defines one of `_EAGER_SOURCES`' (the same source
    text), all of one kind; None otherwise."""
    kinds = set()
    for name in {type(module).__module__ for module in model.modules()} - {None}:
        function = getattr(sys.modules.get(name), "eager_attention_forward", None)
        if function is not None:
            kinds.add(_eager_kind(function))
    return EAGER_ATTENTION[kinds.pop()] if len(kinds) == 1 and None not in kinds else None


def _eager_kind(function: Callable) -> str | None:
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        return None
    for kind, module in _EAGER_SOURCES.items():
        if source == inspect.getsource(importlib.import_module(module).eager_attention_forward):
            return kind
    return None


def _configs(model: torch.nn.Module, name: str) -> dict[int, Any]:
    """Every config object the model's modules hold -> its copy naming the attention function `name`."""
    copies: dict[int, Any] = {}
    for module in model.modules():
        config = module.__dict__.get("config")
        if config is not None and id(config) not in copies and hasattr(config, "_attn_implementation_internal"):
            twin = copy.copy(config)
            twin._attn_implementation_internal = name
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
