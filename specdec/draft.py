"""The data that crosses the two plug-in points: a `Draft` (drafter -> engine -> verifier) and a
`Verdict` (verifier -> engine -> drafter).

Everything is batch-first and padded: row b has `num_nodes[b]` real nodes, the rest of its row is
padding that verifiers must ignore. A chain is the tree whose parents are -1, 0, 1, ... .
Node i's parent is an earlier node (parents[b, i] < i) or -1, the last committed token (the root).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class ExtraSlots:
    """Inputs a drafter adds to the verification forward that are not verified (PPD's prompt tokens).

    `embeds[b, e]` rides along at tree position depth(parent)+1 and sees its ancestors only; nothing
    verified ever sees it, and its KV is never kept. `parents` index the combined node list:
    -1 = root, 0..N-1 = draft nodes, N+e = extra slot e (so extra slots can form chains).
    Their logits come back to the drafter in `Drafter.observe`.
    """

    embeds: torch.Tensor  # [B, E, hidden], the target's dtype
    parents: torch.Tensor  # [B, E] long
    num_slots: torch.Tensor  # [B] long
    host: ExtraHost | None = None  # the same index data on the host, when the drafter knows it


@dataclass
class ExtraHost:
    """The host copy of an `ExtraSlots`' index data (Python lists), like `DraftHost` for nodes: the engine
    prunes and cuts extra slots, and a drafter reads them back in `observe`, without a device read."""

    num_slots: list[int]  # per row
    parents: list[list[int]]  # per row, its num_slots[b] parents (the combined numbering of `ExtraSlots`)


@dataclass
class DraftHost:
    """What the drafter knows on the host about its draft's small index data (Python lists), so the engine
    and the controller never read it back from the device (on a GPU each read is a synchronisation).
    `Draft.chain` and `Draft.from_rows` fill it; a draft without it is read back once per step."""

    sizes: list[int]  # num_nodes per row
    chain: bool  # every row's nodes form a chain (parents -1, 0, 1, ...)
    parents: list[list[int]] | None = None  # per row, its sizes[b] parents (None: a chain's)
    scores: list[list[float]] | None = None  # per row, its sizes[b] scores (when the draft has scores)

    def parents_of(self, row: int) -> list[int]:
        return list(range(-1, self.sizes[row] - 1)) if self.parents is None else self.parents[row]

    def level_sizes(self) -> list[list[int]]:
        """Per row, its node count at each depth (index d - 1 for depth d; children of the root have depth 1),
        known without reading the device."""
        if self.parents is None:
            return [[1] * size for size in self.sizes]
        levels = []
        for row in self.parents:
            depths: list[int] = []
            counts: list[int] = []
            for parent in row:
                depths.append(1 if parent < 0 else depths[parent] + 1)
                counts.extend([0] * (depths[-1] - len(counts)))
                counts[depths[-1] - 1] += 1
            levels.append(counts)
        return levels

    def row_depths(self) -> list[int]:
        """Each row's deepest node (children of the root have depth 1), known without reading the device."""
        if self.parents is None:
            return list(self.sizes)
        return [len(counts) for counts in self.level_sizes()]

    def depth(self) -> int:
        """The deepest node over the rows: how many rounds a per-level loop over the tree needs."""
        return max(self.row_depths(), default=0)

    def narrowed(self, counts: list[int]) -> DraftHost:
        """The first counts[b] nodes of each row (a chain's or a breadth-first tree's prefix)."""
        return DraftHost(list(counts), self.chain,
                         None if self.parents is None else [p[:n] for p, n in zip(self.parents, counts)],
                         None if self.scores is None else [s[:n] for s, n in zip(self.scores, counts)])


@dataclass
class Draft:
    """Per row a token tree: tokens, parents, and optionally q (the distribution each was drawn from)."""

    tokens: torch.Tensor  # [B, N] long
    parents: torch.Tensor  # [B, N] long, -1 = child of the root
    num_nodes: torch.Tensor  # [B] long
    q: torch.Tensor | None = None  # [B, N, V] float: processed distribution node i was sampled from
    extra: ExtraSlots | None = None
    # [B, N] float, optional: how likely the drafter thinks node i is accepted (higher = better; e.g. a
    # path probability). The goodput controller keeps the best-scored nodes of a tree when it cuts a
    # deterministic draft and calibrates scores online into acceptance probabilities; unscored drafts are
    # cut by node order (chains by depth, trees breadth-first in the order given).
    scores: torch.Tensor | None = None
    host: DraftHost | None = None  # the same index data on the host, when the drafter knows it

    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]

    @property
    def width(self) -> int:
        """Padded node count N."""
        return self.tokens.shape[1]

    def sizes(self) -> list[int]:
        """num_nodes on the host: the drafter's own copy, else read back (a device read)."""
        return list(self.host.sizes) if self.host is not None else self.num_nodes.tolist()

    def to(self, device: torch.device | str) -> Draft:
        """The draft's index tensors, q and scores on `device` (drafters may build drafts on the CPU; a forward
        and a verdict on the model's device need them there); the prompt slots and the host view as they are."""
        return Draft(self.tokens.to(device), self.parents.to(device), self.num_nodes.to(device),
                     None if self.q is None else self.q.to(device), self.extra,
                     None if self.scores is None else self.scores.to(device), self.host)

    def host_view(self) -> DraftHost:
        """The drafter's host view, else one read back from the device (the engine's validation attaches one
        to every draft a verifier sees; a verifier called directly may get a draft without)."""
        if self.host is not None:
            return self.host
        sizes = self.num_nodes.tolist()
        width = self.width
        parents = [row[: max(0, min(n, width))] for row, n in zip(self.parents.tolist(), sizes)] if width else [
            [] for _ in sizes]
        chain = all(row == list(range(-1, len(row) - 1)) for row in parents)
        scores = None
        if self.scores is not None and width and isinstance(self.scores, torch.Tensor):
            scores = [row[: max(0, min(n, width))] for row, n in zip(self.scores.float().tolist(), sizes)]
        return DraftHost(sizes, chain, None if chain else parents, scores)

    def node_mask(self) -> torch.Tensor:
        """[B, N] bool: which entries are real nodes."""
        return torch.arange(self.width, device=self.tokens.device)[None, :] < self.num_nodes[:, None]

    @classmethod
    def empty(cls, batch_size: int, device: torch.device | str = "cpu") -> Draft:
        zeros = torch.zeros(batch_size, 0, dtype=torch.long, device=device)
        return cls(zeros, zeros.clone(), torch.zeros(batch_size, dtype=torch.long, device=device),
                   host=DraftHost([0] * batch_size, True))

    @classmethod
    def chain(
        cls,
        tokens: torch.Tensor,
        lengths: torch.Tensor | Sequence[int] | None = None,
        q: torch.Tensor | None = None,
        scores: torch.Tensor | None = None,
        host_scores: Sequence[Sequence[float]] | None = None,
    ) -> Draft:
        """A chain per row from padded tokens [B, K]; `lengths` [B] defaults to K everywhere. Lengths given
        as a list (host data) spare the engine reading them back from the device, and `host_scores` (the same
        scores per row, lengths[b] of them, on the host) spare the controller reading the scores."""
        batch, width = tokens.shape
        device = tokens.device
        parents = (torch.arange(width, device=device) - 1).expand(batch, width).clone()
        sizes = None
        if lengths is None:
            sizes = [width] * batch
        elif not isinstance(lengths, torch.Tensor):
            sizes = [int(n) for n in lengths]
        counts = torch.tensor(sizes, dtype=torch.long, device=device) if sizes is not None else lengths.long().to(device)
        host = None
        if sizes is not None:  # scores without `host_scores` stay on the device
            host = DraftHost(sizes, True, scores=None if host_scores is None or scores is None else
                             [[float(value) for value in row[:size]] for row, size in zip(host_scores, sizes)])
        return cls(tokens.long(), parents, counts, q, scores=scores, host=host)

    @classmethod
    def from_rows(
        cls,
        rows: Sequence[tuple[Sequence[int], Sequence[int]]],
        device: torch.device | str = "cpu",
        scores: Sequence[Sequence[float]] | None = None,
    ) -> Draft:
        """Build from per-row (tokens, parents) lists (and optional per-row scores); convenient for drafters
        written in Python. The lists stay on the host too (`Draft.host`)."""
        width = max((len(tokens) for tokens, _ in rows), default=0)
        padded_tokens, padded_parents, counts = [], [], []
        for b, (tokens, parents) in enumerate(rows):
            if len(tokens) != len(parents):
                raise ValueError(f"row {b}: {len(tokens)} tokens but {len(parents)} parents")
            pad = width - len(tokens)
            padded_tokens.append([int(t) for t in tokens] + [0] * pad)
            padded_parents.append([int(p) for p in parents] + [-1] * pad)
            counts.append(len(tokens))
        # One tensor per field from Python lists: drafters written in Python call this every step.
        shape = (len(rows), width)
        tokens_out = torch.tensor(padded_tokens, dtype=torch.long, device=device).reshape(shape)
        parents_out = torch.tensor(padded_parents, dtype=torch.long, device=device).reshape(shape)
        parent_lists = [[int(p) for p in parents] for _, parents in rows]
        chain = all(p == list(range(-1, len(p) - 1)) for p in parent_lists)
        score_lists = None
        score_tensor = None
        if scores is not None:
            score_lists = [[float(x) for x in row[: counts[b]]] for b, row in enumerate(scores)]
            if width:
                score_tensor = torch.tensor([row + [0.0] * (width - len(row)) for row in score_lists],
                                            device=device).reshape(shape)
        host = DraftHost(counts, chain, None if chain else parent_lists, score_lists if score_tensor is not None else None)
        return cls(tokens_out, parents_out, torch.tensor(counts, dtype=torch.long, device=device), scores=score_tensor,
                   host=host)


