"""Runs the target model on the ragged KV cache with explicit masks and position ids.

One class owns every target forward: prefill, tree verification (with a drafter's extra slots)
and drafters' scratch forwards (under a `LayerPlan`: bypassed sub-blocks, a reduced head, the lean
forward). Masks are additive 4-D tensors in the model's dtype, which transformers 5.x passes through
unchanged to eager and SDPA attention.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from .attention import attention_view, grouped_sdpa
from .compiled import compiled_view
from .cpu_linear import packed_view
from .forward_arguments import cache_keyword
from .kv_cache import RaggedKVCache
from .layer_attention import layer_attention
from .layer_plan import LayerPlan, plan_view
from .lean_forward import FastDraftForward, fast_forward_for

# -- packed inputs and per-row attention (EMS-SD "unpad input" and "unpad KV", Design B) ---------
# Rows of a batch verify different numbers of tokens and have different cache lengths.
# Packed inputs: instead of padding every row to the widest, the model gets the real tokens only,
# packed into one [1, N] row, so every projection, MLP and the LM head run on N rows instead of B x T.
# Only attention needs the row structure: the runtime's attention function (`specdec.attention`) gets the
# forward's `_Layout` and either re-pads the queries to [B, T] for one SDPA over the ragged cache with the
# 4-D mask, or (on a CPU) runs one SDPA per row over that row's own slots only, chosen once per forward
# when the rows' cache lengths differ enough that the dense call would mostly attend to masked-out slots
# (on a CPU SDPA's cost follows the slots it reads, masked or not). Keys and values of packed tokens are
# scattered into the cache by `RaggedLayer.update` from the plan's packed (row, slot) pairs.
_PACKABLE_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2"})  # attention through AttentionInterface
# Per-row attention pays when the dense call would read this many masked-out slots per row on average
# (one SDPA call costs about as much as reading ~50-100 slots on the project's CPU; see the batching
# results README).
ROW_ATTENTION_MIN_WASTE = 64


@dataclass
class _Layout:
    """How the current forward's queries map to rows; passed with the forward (`specdec_layout`) to the
    runtime's attention function in every layer."""

    batch: int
    steps: int
    flat: torch.Tensor | None  # packed: [N] index into the flattened [B * T] inputs; None: [B, T] inputs
    # per row: (its packed queries, their indices among the row's [T] inputs or None for all, kv length Sb);
    # None: dense. The row's mask is cut from the layer's own mask (layer types differ in masks).
    rows: list[tuple[slice, torch.Tensor | None, int]] | None
    flat_host: np.ndarray | None = None  # `flat` on the host, for the cache's write plan
    # Per-row masks cut from each layer type's mask, cut once per forward (layers of one type share a mask).
    row_masks: dict[int, list[torch.Tensor]] = field(default_factory=dict)

    def masks_of_rows(self, attention_mask: torch.Tensor) -> list[torch.Tensor]:
        cut = self.row_masks.get(id(attention_mask))
        if cut is None:
            cut = []
            for row, (_, inputs, kv_len) in enumerate(self.rows):
                mask = attention_mask[row : row + 1, :, :, :kv_len]
                cut.append(mask if inputs is None else mask[:, :, inputs])
            self.row_masks[id(attention_mask)] = cut
        return cut

    def attend(self, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: torch.Tensor, scaling: float | None, **kwargs) -> torch.Tensor:
        """query [1, H, N, D] (packed) or [B, H, T, D]; key/value [B, Hkv, S, D] from the ragged cache.
        Returns [1, N, H, D] or [B, T, H, D]."""
        if self.rows is not None:
            parts = []
            for row, ((queries, _, kv_len), mask) in enumerate(zip(self.rows, self.masks_of_rows(attention_mask))):
                row_query = query[:, :, queries] if self.flat is not None else query[row : row + 1]
                parts.append(grouped_sdpa(module, row_query, key[row : row + 1, :, :kv_len],
                                          value[row : row + 1, :, :kv_len], mask, scaling, **kwargs))
            return torch.cat(parts, dim=1 if self.flat is not None else 0)
        if self.flat is None:
            return grouped_sdpa(module, query, key, value, attention_mask, scaling, **kwargs)
        _, heads, _, dim = query.shape
        padded = query.new_zeros(self.batch * self.steps, heads, dim)
        padded[self.flat] = query[0].transpose(0, 1)
        padded = padded.view(self.batch, self.steps, heads, dim).transpose(1, 2)
        output = grouped_sdpa(module, padded, key, value, attention_mask, scaling, **kwargs)  # [B, T, H, D]
        return output.reshape(self.batch * self.steps, heads, dim)[self.flat][None]


