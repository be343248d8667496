"""What each layer of a model attends to, read from its config: full, sliding-window or chunked attention.

Why: real checkpoints mix attention kinds (Gemma 2/3 and Cohere 2 alternate sliding and global layers,
Qwen2/3 window only the layers from `max_window_layers` up, Mistral windows every layer, Llama 4 chunks).
The runtime passes its own masks, so it must build one per layer type the config declares; a single
mask for every layer silently changes the output once the text is longer than a window.

transformers 5 declares layer kinds in `config.layer_types` (hybrid models take a mapping from layer type
to mask as `attention_mask`); older-style configs give one `sliding_window` for every layer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import torch

from .errors import UnsupportedModelError

FULL = "full_attention"
SLIDING = "sliding_attention"
CHUNKED = "chunked_attention"
KNOWN_LAYER_TYPES = (FULL, SLIDING, CHUNKED)

#: Attention implementations that take no arbitrary 4-D mask (they read a padding mask or build their own
#: causal pattern): tree verification and ragged batches cannot be expressed through them.
_MASKLESS_IMPLEMENTATIONS = ("flash_attention", "paged", "kernels-community/")


@dataclass(frozen=True)
class LayerKind:
    """One layer type: which keys a query at position q may see (on top of causality and the tree).

    full: every earlier key; sliding: keys at positions k with q - k < window (transformers' convention);
    chunked: keys in the same chunk, k // chunk == q // chunk."""

    name: str
    window: int | None = None
    chunk: int | None = None

    def restrict(self, allowed: torch.Tensor, query_pos: torch.Tensor, key_pos: torch.Tensor) -> torch.Tensor:
        """`allowed` [B, T, S] narrowed to this kind; positions: queries [B, T], keys [B, S]."""
        if self.window is not None:
            return allowed & ((query_pos[:, :, None] - key_pos[:, None, :]) < self.window)
        if self.chunk is not None:
            return allowed & ((query_pos[:, :, None] // self.chunk) == (key_pos[:, None, :] // self.chunk))
        return allowed


@dataclass(frozen=True)
class LayerAttention:
    """The attention kinds of one model: `kinds` holds each distinct layer type once, in order of first use."""

    kinds: tuple[LayerKind, ...]
    layer_types: tuple[str, ...]  # per layer

    @property
    def all_full(self) -> bool:
        """Every layer sees every earlier key: a plain causal mask is the whole story."""
        return all(kind.window is None and kind.chunk is None for kind in self.kinds)

    @property
    def mapping(self) -> bool:
        """Layers differ, so the model gets {layer type: mask} (transformers 5's hybrid models take it);
        a model whose layers all attend alike gets one 4-D mask."""
        return len(self.kinds) > 1

    @property
    def longest_span(self) -> int:
        """The longest window or chunk of any layer (0 when every layer is full): a check of the masks
        must run past it."""
        return max([kind.window or kind.chunk or 0 for kind in self.kinds], default=0)


def layer_attention(config: Any) -> LayerAttention:
    """The attention kinds `config` declares; refuses layer types the runtime cannot mask."""
    layers = int(getattr(config, "num_hidden_layers", 0) or 0)
    window = _positive_int(getattr(config, "sliding_window", None))
    chunk = _positive_int(getattr(config, "attention_chunk_size", None))
    declared = getattr(config, "layer_types", None)
    if isinstance(declared, (list, tuple)) and declared:
        layer_types = tuple(str(name) for name in declared)
    else:  # one kind for every layer: Mistral-style `sliding_window`, or full attention
        layer_types = (SLIDING if window is not None else FULL,) * max(layers, 1)
    kinds: dict[str, LayerKind] = {}
    for name in layer_types:
        if name in kinds:
            continue
        if name == FULL:
            kinds[name] = LayerKind(name)
        elif name == SLIDING:
            if window is None:
                raise UnsupportedModelError(f"{type(config).__name__} declares sliding_attention layers but no "
                                            "positive sliding_window", feature="sliding layers without a window")
            kinds[name] = LayerKind(name, window=window)
        elif name == CHUNKED:
            if chunk is None:
                raise UnsupportedModelError(f"{type(config).__name__} declares chunked_attention layers but no "
                                            "positive attention_chunk_size", feature="chunked layers without a chunk size")
            kinds[name] = LayerKind(name, chunk=chunk)
        else:
            raise UnsupportedModelError(
                f"{type(config).__name__} has layers of type {name!r}; specdec masks only "
                f"{', '.join(KNOWN_LAYER_TYPES)} layers (the feature missing is {name} in the KV cache and masks)")
    return LayerAttention(tuple(kinds.values()), layer_types)


def _positive_int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def attention_implementation(config: Any) -> str:
    return str(getattr(config, "_attn_implementation", None) or "eager")


def implementation_problem(model: Any) -> tuple[str, str] | None:
    """(feature, why) when this model cannot be exact under specdec, judged from its class and config alone
    (before any forward: on CUDA a failing kernel can poison the whole context), or None."""
    config = model.config
    implementation = attention_implementation(config)
    if any(marker in implementation for marker in _MASKLESS_IMPLEMENTATIONS):
        return (f"{implementation} attention",
                f"attention implementation {implementation!r} cannot take the arbitrary 4-D masks that tree "
                "verification and ragged batches need; load the model with attn_implementation=\"sdpa\" "
                "(or \"eager\")")
    softcap = getattr(config, "attn_logit_softcapping", None)
    if softcap and implementation == "sdpa":
        return ("attention-logit soft-capping under SDPA",
                f"transformers' SDPA attention cannot apply the attention-logit soft-capping this model uses "
                f"(attn_logit_softcapping={softcap}); load the model with attn_implementation=\"eager\"")
    if implementation == "sdpa" and getattr(type(model), "_supports_sdpa", True) is False:
        return ("SDPA attention (the class has no SDPA path)",
                f"{type(model).__name__} has no SDPA path in transformers (SDPA would drop part of its "
                "attention, such as GPT-OSS's attention sinks); load the model with attn_implementation=\"eager\"")
    if getattr(config, "attn_temperature_tuning", False) and getattr(config, "no_rope_layers", None):
        return ("attention temperature tuning on NoPE layers",
                "attention temperature tuning (Llama 4's attn_temperature_tuning on its NoPE layers) takes each "
                "query's position from the cache length instead of position_ids, so tree nodes and rows of a "
                "ragged batch would get another position's scale")
    return None


def attention_signature(model: Any) -> tuple:
    """Everything that changes how the model attends, as a hashable key for the support check's verdicts:
    class (which fixes extras such as attention sinks), implementation, layer types, windows and chunks,
    soft-capping and dtype, and the rest of the config (any other field may change attention too, as Llama
    4's temperature tuning does; a verdict is cheap to measure again)."""
    config = model.config
    layers = layer_attention(config)
    return (
        f"{type(model).__module__}.{type(model).__qualname__}",
        attention_implementation(config),
        layers.layer_types,
        layers.kinds,
        getattr(config, "attn_logit_softcapping", None),
        getattr(config, "final_logit_softcapping", None),
        str(model.get_input_embeddings().weight.dtype),
        json.dumps(config.to_dict(), sort_keys=True, default=str),
    )