@dataclass
class Verdict:
    """Which nodes each row keeps, in path order, plus the bonus token sampled after the path."""

    accepted: torch.Tensor  # [B, A] long node indices along the accepted path, -1 padded
    num_accepted: torch.Tensor  # [B] long
    bonus: torch.Tensor  # [B] long: token sampled from the target at the end of the path

    def accepted_tokens(self, draft: Draft) -> torch.Tensor:
        """[B, A] tokens of the accepted path (garbage where padded)."""
        return draft.tokens.gather(1, self.accepted.clamp(min=0)) if draft.width else self.accepted


def node_depths(parents: torch.Tensor, valid: torch.Tensor, rounds: int | None = None) -> torch.Tensor:
    """Depth of every node (children of the root have depth 1); invalid entries get 0.

    Iterates once per tree level (vectorised over rows and nodes), never over single nodes: `rounds` times when
    given (the tree's depth, e.g. from `DraftHost.depth`; nothing is read back), else until nothing changes (a
    read of the device per level)."""
    batch, width = parents.shape
    depth = torch.zeros(batch, width, dtype=torch.long, device=parents.device)
    if width == 0:
        return depth
    safe_parents = torch.where(valid, parents, torch.full_like(parents, -1))
    has_parent = safe_parents >= 0
    gather_index = safe_parents.clamp(min=0)
    depth = valid.long()
    for _ in range(width if rounds is None else rounds):
        updated = torch.where(has_parent, depth.gather(1, gather_index) + 1, depth) * valid.long()
        if rounds is None and torch.equal(updated, depth):
            break
        depth = updated
    return depth


