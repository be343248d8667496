"""A KV cache with one length per row: the unpadded cache of EMS-SD, used for batch 1 too.

Each layer keeps preallocated [B, H, capacity, D] buffers. A forward writes token t of row b at
slot `start[b] + t` and reads slots [0, attend_len); the engine's 4-D mask limits row b to its own
committed prefix plus the visible new tokens. Slot index equals position, so there are no holes:
rejected drafts are simply left beyond the row's length and overwritten by the next step.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers.cache_utils import Cache, CacheLayerMixin


class _WritePlan:
    """Where the current forward writes and how far it reads; shared by all layers of one cache.

    The plan is host data (numpy), known before the forward; what the layers index with is copied to the
    device once per forward (`slots`, `packed_rows`, `packed_slots`), not once per layer."""

    def __init__(self) -> None:
        self.start = np.zeros(0, dtype=np.int64)  # [B] first slot written per row (host)
        self.uniform_start: int | None = 0  # set when every row starts at the same slot
        self.attend_len = 0
        self.slots: torch.Tensor | None = None  # [B, T] slots written (device; ragged rows only)
        # Packed inputs (EMS-SD "unpad input"): token g of the packed [1, N] input goes to
        # (packed_rows[g], packed_slots[g]) (device); None for the usual [B, T] inputs.
        self.packed_rows: torch.Tensor | None = None
        self.packed_slots: torch.Tensor | None = None
        self.allocated = 0  # bytes held by all layers' buffers
        self.peak_bytes = 0
        # Most (rows x slots) one forward read: what a cache sized exactly for this run must hold,
        # independent of the preallocation policy (so padded holes show up as memory).
        self.peak_row_slots = 0
        # Static shapes (`TargetRunner(compile=True)`): every forward reads the whole fixed capacity and writes
        # through an index tensor, so a compiled forward sees the same shapes and no Python slot numbers.
        self.static_capacity: int | None = None

    def note_allocation(self, delta: int) -> None:
        self.allocated += delta
        self.peak_bytes = max(self.peak_bytes, self.allocated)


class RaggedLayer(CacheLayerMixin):
    is_compileable = False
    is_croppable = False
    is_sliding = False

    def __init__(self, plan: _WritePlan, capacity: int) -> None:
        super().__init__()
        self.plan = plan
        self.capacity = capacity

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        heads = key_states.shape[1]
        # A packed first forward (unpadded prefill) arrives as [1, H, N, D]: the plan knows the rows.
        batch = len(self.plan.start) if self.plan.packed_rows is not None else key_states.shape[0]
        self.dtype, self.device = key_states.dtype, key_states.device
        self.keys = key_states.new_zeros(batch, heads, self.capacity, key_states.shape[-1])
        self.values = value_states.new_zeros(batch, value_states.shape[1], self.capacity, value_states.shape[-1])
        self.is_initialized = True
        self.plan.note_allocation(self._bytes())

    def _bytes(self) -> int:
        """Bytes held, including rows that left the batch (select_rows keeps its buffers as views)."""
        return self.keys.untyped_storage().nbytes() + self.values.untyped_storage().nbytes()

    def _grow(self, needed: int) -> None:
        old_bytes = self._bytes()
        new_capacity = max(needed, self.capacity + self.capacity // 4)
        pad = new_capacity - self.keys.shape[2]
        self.keys = torch.nn.functional.pad(self.keys, (0, 0, 0, pad))
        self.values = torch.nn.functional.pad(self.values, (0, 0, 0, pad))
        self.capacity = new_capacity
        self.plan.note_allocation(self._bytes() - old_bytes)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        plan = self.plan
        steps = key_states.shape[2]
        if plan.static_capacity is not None:  # static shapes: index writes, the whole buffer read
            rows = torch.arange(key_states.shape[0], device=key_states.device)[:, None]
            self.keys[rows, :, plan.slots] = key_states.transpose(1, 2)
            self.values[rows, :, plan.slots] = value_states.transpose(1, 2)
            return self.keys, self.values
        if plan.attend_len > self.keys.shape[2]:
            self._grow(plan.attend_len)
        if plan.packed_rows is not None:  # key_states [1, H, N, D]: scatter each token to its row's slot
            rows, slots = plan.packed_rows, plan.packed_slots
            self.keys[rows, :, slots] = key_states[0].transpose(0, 1)
            self.values[rows, :, slots] = value_states[0].transpose(0, 1)
        elif plan.uniform_start is not None:
            start = plan.uniform_start
            self.keys[:, :, start : start + steps] = key_states
            self.values[:, :, start : start + steps] = value_states
        else:
            slots = plan.slots
            rows = torch.arange(slots.shape[0], device=self.device)[:, None]
            self.keys[rows, :, slots] = key_states.transpose(1, 2)
            self.values[rows, :, slots] = value_states.transpose(1, 2)
        return self.keys[:, :, : plan.attend_len], self.values[:, :, : plan.attend_len]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.plan.attend_len, 0

    def get_seq_length(self) -> int:
        return int(self.plan.start.max()) if len(self.plan.start) else 0

    def get_max_length(self) -> int:
        return -1

    def move(self, rows: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Copy slots src -> dst of the given rows ([M] rows, [M, A] slots; device tensors)."""
        if not self.is_initialized:
            return
        rows = rows[:, None]
        self.keys[rows, :, dst] = self.keys[rows, :, src].clone()
        self.values[rows, :, dst] = self.values[rows, :, src].clone()

    def select_rows(self, count: int, sources: list[int], places: list[int]) -> None:
        """Keep the first `count` rows after old rows `sources` moved to rows `places`, in place: the
        buffers become views of their first rows, so nothing is allocated and only moving rows are copied
        (a fresh [B, H, capacity, D] copy per departure cost ~7 ms at batch 16 on this CPU)."""
        if not self.is_initialized:
            return
        rows = [(self.keys[source], self.values[source]) for source in sources]
        if not set(sources).isdisjoint(places):  # a row moves onto another that moves: copy them out first
            rows = [(keys.clone(), values.clone()) for keys, values in rows]
        for (keys, values), place in zip(rows, places):  # copy_ per row: ~10x faster than an index_put
            self.keys[place].copy_(keys)
            self.values[place].copy_(values)
        self.keys, self.values = self.keys[:count], self.values[:count]

    def replace_rows(self, positions: list[int], other: RaggedLayer) -> None:
        """Write `other`'s rows over rows `positions` in place (continuous batching without copying the
        rows that stay). Slots past a row's new length keep stale values: every mask excludes them."""
        if not other.is_initialized:  # the joining rows' prompts were single tokens: nothing cached yet
            return
        if not self.is_initialized:
            raise RuntimeError("rows can take places only in a cache that already holds rows")
        if other.capacity > self.keys.shape[2]:
            self._grow(other.capacity)
        positions = torch.tensor(positions, dtype=torch.long, device=self.device)
        self.keys[positions, :, : other.keys.shape[2]] = other.keys
        self.values[positions, :, : other.values.shape[2]] = other.values

    def append_rows(self, other: RaggedLayer, own_rows: int, other_rows: int) -> None:
        """Put `other`'s rows after this layer's (continuous batching: rows prefilled elsewhere join).
        A side that never ran a forward (one-token prompts) contributes zero rows; slot == position
        holds on both sides, so no slot moves."""
        if not (self.is_initialized or other.is_initialized):
            return
        like = self if self.is_initialized else other
        capacity = max(self.capacity, other.capacity)
        parts = []
        for layer, rows in ((self, own_rows), (other, other_rows)):
            if layer.is_initialized:
                pad = capacity - layer.keys.shape[2]
                parts.append((torch.nn.functional.pad(layer.keys, (0, 0, 0, pad)),
                              torch.nn.functional.pad(layer.values, (0, 0, 0, pad))))
            else:
                shape_k = (rows, like.keys.shape[1], capacity, like.keys.shape[3])
                shape_v = (rows, like.values.shape[1], capacity, like.values.shape[3])
                parts.append((like.keys.new_zeros(shape_k), like.values.new_zeros(shape_v)))
        self.keys = torch.cat([keys for keys, _ in parts])
        self.values = torch.cat([values for _, values in parts])
        self.dtype, self.device = like.dtype, like.device
        self.capacity = capacity
        self.is_initialized = True