def supports_packed_inputs(model: torch.nn.Module) -> bool:
    """Packed inputs need an attention module that dispatches through transformers' AttentionInterface
    on SDPA (so the runtime's view selects `specdec_sdpa`, which gets the layout) and takes positions from
    `position_ids` (RoPE), which the Llama family does."""
    config = model.config
    return (getattr(config, "model_type", None) in _PACKABLE_MODEL_TYPES
            and getattr(config, "_attn_implementation", None) == "sdpa"
            and hasattr(config, "_attn_implementation_internal") and attention_view(model) is not model)


def check_packed_inputs(model: torch.nn.Module, padded: bool, packed_inputs: bool | None) -> None:
    """A clear error when packed inputs are asked for (True) where they cannot happen (never a silent fallback)."""
    if not packed_inputs:
        return
    if padded:
        raise ValueError("packed_inputs=True needs batch_mode='unpadded' (the padded mode is the vanilla method)")
    if not supports_packed_inputs(model):
        config = model.config
        raise ValueError(f"packed inputs need a Llama-family model ({', '.join(sorted(_PACKABLE_MODEL_TYPES))}) on "
                         f"SDPA attention and transformers' AttentionInterface; got model_type "
                         f"{getattr(config, 'model_type', None)!r} with attention "
                         f"{getattr(config, '_attn_implementation', None)!r}")


def model_device(model: torch.nn.Module) -> torch.device:
    """Where inputs must go: the device of the input embeddings (works with device_map sharding)."""
    return model.get_input_embeddings().weight.device


def model_dtype(model: torch.nn.Module) -> torch.dtype:
    return model.get_input_embeddings().weight.dtype


def context_length(model: torch.nn.Module) -> int | None:
    config = model.config
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