def path_to(parents: torch.Tensor, node: torch.Tensor, length: torch.Tensor, width: int,
            rounds: int | None = None) -> torch.Tensor:
    """Node indices from the root's child down to `node` [B] whose depth is `length` [B].

    Returns [B, width] padded with -1; rows with length 0 are all -1. `rounds`: the deepest `length` can be (e.g.
    the tree's depth): then exactly that many steps, with nothing read back; else until every row is done (a read
    of the device per step).
    """
    batch = parents.shape[0]
    device = parents.device
    path = torch.full((batch, max(width, 0)), -1, dtype=torch.long, device=device)
    if width == 0:
        return path
    current = node.clone()
    rows = torch.arange(batch, device=device)
    for step in range(width if rounds is None else min(rounds, width)):
        position = length - 1 - step
        live = (position >= 0) & (current >= 0)
        if rounds is None and not bool(live.any()):
            break
        # Rows that are done write their own last column's value back onto itself.
        column = torch.where(live, position, width - 1)
        path[rows, column] = torch.where(live, current, path[rows, column])
        current = torch.where(live, parents.gather(1, current.clamp(min=0).unsqueeze(1)).squeeze(1), current)
    return path


def chain_layout(batch: int, steps: int, device: torch.device | str) -> tuple[torch.Tensor, None]:
    """`tree_layout` of rows that are each one chain of `steps` inputs: depths 0..steps-1, and None for the
    visibility (causal), which the target's masks build without a [B, T, T] tensor."""
    return torch.arange(steps, device=device).expand(batch, steps), None


