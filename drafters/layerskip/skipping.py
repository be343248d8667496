"""Bypass chosen attention and MLP sub-blocks of a pre-norm decoder, temporarily.

In a pre-norm block ``h = h + attn(norm1(h)); h = h + mlp(norm2(h))`` a sub-block that returns
zeros is an exact identity on the residual stream, so skipping = swapping the sub-module's
``forward`` for one that returns zeros (and the norm feeding it for a pass-through, which saves
its compute). A skipped attention writes no KV. This is *not* a skip for post-LayerNorm models
(OPT-350m style, ``h = norm(h + attn(h))``), which are refused.

Layouts are an explicit table keyed by ``config.model_type``: guessing module names on an unknown
architecture could silently compute something that is not a skip.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from specdec.errors import UnsupportedModelError


@dataclass(frozen=True)
class Layout:
    """Where the decoder layers and their sub-blocks live for one architecture family."""

    layers: str  # dotted path from the CausalLM to the ModuleList of decoder layers
    attention: str
    mlp: str
    attention_norm: str  # the norm whose only consumer is the attention block
    mlp_norm: str  # the norm whose only consumer is the MLP block
    attention_returns_tuple: bool = True  # transformers 5.x attention modules return (output, weights)
    head: str = "lm_head"  # the output projection (a Linear without bias) on the CausalLM
    # transformers 5.x decoder layers take the hidden states first and return them as one tensor, so a
    # layer with both blocks skipped is replaced by a pass-through as a whole.


_LLAMA_LIKE = Layout("model.layers", "self_attn", "mlp", "input_layernorm", "post_attention_layernorm")

LAYOUTS: dict[str, Layout] = {
    "llama": _LLAMA_LIKE,
    "qwen2": _LLAMA_LIKE,
    "qwen3": _LLAMA_LIKE,
    "mistral": _LLAMA_LIKE,
    "gpt2": Layout("transformer.h", "attn", "mlp", "ln_1", "ln_2"),
}

#: Architectures where zeroing a sub-block is not a bypass (the LayerNorm sits after the residual add).
POST_NORM: dict[str, str] = {
    "opt": "OPT applies LayerNorm after the residual add when do_layer_norm_before=False",
    "bert": "BERT is post-LayerNorm (and not a causal LM)",
    "xlm": "XLM is post-LayerNorm",
}


def _resolve(root: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        root = getattr(root, part)
    return root


def layout_for(model: Any) -> Layout:
    """The layout of `model`, or a clear error for post-norm and unknown architectures."""
    config = model.config
    model_type = getattr(config, "model_type", None)
    if model_type == "opt" and getattr(config, "do_layer_norm_before", True):
        raise UnsupportedModelError(
            "layer skipping is not implemented for OPT: its MLP is inline (fc1/fc2 on the layer), so there is "
            "no sub-module to bypass; supported: " + ", ".join(sorted(LAYOUTS)))
    if model_type in POST_NORM:
        raise UnsupportedModelError(
            f"layer skipping needs a pre-norm decoder; {model_type!r} is post-LayerNorm ({POST_NORM[model_type]}), "
            "where a zeroed sub-block is not an identity. Supported: " + ", ".join(sorted(LAYOUTS)))
    if model_type not in LAYOUTS:
        raise UnsupportedModelError(
            f"layer skipping does not know the layout of model_type {model_type!r}; supported: "
            + ", ".join(sorted(LAYOUTS)) + ". Add a Layout to specdec.drafters.layerskip.skipping.LAYOUTS "
            "after checking the architecture is pre-norm.")
    layout = LAYOUTS[model_type]
    try:
        _resolve(model, layout.layers)
    except AttributeError as error:
        raise UnsupportedModelError(
            f"{type(model).__name__} (model_type {model_type!r}) has no {layout.layers!r}; load it with "
            "AutoModelForCausalLM") from error
    return layout


def num_layers(model: Any) -> int:
    return len(_resolve(model, layout_for(model).layers))


def _zero_attention(hidden_states: torch.Tensor | None = None, *args: Any, **kwargs: Any):
    states = hidden_states if hidden_states is not None else kwargs["hidden_states"]
    return torch.zeros_like(states), None


def _zero_attention_tensor(hidden_states: torch.Tensor | None = None, *args: Any, **kwargs: Any):
    states = hidden_states if hidden_states is not None else kwargs["hidden_states"]
    return torch.zeros_like(states)


def _zero_mlp(hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    return torch.zeros_like(hidden_states)


def _pass_through(hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    return hidden_states


def _reduced_head(weight: torch.Tensor) -> Any:
    """An LM head over a subset of the vocabulary: logits [..., N] for the N rows of `weight`."""

    def forward(hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return torch.nn.functional.linear(hidden_states, weight)

    return forward


_MISSING = object()


class LayerSkipper:
    """Context manager: inside ``with skipper:`` the chosen sub-blocks of `model` are bypassed.

    Entering swaps instance-level ``forward`` attributes; leaving restores exactly what was there
    (including wrappers that accelerate's device hooks install), so nothing persists outside.
    """

    def __init__(self, model: Any, attention: Iterable[int] = (), mlp: Iterable[int] = (),
                 head_tokens: Sequence[int] | None = None) -> None:
        """`head_tokens`: compute logits only for these token ids (in this order) while inside, so the
        model returns [..., len(head_tokens)] logits; None = the full vocabulary."""
        self.layout = layout_for(model)
        layers = _resolve(model, self.layout.layers)
        self.num_layers = len(layers)
        self.attention = sorted(set(int(i) for i in attention))
        self.mlp = sorted(set(int(i) for i in mlp))
        for kind, indices in (("attention", self.attention), ("mlp", self.mlp)):
            bad = [i for i in indices if not 0 <= i < self.num_layers]
            if bad:
                raise ValueError(f"skip set names {kind} layer(s) {bad} but the model has {self.num_layers} layers "
                                 f"(valid indices 0..{self.num_layers - 1})")
        zero_attention = _zero_attention if self.layout.attention_returns_tuple else _zero_attention_tensor
        self._patches: list[tuple[torch.nn.Module, Any]] = []
        whole = set(self.attention) & set(self.mlp)
        for index in sorted(whole):
            # Both blocks skipped: the whole layer is the identity (saves its dispatch overhead too).
            self._patches.append((layers[index], _pass_through))
        for index in self.attention:
            if index not in whole:
                layer = layers[index]
                self._patches.append((getattr(layer, self.layout.attention), zero_attention))
                self._patches.append((getattr(layer, self.layout.attention_norm), _pass_through))
        for index in self.mlp:
            if index not in whole:
                layer = layers[index]
                self._patches.append((getattr(layer, self.layout.mlp), _zero_mlp))
                self._patches.append((getattr(layer, self.layout.mlp_norm), _pass_through))
        self.head_tokens: torch.Tensor | None = None
        if head_tokens is not None:
            head = _resolve(model, self.layout.head)
            if getattr(head, "bias", None) is not None:
                raise UnsupportedModelError("a reduced draft vocabulary needs an LM head without bias")
            ids = torch.as_tensor(list(head_tokens), dtype=torch.long)
            vocab = head.weight.shape[0]
            if ids.numel() == 0 or int(ids.min()) < 0 or int(ids.max()) >= vocab or ids.unique().numel() != ids.numel():
                raise ValueError(f"head_tokens must be distinct token ids in 0..{vocab - 1}")
            self.head_tokens = ids
            # A contiguous copy of the kept rows (N x hidden): gathering them on every call would read
            # as many bytes as the copy holds, every draft step.
            rows = head.weight.detach().index_select(0, ids.to(head.weight.device)).contiguous()
            self._patches.append((head, _reduced_head(rows)))
        self._saved: list[Any] | None = None

    @property
    def active(self) -> bool:
        return self._saved is not None

    def __enter__(self) -> LayerSkipper:
        if self._saved is not None:
            raise RuntimeError("LayerSkipper is not re-entrant")
        self._saved = [module.__dict__.get("forward", _MISSING) for module, _ in self._patches]
        for module, replacement in self._patches:
            module.forward = replacement
        return self

    def __exit__(self, *exc: Any) -> None:
        saved, self._saved = self._saved, None
        for (module, _), previous in zip(self._patches, saved or []):
            if previous is _MISSING:
                del module.forward
            else:
                module.forward = previous
