"""Layer plans: which sub-blocks a drafter's scratch forward bypasses and which tokens its head scores.

Self-speculation (`layer_skip`) drafts with the target's own layers, some attention and MLP sub-blocks
bypassed; a draft model may score only part of its vocabulary. A drafter says so with a `LayerPlan`
and the runner (`TargetRunner.scratch_forward`) runs it, one of two ways:
- a plan view (`plan_view`): a structural copy of the model the runtime runs, sharing every parameter,
  whose bypassed sub-modules are replaced in the copy by modules that add nothing to the residual
  stream, and whose head is a copy of the kept rows. The user's model is never modified;
- the lean forward (`specdec.lean_forward`, `LayerPlan.lean`) on Llama-family models, which builds
  only what the plan keeps.

In a pre-norm block ``h = h + attn(norm1(h)); h = h + mlp(norm2(h))`` a sub-block that returns zeros
is an exact identity on the residual stream (and its norm need not run); a bypassed attention writes
no KV. That is *not* a skip for post-LayerNorm models (``h = norm(h + attn(h))``), which are refused.
Layouts are an explicit table keyed by ``config.model_type``: guessing module names on an unknown
architecture could silently compute something that is not a skip.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch

from .errors import UnsupportedModelError
from .lean_forward import WeightFormat, default_weight_format


@dataclass(frozen=True)
class Layout:
    """Where the decoder layers and their sub-blocks live for one architecture family."""

    layers: str  # dotted path from the CausalLM to the ModuleList of decoder layers
    attention: str
    mlp: str
    attention_norm: str  # the norm whose only consumer is the attention block
    mlp_norm: str  # the norm whose only consumer is the MLP block
    attention_returns_tuple: bool = True  # transformers 5.x attention modules return (output, weights)
    # transformers 5.x decoder layers take the hidden states first and return them as one tensor, so a
    # layer with both blocks bypassed is replaced by a pass-through as a whole.


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
            + ", ".join(sorted(LAYOUTS)) + ". Add a Layout to specdec.layer_plan.LAYOUTS "
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


@dataclass(frozen=True, eq=False)
class LayerPlan:
    """What a scratch forward computes. Build it with `LayerPlan.build` (checked against the model) once per
    model and reuse it: the runner keeps what it prepares for a plan (a view, a reduced head) per plan object,
    so plans compare by identity."""

    skip_attention: tuple[int, ...] = ()  # 0-based layers whose attention sub-block is bypassed (no KV written)
    skip_mlp: tuple[int, ...] = ()  # 0-based layers whose MLP sub-block is bypassed
    head_tokens: tuple[int, ...] | None = None  # the head scores only these token ids, in this order; None = all
    lean: bool = False  # run specdec's fused forward where it covers the architecture (`specdec.lean_forward`)
    weights: WeightFormat = "model"  # how the lean forward stores its weights

    @classmethod
    def build(cls, model: Any, skip_attention: Iterable[int] = (), skip_mlp: Iterable[int] = (),
              head_tokens: Sequence[int] | None = None, lean: bool = False,
              weights: WeightFormat | None = None) -> LayerPlan:
        """A plan for `model`: the layers exist and the architecture's layout is known (UnsupportedModelError for
        post-norm and unknown ones) when anything is bypassed; head tokens are distinct ids of its vocabulary.
        `weights` None: int8 where the model sits on a CPU and torch has the kernel, else the model's own."""
        attention = tuple(sorted({int(i) for i in skip_attention}))
        mlp = tuple(sorted({int(i) for i in skip_mlp}))
        if attention or mlp:
            layers = num_layers(model)
            for kind, indices in (("attention", attention), ("mlp", mlp)):
                bad = [i for i in indices if not 0 <= i < layers]
                if bad:
                    raise ValueError(f"skip set names {kind} layer(s) {bad} but the model has {layers} layers "
                                     f"(valid indices 0..{layers - 1})")
        head = None
        if head_tokens is not None:
            head = tuple(int(t) for t in head_tokens)
            vocab = int(model.get_output_embeddings().weight.shape[0])
            if not head or min(head) < 0 or max(head) >= vocab or len(set(head)) != len(head):
                raise ValueError(f"head_tokens must be distinct token ids in 0..{vocab - 1}")
        return cls(attention, mlp, head, bool(lean), weights or default_weight_format(model))

    @property
    def skips(self) -> bool:
        return bool(self.skip_attention or self.skip_mlp)

    @cached_property
    def key(self) -> tuple:
        """What the plan computes, as a value (for caches that outlive one plan object)."""
        return self.skip_attention, self.skip_mlp, self.head_tokens


class _ZeroBlock(torch.nn.Module):
    """A bypassed attention or MLP sub-block: adds zeros to the residual stream."""

    def __init__(self, returns_tuple: bool) -> None:
        super().__init__()
        self.returns_tuple = returns_tuple

    def forward(self, hidden_states: torch.Tensor | None = None, *args: Any, **kwargs: Any) -> Any:
        states = hidden_states if hidden_states is not None else kwargs["hidden_states"]
        zeros = torch.zeros_like(states)
        return (zeros, None) if self.returns_tuple else zeros