#: Trees the host lays out (`host_tree_layout`): visibility as one bit mask per input fits an unsigned 64-bit integer,
#: and the Python loop stays shorter than the device version's few dozen tensor ops.
HOST_LAYOUT_MAX_STEPS = 63
HOST_LAYOUT_MAX_INPUTS = 512


def host_tree_layout(parents: Sequence[Sequence[int]], device: torch.device | str
                     ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """`tree_layout` from host parents (input indices per row, parent < t; the root is its own parent), built on
    the host in one pass over the inputs and moved once; None when the tree is too large for that (then lay it
    out on the device). For the engine, whose drafts carry their index data on the host."""
    batch, steps = len(parents), len(parents[0]) if parents else 0
    if steps > HOST_LAYOUT_MAX_STEPS or batch * steps > HOST_LAYOUT_MAX_INPUTS:
        return None
    depths, masks = [], []
    for row in parents:
        depth, mask = [0], [1]
        for t in range(1, steps):
            parent = row[t]
            depth.append(depth[parent] + 1)
            mask.append(mask[parent] | (1 << t))
        depths.append(depth)
        masks.append(mask)
    bits = np.asarray(masks, dtype=np.uint64)[:, :, None] >> np.arange(steps, dtype=np.uint64)
    visible = (bits & np.uint64(1)).astype(bool)
    return torch.tensor(depths, dtype=torch.long, device=device), torch.from_numpy(visible).to(device)


def tree_layout(parents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """From input-index parents [B, T] (parent < t; the root, t = 0, is its own parent) build
    depths [B, T] and visibility [B, T, T] (ancestor-or-self), on the parents' device.

    Pointer doubling: after round k each input knows its ancestors up to 2^k steps up, so ceil(log2 T)
    rounds cover any tree; a fixed count, so nothing is read back to test for convergence."""
    batch, steps = parents.shape
    device = parents.device
    if steps == 1:  # only the root: plain decoding
        return (torch.zeros(batch, 1, dtype=torch.long, device=device),
                torch.ones(batch, 1, 1, dtype=torch.bool, device=device))
    index = torch.arange(steps, device=device)
    visible = (index[:, None] == index[None, :]).expand(batch, steps, steps) | torch.nn.functional.one_hot(
        parents, steps).bool()
    depth = (index != 0).long().expand(batch, steps).clone()
    jump = parents
    for _ in range((steps - 1).bit_length()):
        visible = visible | visible.gather(1, jump[:, :, None].expand(batch, steps, steps))
        depth = depth + depth.gather(1, jump)
        jump = jump.gather(1, jump)
    return depth, visible
