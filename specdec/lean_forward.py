"""A lean forward pass for Llama-family models (Llama, Mistral without a sliding window, Qwen2): the
runner's fast path for drafters' scratch forwards (`TargetRunner.scratch_forward` with a `LayerPlan`
whose `lean` is set).

Why: a draft model is small, so on a CPU its forward is dominated by per-module Python overhead
in transformers (hooks, output dataclasses, mask construction, config lookups), not by matmuls.
The 2-layer default draft spends ~3 ms per one-token forward through `model(...)` on this
project's machine, of which the matmuls are about half. This module runs the same computation
with fused q/k/v and gate/up projections, straight on the runner's `RaggedKVCache` buffers, and
computes logits only where asked.

It also serves self-speculation (`layer_skip`): built with skip sets it bypasses chosen attention and
MLP sub-blocks (a skipped sub-block adds nothing to the residual stream, and a skipped attention
writes no KV), and with `head_tokens` its LM head scores only those rows. The runner decides where
it writes: beyond each row's committed length (`TargetRunner.scratch_slots`).

It only ever produces *guesses*: the target verifies every drafted token, so tiny numeric
differences from transformers' forward (fused matmuls) can change which tokens are proposed but
never the output, and at temperature > 0 q is computed from these same logits, so the rejection
verifier stays lossless. Models it does not recognise use transformers' forward (`supports`).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F

from .attention import lone_query

_FAMILIES = ("llama", "mistral", "qwen2")


def supports(model: Any) -> bool:
    """True when `model` has the plain Llama decoder layout this module reimplements."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "model_type", None) not in _FAMILIES:
        return False
    if getattr(config, "sliding_window", None) or getattr(config, "pretraining_tp", 1) != 1:
        return False
    if any(kind != "full_attention" for kind in getattr(config, "layer_types", None) or ()):
        return False  # windowed or chunked layers: transformers' forward with the runner's per-layer masks
    base = getattr(model, "model", None)
    if base is None or not hasattr(base, "layers") or not hasattr(base, "rotary_emb") or not hasattr(base, "norm"):
        return False
    if type(model).__name__ not in ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"):
        return False
    layer = base.layers[0]
    attn = getattr(layer, "self_attn", None)
    mlp = getattr(layer, "mlp", None)
    return (attn is not None and mlp is not None
            and all(hasattr(attn, name) for name in ("q_proj", "k_proj", "v_proj", "o_proj", "scaling", "head_dim"))
            and all(hasattr(mlp, name) for name in ("gate_proj", "up_proj", "down_proj", "act_fn")))


#: Fused forwards kept per model, one per variant (skip sets, head, weight format), least recently used dropped
#: first: at most VARIANTS_KEPT, and beside the newest only while all their weight copies stay within
#: KEPT_SHARE of the model's own parameter bytes (a big model's fused copies are most of a model each: there one
#: variant is kept, as before). Drafters sharing one small draft in a process (draft_model with its reduced head,
#: ppd_draft_model with the whole one, auto's members) each keep theirs; with one kept, alternating calls rebuilt
#: the int8 copies every time (4-16 ms for the default 3M-parameter draft, a tenth of a short answer's call).
VARIANTS_KEPT = 4
KEPT_SHARE = 0.5
_BUILT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def fast_forward_for(model: Any, skip_attention: Iterable[int] = (), skip_mlp: Iterable[int] = (),
                     head_tokens: Sequence[int] | None = None, weights: WeightFormat = "model",
                     ) -> FastDraftForward | None:
    """The fused forward of `model` (with these sub-blocks skipped and this reduced head), or None when
    its architecture is not covered. Kept per model and variant (`VARIANTS_KEPT`), rebuilt when any weight was
    replaced or modified in place (tensor version counters change)."""
    if not supports(model):
        return None
    variant = (tuple(sorted(set(skip_attention))), tuple(sorted(set(skip_mlp))),
               None if head_tokens is None else tuple(int(t) for t in head_tokens), weights)
    version = tuple((param.data_ptr(), param._version) for param in model.parameters())
    built = _BUILT.setdefault(model, {})
    entry = built.pop(variant, None)
    fresh = entry is None or entry[0] != version
    if fresh:
        entry = (version, FastDraftForward(model, *variant))
    built[variant] = entry  # most recently used last
    if fresh:  # only a new build adds bytes
        budget = KEPT_SHARE * sum(param.numel() * param.element_size() for param in model.parameters())
        while len(built) > 1 and (len(built) > VARIANTS_KEPT
                                  or sum(kept[1].copy_bytes for kept in built.values()) > budget):
            del built[next(iter(built))]
    return entry[1]