class _PassThrough(torch.nn.Module):
    """The norm of a bypassed sub-block (nothing reads it), or a layer with both sub-blocks bypassed."""

    def forward(self, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return hidden_states


class _ReducedHead(torch.nn.Module):
    """The LM head over the plan's tokens: logits [..., N]. A contiguous copy of the kept rows (N x hidden):
    gathering them on every call would read as many bytes as the copy holds, every draft step."""

    def __init__(self, head: torch.nn.Module, tokens: Sequence[int]) -> None:
        super().__init__()
        weight = head.weight.detach()
        ids = torch.as_tensor(list(tokens), dtype=torch.long, device=weight.device)
        self.register_buffer("weight", weight.index_select(0, ids).contiguous(), persistent=False)
        bias = getattr(head, "bias", None)
        self.register_buffer("bias", None if bias is None else bias.detach().index_select(0, ids), persistent=False)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(hidden_states, self.weight, self.bias)


# The last plan view per model the runtime ran (weak keys): one self-drafting plan per model is the common
# case, and its reduced head would otherwise be copied again at every generate call.
_VIEWS: weakref.WeakKeyDictionary[torch.nn.Module, tuple[tuple, torch.nn.Module]] = weakref.WeakKeyDictionary()


def plan_view(model: torch.nn.Module, plan: LayerPlan, base: torch.nn.Module | None = None) -> torch.nn.Module:
    """`model` as `plan` runs it: a structural copy of `base` (a view of `model` with the same module tree, such
    as the runtime's own: `specdec.attention`, `specdec.cpu_linear`; default `model`) sharing every parameter,
    buffer and hook, in which the bypassed sub-modules (and the head, for a reduced one: copied from `model`'s)
    are replaced. Neither is modified; only the modules on the way to a replaced one are copied. Kept per base
    (weakly), rebuilt when the plan, the base's modules or the head's weights change."""
    base = model if base is None else base
    head = model.get_output_embeddings()
    stamp = (plan.key, tuple(id(m) for m in base.modules()), head.weight.data_ptr(), head.weight._version)
    cached = _VIEWS.get(base)
    if cached is None or cached[0] != stamp:
        cached = (stamp, _with_replaced(base, _replacements(model, plan), ""))
        _VIEWS[base] = cached
    return cached[1]


def _replacements(model: torch.nn.Module, plan: LayerPlan) -> dict[str, torch.nn.Module]:
    """Dotted path of every module of `model` that `plan` replaces -> its replacement."""
    out: dict[str, torch.nn.Module] = {}
    if plan.skips:
        layout = layout_for(model)
        whole = set(plan.skip_attention) & set(plan.skip_mlp)
        for index in sorted(whole):
            out[f"{layout.layers}.{index}"] = _PassThrough()
        for index in plan.skip_attention:
            if index not in whole:
                out[f"{layout.layers}.{index}.{layout.attention}"] = _ZeroBlock(layout.attention_returns_tuple)
                out[f"{layout.layers}.{index}.{layout.attention_norm}"] = _PassThrough()
        for index in plan.skip_mlp:
            if index not in whole:
                out[f"{layout.layers}.{index}.{layout.mlp}"] = _ZeroBlock(False)
                out[f"{layout.layers}.{index}.{layout.mlp_norm}"] = _PassThrough()
    if plan.head_tokens is not None:
        head = model.get_output_embeddings()
        path = next(name for name, module in model.named_modules() if module is head)
        out[path] = _ReducedHead(head, plan.head_tokens)
    return out


def _with_replaced(module: torch.nn.Module, replacements: dict[str, torch.nn.Module], path: str) -> torch.nn.Module:
    """A copy of `module` (at dotted `path` in the model) with the sub-modules at `replacements`' paths (relative)
    replaced, sharing everything else; `module` itself when nothing under it is replaced."""
    if "" in replacements:
        return replacements[""]
    if not replacements:
        return module
    if "forward" in module.__dict__:
        # Its forward was patched on the instance (accelerate's device hooks, for one) and runs the original
        # module's children, so a copy would silently compute the full model.
        raise UnsupportedModelError(
            f"layer plans cannot bypass sub-blocks under {path or 'the model'!r}: its forward is patched on the "
            "instance (accelerate device_map hooks?); load the model on one device without hooks")
    by_child: dict[str, dict[str, torch.nn.Module]] = {}
    for name, replacement in replacements.items():
        child, _, rest = name.partition(".")
        by_child.setdefault(child, {})[rest] = replacement
    clone = copy.copy(module)  # same parameters, buffers, config and hooks; its own child list
    clone._modules = dict(module._modules)
    for child, inner in by_child.items():
        clone._modules[child] = _with_replaced(module._modules[child], inner, f"{path}.{child}".lstrip("."))
    return clone