class RaggedKVCache(Cache):
    """A transformers `Cache` whose rows grow independently; see the module docstring."""

    def __init__(self, num_layers: int, capacity: int, static: bool = False) -> None:
        """`static`: a fixed capacity every forward reads whole (see `_WritePlan.static_capacity`)."""
        self.plan = _WritePlan()
        self.plan.static_capacity = capacity if static else None
        super().__init__(layers=[RaggedLayer(self.plan, capacity) for _ in range(num_layers)])

    def set_plan(self, start: np.ndarray, steps: int, packed: tuple[np.ndarray, np.ndarray] | None = None,
                 device: torch.device | str = "cpu") -> None:
        """Prepare the next forward: row b writes `steps` tokens from slot start[b], or, with `packed`
        = (rows [N], slots [N]), a packed [1, N] input writes token g at (rows[g], slots[g]). Host arrays;
        the indices the layers need are copied to `device` here, once."""
        plan = self.plan
        start = np.asarray(start, dtype=np.int64)
        first = int(start[0]) if len(start) else 0
        plan.start = start
        plan.uniform_start = first if bool((start == first).all()) else None
        plan.attend_len = (int(start.max()) if len(start) else 0) + steps
        plan.peak_row_slots = max(plan.peak_row_slots, len(start) * plan.attend_len)
        plan.slots = None
        if plan.static_capacity is not None:
            if plan.attend_len > plan.static_capacity:
                raise ValueError(f"a forward reaching slot {plan.attend_len} does not fit the static cache of "
                                 f"{plan.static_capacity} slots")
            plan.attend_len = plan.static_capacity
            plan.uniform_start = None
        if plan.uniform_start is None and packed is None:
            plan.slots = torch.as_tensor(start[:, None] + np.arange(steps)[None, :], device=device)
        plan.packed_rows = plan.packed_slots = None
        if packed is not None:
            plan.packed_rows = torch.as_tensor(packed[0], device=device)
            plan.packed_slots = torch.as_tensor(packed[1], device=device)

    @property
    def initialized(self) -> bool:
        """The buffers exist (a first forward fixed their batch size)."""
        return all(layer.is_initialized for layer in self.layers)

    def move(self, rows: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> None:
        for layer in self.layers:
            layer.move(rows, src, dst)

    @property
    def peak_bytes(self) -> int:
        """Most bytes the buffers held at once (rows leaving the batch shrink them later)."""
        return self.plan.peak_bytes

    @property
    def peak_used_bytes(self) -> int:
        """Bytes of the largest [rows, slots] region one forward read, over all layers: the memory a
        cache allocated exactly (no slack) would need. Holes of the padded mode count; slack does not."""
        per_slot = sum((layer.keys.shape[1] * layer.keys.shape[3] + layer.values.shape[1] * layer.values.shape[3])
                       * layer.keys.element_size() for layer in self.layers if layer.is_initialized)
        return self.plan.peak_row_slots * per_slot

    def select_rows(self, indices: list[int]) -> None:
        """Keep rows `indices` (new row j holds old row indices[j]), copying only the rows whose place
        changes; an order that fills leaving rows' places from the end (`engine.compaction_order`) moves
        as few rows as leave."""
        order = [int(i) for i in indices]
        moves = [(source, place) for place, source in enumerate(order) if source != place]
        sources, places = [source for source, _ in moves], [place for _, place in moves]
        self.plan.allocated = 0
        for layer in self.layers:
            layer.select_rows(len(order), sources, places)
            if layer.is_initialized:
                self.plan.allocated += layer._bytes()
        if len(self.plan.start):
            self.plan.start = self.plan.start[order]

    def replace_rows(self, positions: list[int], other: RaggedKVCache) -> None:
        """Rows `positions` [M] take `other`'s M rows (same model), in place; `other` is left empty."""
        for layer, joining in zip(self.layers, other.layers):
            layer.replace_rows(positions, joining)
        self.plan.peak_row_slots = max(self.plan.peak_row_slots, other.plan.peak_row_slots)
        other.release()

    def append_rows(self, other: RaggedKVCache, own_rows: int, other_rows: int) -> None:
        """Append `other`'s rows (same model) after this cache's `own_rows` rows; `other` is left empty."""
        for layer, added in zip(self.layers, other.layers):
            layer.append_rows(added, own_rows, other_rows)
        self.plan.allocated = sum(layer._bytes() for layer in self.layers if layer.is_initialized)
        self.plan.peak_bytes = max(self.plan.peak_bytes, self.plan.allocated)
        self.plan.peak_row_slots = max(self.plan.peak_row_slots, other.plan.peak_row_slots)
        self.plan.start = np.zeros(own_rows + other_rows, dtype=np.int64)  # set again by the next forward
        other.release()

    def release(self) -> None:
        for layer in self.layers:
            layer.keys = layer.values = None
            layer.is_initialized = False

    def memory_bytes(self) -> int:
        return sum(layer._bytes() for layer in self.layers if layer.is_initialized)