class TargetRunner:
    """The target model plus its unpadded KV cache (EMS-SD): row b's committed tokens fill slots
    [0, lengths[b]) with no holes, so slot == position and rows advance independently. (The vanilla padded
    batch mode, kept for comparison, is `specdec.padded_runner.PaddedTargetRunner`.)"""

    padded = False  # one shared write pointer and holes (PaddedTargetRunner)

    def __init__(self, model: torch.nn.Module, batch_size: int, capacity: int,
                 packed_inputs: bool | None = None, compile: bool = False, reproducible: bool = False) -> None:
        """`packed_inputs`: verify only the real tokens of each row, packed (None = when the model supports it).
        `compile`: static shapes (a fixed cache capacity read whole, verification widths padded to a power of
        two) so the verification forward runs under `torch.compile` (`specdec.compiled`); inputs are padded.
        `reproducible`: the output must be the same in every process (`GenerationContext.reproducible`), so no
        kernel is chosen by timing it here (`specdec.cpu_linear.packed_view`'s `timed`)."""
        self.model = model
        # Prefill and verification run the runtime's view of the model: its attention function (SDPA over
        # the stored KV heads, ragged layouts; `specdec.attention`) and oneDNN linear layers where that
        # applies (fp32 on a CPU; `specdec.cpu_linear`). Scratch forwards run it too, through a plan view when
        # their `LayerPlan` bypasses sub-blocks or reduces the head (`specdec.layer_plan`).
        viewed = attention_view(model)
        self.forward_model = packed_view(viewed, timed=not reproducible) or viewed
        self.device = model_device(model)
        self.dtype = model_dtype(model)
        self.num_layers = model.config.num_hidden_layers
        self.static = compile
        self.cache = RaggedKVCache(self.num_layers, capacity, static=compile)
        # Bookkeeping is host data (numpy), read every step without touching the device: the engine knows
        # each row's committed count from the step's one read-back.
        self.lengths = np.zeros(batch_size, dtype=np.int64)  # committed tokens per row (= next position)
        self.write_start = np.zeros(batch_size, dtype=np.int64)  # first free slot per row
        self.attention = layer_attention(model.config)  # one mask per layer type the config declares
        self.holes_added = 0  # holes the padded mode added (none here)
        self._accepts_logits_to_keep = "logits_to_keep" in inspect.signature(model.forward).parameters
        self._cache_keyword = cache_keyword(model) or "past_key_values"  # refused before here when None
        self.embed = model.get_input_embeddings()
        check_packed_inputs(model, self.padded, packed_inputs)
        if compile and packed_inputs:
            raise ValueError("packed_inputs=True cannot run with compile=True: static shapes pad every input")
        self.ragged_attention = not self.padded and not compile and supports_packed_inputs(model)
        self.packed_inputs = self.ragged_attention if packed_inputs is None else bool(packed_inputs)
        self.verify_model = compiled_view(viewed) if compile else self.forward_model
        # What each layer plan runs as (its view, its lean forward or None), per plan object (plans compare
        # by identity), and how many scratch forwards ran the lean forward.
        self._plans: dict[LayerPlan, tuple[torch.nn.Module, FastDraftForward | None]] = {}
        self.lean_forwards = 0

    # -- masks -------------------------------------------------------------------------------
    def _mask(self, start: np.ndarray, positions: torch.Tensor,
              visible: torch.Tensor | None) -> torch.Tensor | dict[str, torch.Tensor]:
        """Additive masks [B, 1, T, S]: each row's committed prefix, any scratch slots written this
        step before `start`, and `visible` [B, T, T] among the new tokens (None = causal), narrowed per
        layer type (a query at position p sees the window or chunk that ends at p). One mask when every
        layer attends alike, else {layer type: mask}. Position ids of the new tokens are `positions` [B, T]
        (on the device); `start` is host data."""
        batch, steps = positions.shape
        device = self.device
        start_d = torch.as_tensor(start, device=device)
        attend_len = self.cache.plan.static_capacity or int(start.max()) + steps
        slot = torch.arange(attend_len, device=device)
        local = slot[None, :] - start_d[:, None]  # [B, S]: index among new tokens, <0 = before them
        in_prefix = self._prefix(local < 0, slot, attend_len)
        in_new = (local >= 0) & (local < steps)
        if visible is None:
            new_ok = (local[:, None, :] <= torch.arange(steps, device=device)[None, :, None]) & in_new[:, None, :]
        else:
            gathered = visible.to(device).gather(2, local.clamp(0, steps - 1)[:, None, :].expand(batch, steps, attend_len))
            new_ok = gathered & in_new[:, None, :]
        allowed = in_prefix[:, None, :] | new_ok
        if self.attention.all_full:
            return self._additive(allowed)
        query_pos = positions
        prefix_pos = self._prefix_positions(slot, batch, attend_len)
        key_pos = torch.where(local < 0, prefix_pos, query_pos.gather(1, local.clamp(0, steps - 1)))
        masks = {kind.name: self._additive(kind.restrict(allowed, query_pos, key_pos))
                 for kind in self.attention.kinds}
        return masks if self.attention.mapping else next(iter(masks.values()))

    def _prefix(self, before_new: torch.Tensor, slot: torch.Tensor, attend_len: int) -> torch.Tensor:
        """[B, S] slots a new token may see besides its tree: every slot before the new ones (no holes)."""
        return before_new

    def _prefix_positions(self, slot: torch.Tensor, batch: int, attend_len: int) -> torch.Tensor:
        """[B, S] position of the token in each slot before the new ones: its slot."""
        return slot[None, :].expand(batch, attend_len)

    def _additive(self, allowed: torch.Tensor) -> torch.Tensor:
        mask = torch.zeros(allowed.shape, dtype=self.dtype, device=self.device)
        mask.masked_fill_(~allowed, torch.finfo(self.dtype).min)
        return mask[:, None]

    # -- forwards ----------------------------------------------------------------------------
    def _run(
        self,
        start: np.ndarray,
        positions: torch.Tensor,
        visible: torch.Tensor | None,
        input_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        last_logits_only: bool = False,
        plain_causal: bool = False,
        valid: np.ndarray | None = None,
        scratch: bool = False,
        verify: bool = False,
        plan: LayerPlan | None = None,
    ) -> torch.Tensor:
        """`plain_causal`: every row starts at slot 0 and is causal, so let the model build its own
        causal mask (SDPA then takes its is_causal fast path instead of a dense additive mask).
        `valid` [B, T] (host): which inputs are real; with packed inputs only those are computed, and the
        logits of the others come back as zeros. `scratch`: a drafter's forward, run as `plan` says (None:
        the whole model). `start` is host data; `positions` and the inputs are on the device."""
        batch, steps = positions.shape
        device = self.device
        model = self._planned(plan)[0] if scratch else self.verify_model if verify else self.forward_model
        kwargs = {}
        if last_logits_only and self._accepts_logits_to_keep:
            kwargs["logits_to_keep"] = 1
        mask = None if plain_causal else self._mask(start, positions, visible)
        layout = None if scratch else self._layout(start, valid, batch, steps, mask)
        if layout is None:
            self.cache.set_plan(start, steps, device=device)
            return model(
                input_ids=None if input_ids is None else input_ids.to(device),
                inputs_embeds=inputs_embeds, attention_mask=mask, position_ids=positions,
                use_cache=True, **{self._cache_keyword: self.cache}, **kwargs,
            ).logits
        position_ids = positions
        if layout.flat is None:
            self.cache.set_plan(start, steps, device=device)
        else:
            flat = layout.flat_host
            self.cache.set_plan(start, steps, packed=(flat // steps, start[flat // steps] + flat % steps),
                                device=device)
            position_ids = positions.reshape(-1)[layout.flat][None]
            if input_ids is not None:
                input_ids = input_ids.to(device).reshape(-1)[layout.flat][None]
            if inputs_embeds is not None:
                inputs_embeds = inputs_embeds.reshape(batch * steps, -1)[layout.flat][None]
        try:
            logits = model(
                input_ids=None if input_ids is None else input_ids.to(device), inputs_embeds=inputs_embeds,
                attention_mask=mask, position_ids=position_ids, use_cache=True, specdec_layout=layout,
                **{self._cache_keyword: self.cache}, **kwargs,
            ).logits
        finally:
            self.cache.set_plan(start, steps, device=device)
        if layout.flat is None or last_logits_only:  # packed + last only: the last packed token's logits
            return logits
        unpacked = logits.new_zeros(batch * steps, logits.shape[-1])
        unpacked[layout.flat] = logits[0]
        return unpacked.view(batch, steps, -1)

    def _layout(self, start: np.ndarray, valid: np.ndarray | None, batch: int, steps: int,
                mask: torch.Tensor | dict[str, torch.Tensor] | None) -> _Layout | None:
        """Packing and per-row attention for this forward, or None for transformers' plain path
        (batch 1, the padded mode, a prefill of equal-length prompts, or nothing to save). Planned on the
        host from `valid` (host data); its indices go to the device once."""
        if not self.ragged_attention or batch == 1 or mask is None:
            return None
        flat = None
        if valid is not None and self.packed_inputs and not valid.all():
            flat = np.flatnonzero(valid)
        if flat is None:
            kv_lens = start + steps
        else:  # a row reads up to its last real input; the padding after it is never written
            last = np.where(valid, np.arange(steps)[None, :], -1).max(axis=1)
            kv_lens = start + last + 1
        waste = batch * (int(start.max()) + steps) - int(kv_lens.sum())
        rows = None
        # Per-row attention is a CPU measure (one SDPA call per row); on a GPU one dense call is cheaper.
        if self.device.type == "cpu" and waste > ROW_ATTENTION_MIN_WASTE * batch:
            rows, first = [], 0
            for row in range(batch):
                kv_len = int(kv_lens[row])
                if flat is None:
                    rows.append((slice(None), None, kv_len))
                else:
                    inputs = np.flatnonzero(valid[row])
                    rows.append((slice(first, first + len(inputs)), torch.as_tensor(inputs, device=self.device),
                                 kv_len))
                    first += len(inputs)
        if flat is None and rows is None:
            return None
        return _Layout(batch, steps, None if flat is None else torch.as_tensor(flat, device=self.device), rows,
                       flat_host=flat)

    @torch.no_grad()
    def prefill(self, input_ids: torch.Tensor, lengths: Sequence[int] | np.ndarray | torch.Tensor) -> None:
        """Write right-padded prompts [B, P] into the cache; row b keeps lengths[b] tokens (host data)."""
        batch, steps = input_ids.shape
        lengths = _host(lengths)
        if steps:
            start = np.zeros(batch, dtype=np.int64)
            positions = torch.arange(steps, device=self.device)[None, :].expand(batch, steps)
            if self.packed_inputs and batch > 1 and int(lengths.min()) > 0 and int(lengths.min()) < steps:
                # Unpadded prefill: only each row's own prompt tokens are computed (packed), and each
                # row attends over its own slots; prompts of 40 and 384 tokens no longer cost 2 x 384.
                valid = np.arange(steps)[None, :] < lengths[:, None]
                self._run(start, positions, None, input_ids=input_ids, last_logits_only=True, valid=valid)
            else:
                # Right padding needs no mask here: a real token never looks right, and padded slots lie
                # beyond each row's length, which every later mask excludes.
                self._run(start, positions, None, input_ids=input_ids, last_logits_only=True,
                          plain_causal=self.attention.all_full and not self.static)
        self.lengths = lengths.copy()
        self._prefilled(steps)

    def _prefilled(self, steps: int) -> None:
        """After a prefill of `steps` padded slots: every row writes next after its own prompt."""
        self.write_start = self.lengths.copy()

    @torch.no_grad()
    def verify_forward(
        self,
        input_ids: torch.Tensor,
        depths: torch.Tensor,
        visible: torch.Tensor | None,
        extra_embeds: torch.Tensor | None = None,
        valid: np.ndarray | None = None,
        chain: bool = False,
    ) -> torch.Tensor:
        """Run [root, nodes..., extras...] at positions lengths + depth with the tree mask; returns
        logits [B, T, V]. `visible` None: every row's inputs form one causal chain (depths 0..T-1). Extra
        embeddings (if any) replace the last E inputs. `valid` [B, T] (host) marks
        the real inputs (the rest pad rows to the widest): with packed inputs the padding is not
        computed and its logits are zeros. `chain` (host knowledge, e.g. a plain step or a chain draft):
        every row's inputs form one causal chain, so at batch 1 the model's own causal mask is exact."""
        depths = depths.to(self.device)
        if self.static and extra_embeds is None:
            return self._static_verify(input_ids, depths, visible)
        positions = torch.as_tensor(self.lengths, device=self.device)[:, None] + depths
        plain = chain and self._plain_path(depths.shape[0])
        if extra_embeds is None:
            return self._run(self.write_start, positions, visible, input_ids=input_ids, plain_causal=plain,
                             valid=valid)
        token_embeds = self.embed(input_ids.to(self.device))
        embeds = torch.cat([token_embeds, extra_embeds.to(self.device, token_embeds.dtype)], dim=1)
        return self._run(self.write_start, positions, visible, inputs_embeds=embeds, plain_causal=plain,
                         valid=valid)

    def _static_verify(self, input_ids: torch.Tensor, depths: torch.Tensor, visible: torch.Tensor | None
                       ) -> torch.Tensor:
        """Verification at a width padded to a power of two (`static_width`), so a compiled forward meets a few
        shapes only: the padding inputs see only themselves and nothing real sees them; their keys land past
        the row's real inputs, where the next step overwrites them."""
        batch, width = input_ids.shape
        device = self.device
        padded = static_width(width)
        input_ids = input_ids.to(device)
        if visible is None:  # a causal chain
            visible = torch.ones(width, width, dtype=torch.bool, device=device).tril().expand(batch, width, width)
        if padded > width:
            extra = padded - width
            input_ids = torch.cat([input_ids, input_ids.new_zeros(batch, extra)], dim=1)
            depths = torch.cat([depths, depths.new_zeros(batch, extra)], dim=1)
            grown = torch.eye(padded, dtype=torch.bool, device=device).expand(batch, padded, padded).clone()
            grown[:, :width, :width] = visible.to(device)
            visible = grown
        positions = torch.as_tensor(self.lengths, device=device)[:, None] + depths
        logits = self._run(self.write_start, positions, visible, input_ids=input_ids, verify=True)
        return logits[:, :width]

    def _plain_path(self, batch: int) -> bool:
        """One row of full-attention layers whose new tokens form a chain: the model's own causal mask over our
        cache (query t sees slots <= length + t) is then exactly the tree mask, and SDPA skips the dense mask.
        Plain decoding (one new token) is the common case."""
        return batch == 1 and self.attention.all_full

    @torch.no_grad()
    def scratch_forward(self, input_ids: torch.Tensor, offset: int | np.ndarray = 0, plan: LayerPlan | None = None,
                        keep: np.ndarray | None = None, rows: np.ndarray | None = None) -> torch.Tensor:
        """For drafters: run a causal chain of tokens [B, T] placed `offset` slots (host: one for all rows, or
        [B]) after each row's committed length, writing only there, so the committed cache is left exactly as it
        was. `plan`: the sub-blocks bypassed and the tokens the head scores (None: the whole model).
        Returns logits [B, T, V] (V: the plan's head tokens), or [B, V] at input index keep[b] per row (host).
        `rows` (host indices): only these rows' logits are needed; the lean forward then runs only them and
        the others' logits come back as zeros."""
        steps = input_ids.shape[1]
        offset = _host(offset)
        start, positions = self.scratch_slots(steps, offset)
        keep_d = None if keep is None else torch.as_tensor(keep, device=self.device)
        lean = self._planned(plan)[1]
        if lean is not None and lean.ready(self.cache, int(start.max()) + steps):
            self.lean_forwards += 1
            top = int((self.lengths + offset).max()) + steps - 1
            if rows is None or len(rows) == len(start):
                return lean(self.cache, input_ids, start, positions, keep_d, max_position=top)
            rows_d = torch.as_tensor(rows, device=self.device)
            part = lean(self.cache, input_ids.to(self.device)[rows_d], start[rows], positions[rows_d],
                        None if keep_d is None else keep_d[rows_d], rows=rows_d, max_position=top)
            return part.new_zeros(len(start), *part.shape[1:]).index_copy_(0, rows_d.to(part.device), part)
        # Only the last input's logits wanted (a drafter feeding committed tokens, a draft model's first
        # prefill of a row's prompt): the head runs on that input alone, not on all of them.
        last_only = keep is not None and bool((np.asarray(keep) == steps - 1).all())
        logits = self._run(start, positions, None, input_ids=input_ids, scratch=True, plan=plan,
                           last_logits_only=last_only)
        if keep_d is None:
            return logits
        if last_only:
            return logits[:, -1]
        return logits[torch.arange(len(start), device=logits.device), keep_d.to(logits.device)]

    def _planned(self, plan: LayerPlan | None) -> tuple[torch.nn.Module, FastDraftForward | None]:
        """The module a scratch forward under `plan` runs, and its lean forward (None: transformers' forward)."""
        if plan is None:
            return self.forward_model, None
        prepared = self._plans.get(plan)
        if prepared is None:
            view = (plan_view(self.model, plan, base=self.forward_model) if plan.skips or plan.head_tokens is not None
                    else self.forward_model)
            lean = None
            if plan.lean and not self.padded:  # the padded mode's holes are excluded only by the runner's masks
                lean = fast_forward_for(self.model, plan.skip_attention, plan.skip_mlp, plan.head_tokens,
                                        plan.weights)
            prepared = self._plans[plan] = (view, lean)
        return prepared

    def scratch_slots(self, steps: int, offset: int | np.ndarray = 0) -> tuple[np.ndarray, torch.Tensor]:
        """Where `scratch_forward` puts a chain of `steps` tokens `offset` slots past each row's committed
        length: (first slot written per row [B], host; position ids [B, steps] on the device)."""
        offset = _host(offset)
        start = self.write_start + offset
        positions = torch.as_tensor((self.lengths + offset)[:, None] + np.arange(steps)[None, :], device=self.device)
        return start, positions

    # -- bookkeeping -------------------------------------------------------------------------
    def commit(self, keep_src: torch.Tensor | None, keep_count: Sequence[int] | np.ndarray) -> None:
        """Keep, per row, the root and the accepted nodes whose input indices are keep_src [B, A] (device;
        A may be 0), compacted right after the root; lengths grow by 1 + keep_count (host). `keep_src` None:
        the kept nodes already sit right after the root (a chain's accepted prefix), nothing is copied."""
        keep_count = _host(keep_count)
        accepted = int(keep_count.max()) if len(keep_count) else 0
        if keep_src is not None and accepted and keep_src.shape[1]:
            # On the device for every row: slots that need no move are copied onto themselves.
            keep_src = keep_src[:, :accepted].to(self.device)
            columns = torch.arange(accepted, device=self.device)[None, :]
            dst = 1 + columns  # input index the accepted node should occupy
            counts = torch.as_tensor(keep_count, device=self.device)
            base = torch.as_tensor(self.write_start, device=self.device)[:, None]
            src = torch.where(columns < counts[:, None], keep_src, dst) + base
            rows = torch.arange(len(keep_count), device=self.device)
            self.cache.move(rows, src, dst.expand(len(keep_count), -1) + base)
        self.lengths = self.lengths + 1 + keep_count
        self._advanced(keep_count)

    def _advanced(self, keep_count: np.ndarray) -> None:
        """After a commit: every row writes next right after its committed tokens."""
        self.write_start = self.lengths.copy()

    def set_lengths(self, lengths: Sequence[int] | np.ndarray | torch.Tensor) -> None:
        """Declare each row's committed length (host data): roll back (drop slots beyond it) or forward over
        slots a scratch forward already filled with committed tokens. Unpadded mode only, where
        slot == position (a drafter's own cache, e.g. a draft model's)."""
        self.lengths = _host(lengths).copy()
        self.write_start = self.lengths.copy()

    def select_rows(self, indices: Sequence[int]) -> None:
        """Keep rows `indices` (host), in that order."""
        indices = [int(i) for i in indices]
        self.cache.select_rows(indices)
        self.lengths = self.lengths[indices]
        self.write_start = self.write_start[indices]

    def replace_rows(self, positions: list[int], other: TargetRunner) -> None:
        """Continuous batching: rows prefilled on `other` (same model, unpadded) take the places of rows
        `positions` that finished, in place, so the rows that stay are not copied; `other` is released."""
        self._check_joining(other)
        self.cache.replace_rows(list(positions), other.cache)
        self.lengths[positions] = other.lengths
        self.write_start[positions] = other.write_start

    def _check_joining(self, other: TargetRunner) -> None:
        if self.padded or other.padded:
            raise ValueError("rows can join a running batch only in batch_mode='unpadded'")
        if other.model is not self.model:
            raise ValueError("rows can join only a runner of the same model")

    def append_rows(self, other: TargetRunner) -> None:
        """Continuous batching: rows prefilled on `other` (same model, unpadded) join after this runner's
        rows, keeping their lengths; `other` is released. The padded mode's shared write pointer would
        have to jump for every joining row, so it is not supported."""
        self._check_joining(other)
        self.cache.append_rows(other.cache, len(self.lengths), len(other.lengths))
        self.lengths = np.concatenate([self.lengths, other.lengths])
        self.write_start = np.concatenate([self.write_start, other.write_start])

    def padding_slots(self) -> int:
        """Cache slots below the write position that hold no committed token (holes), summed over rows."""
        return int((self.write_start - self.lengths).sum())

    def memory_bytes(self) -> int:
        """Bytes the KV cache holds now."""
        return self.cache.memory_bytes()

    def release(self) -> None:
        self.cache.release()


def static_width(width: int) -> int:
    """The verification width a static-shape runner pads `width` inputs to: the next power of two."""
    return 1 << max(width - 1, 0).bit_length()


def _host(values: Sequence[int] | np.ndarray | torch.Tensor | int) -> np.ndarray:
    """Host int64 data from a list, array or (host) tensor; a scalar stays 0-d (broadcasts)."""
    if isinstance(values, torch.Tensor):
        values = values.tolist()
    return np.asarray(values, dtype=np.int64)