#: How the fused forward stores its projection weights. "model": the model's own tensors (fused copies
#: where fused). "float16": half-precision copies. "int8": per-output-channel symmetric int8 copies, run
#: with bfloat16 activations (`torch._weight_int8pack_mm`). Why: on a CPU a one-token forward streams
#: every weight from memory once, so its time follows the weights' bytes (a 2048 x 384 fp32 projection
#: takes ~0.3 ms at M=1 when not in cache, ~0.04 ms as int8); a draft only proposes, so its precision
#: changes which tokens are proposed, never the verified output.
WeightFormat = Literal["model", "float16", "int8"]


def int8_available(device: torch.device) -> bool:
    """The int8 format's kernel exists here: CPU tensors and a torch that has `_weight_int8pack_mm`."""
    return torch.device(device).type == "cpu" and hasattr(torch, "_weight_int8pack_mm")


def default_weight_format(model: Any) -> WeightFormat:
    """int8 where the model sits on a CPU and the kernel exists (drafting there follows weight bytes), else the
    model's own weights: the default of every drafter and search that runs the lean forward."""
    return "int8" if int8_available(model.get_input_embeddings().weight.device) else "model"


class _Linear:
    """y = x W^T + b with W stored in a `WeightFormat`; y has x's dtype."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, weights: WeightFormat) -> None:
        self.bias, self.weights = bias, weights
        self.scales: torch.Tensor | None = None
        weight = weight.detach()
        if weights == "model":
            self.weight = weight
        elif weights == "float16":
            self.weight = weight.to(torch.float16).contiguous()
        elif weights == "int8":
            if not int8_available(weight.device):
                raise ValueError("int8 draft weights need torch._weight_int8pack_mm on the CPU (this torch or device "
                                 "lacks it); use weights 'float16' or 'model'")
            scales = weight.float().abs().amax(dim=1).clamp(min=1e-12) / 127.0
            self.weight = (weight.float() / scales[:, None]).round().clamp(-127, 127).to(torch.int8).contiguous()
            self.scales = scales.to(torch.bfloat16)
        else:
            raise ValueError(f"unknown weight format {weights!r}; expected one of model, float16, int8")

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.weights == "model":
            return F.linear(x, self.weight, self.bias)
        if self.weights == "float16":
            y = F.linear(x.to(torch.float16), self.weight).to(x.dtype)
        else:
            flat = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)
            y = torch._weight_int8pack_mm(flat, self.weight, self.scales).view(*x.shape[:-1], -1).to(x.dtype)
        return y if self.bias is None else y + self.bias


def _cat_bias(*linears: torch.nn.Linear) -> torch.Tensor | None:
    if all(lin.bias is None for lin in linears):
        return None
    return torch.cat([lin.bias if lin.bias is not None else lin.weight.new_zeros(lin.out_features)
                      for lin in linears])


class FastDraftForward:
    """Fused-weight forward of a Llama-family model over a `specdec.kv_cache.RaggedKVCache`."""

    def __init__(self, model: Any, skip_attention: Iterable[int] = (), skip_mlp: Iterable[int] = (),
                 head_tokens: Sequence[int] | None = None, weights: WeightFormat = "model") -> None:
        """`skip_attention` / `skip_mlp`: 0-based layers whose sub-block is bypassed (no fused weights are
        built for them); `head_tokens`: the LM head scores only these token ids, in this order;
        `weights`: how projection and head weights are stored (see `WeightFormat`)."""
        base = model.model
        config = model.config
        self.model = model
        self.embed = base.embed_tokens
        self.rotary = base.rotary_emb
        rope_type = getattr(self.rotary, "rope_type", "default")
        self._rope_is_static = rope_type not in ("dynamic", "longrope")  # these rescale with the sequence length
        self._cos_table: torch.Tensor | None = None
        self._sin_table: torch.Tensor | None = None
        self.norm_weight, self.norm_eps = base.norm.weight, base.norm.variance_epsilon
        head_weight = model.lm_head.weight
        if head_tokens is not None:
            if model.lm_head.bias is not None:
                raise ValueError("a reduced draft vocabulary needs an LM head without bias")
            ids = torch.as_tensor(list(head_tokens), dtype=torch.long, device=head_weight.device)
            # a contiguous copy: gathering the rows on every call would read as many bytes every step
            head_weight = head_weight.detach().index_select(0, ids).contiguous()
        self.lm_head = _Linear(head_weight, model.lm_head.bias, weights)
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        skip_attention, skip_mlp = set(skip_attention), set(skip_mlp)
        self.layers: list[tuple[dict | None, dict | None]] = []  # per layer: (attention, MLP); None = skipped
        for index, layer in enumerate(base.layers):
            attn, mlp = layer.self_attn, layer.mlp
            attention = None if index in skip_attention else {
                "norm_w": layer.input_layernorm.weight, "norm_eps": layer.input_layernorm.variance_epsilon,
                "qkv": _Linear(torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]).contiguous(),
                               _cat_bias(attn.q_proj, attn.k_proj, attn.v_proj), weights),
                "o": _Linear(attn.o_proj.weight, attn.o_proj.bias, weights),
                "scaling": attn.scaling, "head_dim": attn.head_dim,
            }
            feed_forward = None if index in skip_mlp else {
                "norm_w": layer.post_attention_layernorm.weight,
                "norm_eps": layer.post_attention_layernorm.variance_epsilon,
                "gate_up": _Linear(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]).contiguous(),
                                   _cat_bias(mlp.gate_proj, mlp.up_proj), weights),
                "down": _Linear(mlp.down_proj.weight, mlp.down_proj.bias, weights),
                "act": mlp.act_fn, "inter": mlp.gate_proj.out_features,
            }
            self.layers.append((attention, feed_forward))
        # Bytes of the weight copies this forward holds beside the model's own tensors (fused, reduced, int8).
        own = {param.data_ptr() for param in model.parameters()}
        linears = [self.lm_head] + [part[key] for pair in self.layers for part in pair if part is not None
                                    for key in ("qkv", "o", "gate_up", "down") if key in part]
        self.copy_bytes = sum(t.numel() * t.element_size() for lin in linears for t in (lin.weight, lin.scales)
                              if t is not None and t.data_ptr() not in own)

    @staticmethod
    def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """Llama's RMSNorm as one fused op (statistics in float32, as transformers computes them)."""
        if x.dtype == torch.float32:
            return F.rms_norm(x, (x.shape[-1],), weight, eps)
        return weight * F.rms_norm(x.float(), (x.shape[-1],), None, eps).to(x.dtype)

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def _cos_sin(self, hidden: torch.Tensor, positions: torch.Tensor,
                 max_position: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """RoPE cos/sin [B, T, 1, D] for position ids [B, T], looked up in a table the model's own rotary
        module filled (the same values it computes per call, without its ~10 ops per forward); rope
        types whose frequencies depend on the sequence length call the module every time."""
        if not self._rope_is_static:
            cos, sin = self.rotary(hidden, positions)
            return cos[:, :, None], sin[:, :, None]
        needed = (int(positions.max()) if max_position is None else max_position) + 1
        if self._cos_table is None or needed > self._cos_table.shape[0] or self._cos_table.dtype != hidden.dtype:
            size = max(needed, 256, 2 * (0 if self._cos_table is None else self._cos_table.shape[0]))
            cos, sin = self.rotary(hidden, torch.arange(size, device=hidden.device)[None])
            self._cos_table, self._sin_table = cos[0], sin[0]
        return F.embedding(positions, self._cos_table)[:, :, None], F.embedding(positions, self._sin_table)[:, :, None]

    def ready(self, cache: Any, attend_len: int) -> bool:
        """The cache buffers exist (prefill wrote something) and every layer's hold `attend_len` slots
        (layers grow separately: a transformers-path self-draft grows only the layers it runs)."""
        return all(layer.is_initialized and attend_len <= layer.keys.shape[2] for layer in cache.layers)

    @torch.inference_mode()
    def __call__(self, cache: Any, input_ids: torch.Tensor, start: torch.Tensor, positions: torch.Tensor,
                 keep: torch.Tensor | None = None, rows: torch.Tensor | None = None,
                 max_position: int | None = None) -> torch.Tensor:
        """Run a causal chain input_ids [B, T] written at slots start[b] + t with position ids
        `positions` [B, T]; row b attends to its slots [0, start[b] + t]. Returns logits
        [B, T, V], or [B, V] at the input index keep[b] per row when `keep` is given.

        `rows` [R] (cache row indices) runs only those rows of the cache (inputs are then [R, T]):
        in a batch, rows that stopped drafting cost nothing instead of a padded forward. `max_position`: the
        largest position id when the caller knows it on the host (else it is read from `positions`)."""
        batch, steps = input_ids.shape
        device = self.embed.weight.device
        start = np.atleast_1d(np.asarray(start.tolist() if isinstance(start, torch.Tensor) else start, dtype=np.int64))
        start_d = torch.as_tensor(start, device=device)
        if rows is None:
            cache.set_plan(start, steps, device=device)
            attend_len = cache.plan.attend_len
            uniform = cache.plan.uniform_start
        else:  # the cache's write plan (used by transformers' forward) is left alone
            attend_len = int(start.max()) + steps
            uniform = None
            rows_d = rows.to(device)
        hidden = self.embed(input_ids.to(device))
        cos, sin = self._cos_sin(hidden, positions.to(device), max_position)  # [B, T, 1, D]
        if batch == 1 and steps == 1:
            mask = None  # one query sees every slot below it: no mask needed
        else:
            slot = torch.arange(attend_len, device=device)
            last_visible = start_d[:, None] + torch.arange(steps, device=device)[None, :]
            mask = (slot[None, None, :] <= last_visible[:, :, None])[:, None]  # [B, 1, T, S] bool
        if uniform is None:
            slots = start_d[:, None] + torch.arange(steps, device=device)[None, :]
            write_rows = (rows_d if rows is not None else torch.arange(batch, device=device))[:, None]
        for layer, (spec, feed_forward) in zip(cache.layers, self.layers):
            if spec is not None:  # the attention sub-block (a skipped one writes no KV)
                dim = spec["head_dim"]
                x = self._rms(hidden, spec["norm_w"], spec["norm_eps"])
                qkv = spec["qkv"](x)
                q_size, kv_size = self.heads * dim, self.kv_heads * dim
                # q and k heads rotated together: [B, T, H + Hkv, D]
                qk = self._rotate(qkv[..., : q_size + kv_size].view(batch, steps, self.heads + self.kv_heads, dim),
                                  cos, sin)
                q = qk[:, :, : self.heads].transpose(1, 2)
                k = qk[:, :, self.heads :].transpose(1, 2)
                v = qkv[..., q_size + kv_size :].view(batch, steps, self.kv_heads, dim).transpose(1, 2)
                if uniform is not None:
                    layer.keys[:, :, uniform : uniform + steps] = k
                    layer.values[:, :, uniform : uniform + steps] = v
                else:
                    layer.keys[write_rows, :, slots] = k.transpose(1, 2)
                    layer.values[write_rows, :, slots] = v.transpose(1, 2)
                keys, values = layer.keys[:, :, :attend_len], layer.values[:, :, :attend_len]
                if rows is not None:
                    keys, values = keys.index_select(0, rows_d), values.index_select(0, rows_d)
                doubled = lone_query(q, mask)  # (a draft token at a time: CPU bfloat16's slow one-row case)
                attn = F.scaled_dot_product_attention(q if doubled is None else doubled[0], keys, values,
                                                      attn_mask=mask if doubled is None else doubled[1],
                                                      scale=spec["scaling"], enable_gqa=self.kv_heads != self.heads)
                if doubled is not None:
                    attn = attn[:, :, :1]
                attn = attn.transpose(1, 2).reshape(batch, steps, q_size)
                hidden = hidden + spec["o"](attn)
            if feed_forward is not None:
                hidden = self._mlp(hidden, feed_forward)
        if keep is not None:
            hidden = hidden[torch.arange(batch, device=device), keep.to(device)]
        normed = self._rms(hidden, self.norm_weight, self.norm_eps)
        return self.lm_head(normed)

    def _mlp(self, hidden: torch.Tensor, spec: dict) -> torch.Tensor:
        """The residual MLP sub-block: hidden + down(act(gate(x)) * up(x)), x = rms(hidden)."""
        x = self._rms(hidden, spec["norm_w"], spec["norm_eps"])
        gate_up = spec["gate_up"](x)
        inter = spec["inter"]
        return hidden + spec["down"](spec["act"](gate_up[..., :inter]) * gate_up[..., inter:])
