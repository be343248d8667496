"""The data that crosses the two plug-in points: a `Draft` (drafter -> engine -> verifier) and a
`Verdict` (verifier -> engine -> drafter).

Everything is batch-first and padded: row b has `num_nodes[b]` real nodes, the rest of its row is
padding that verifiers must ignore. A chain is the tree whose parents are -1, 0, 1, ... .
Node i's parent is an earlier node (parents[b, i] < i) or -1, the last committed token (the root).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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

    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]

    @property
    def width(self) -> int:
        """Padded node count N."""
        return self.tokens.shape[1]

    def node_mask(self) -> torch.Tensor:
        """[B, N] bool: which entries are real nodes."""
        return torch.arange(self.width, device=self.tokens.device)[None, :] < self.num_nodes[:, None]

    @classmethod
    def empty(cls, batch_size: int, device: torch.device | str = "cpu") -> Draft:
        zeros = torch.zeros(batch_size, 0, dtype=torch.long, device=device)
        return cls(zeros, zeros.clone(), torch.zeros(batch_size, dtype=torch.long, device=device))

    @classmethod
    def chain(
        cls,
        tokens: torch.Tensor,
        lengths: torch.Tensor | None = None,
        q: torch.Tensor | None = None,
        scores: torch.Tensor | None = None,
    ) -> Draft:
        """A chain per row from padded tokens [B, K]; `lengths` [B] defaults to K everywhere."""
        batch, width = tokens.shape
        device = tokens.device
        parents = (torch.arange(width, device=device) - 1).expand(batch, width).clone()
        if lengths is None:
            lengths = torch.full((batch,), width, dtype=torch.long, device=device)
        return cls(tokens.long(), parents, lengths.long().to(device), q, scores=scores)

    @classmethod
    def from_rows(
        cls,
        rows: Sequence[tuple[Sequence[int], Sequence[int]]],
        device: torch.device | str = "cpu",
    ) -> Draft:
        """Build from per-row (tokens, parents) lists; convenient for drafters written in Python."""
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
        tokens_out = torch.tensor(padded_tokens, dtype=torch.long).reshape(shape)
        parents_out = torch.tensor(padded_parents, dtype=torch.long).reshape(shape)
        return cls(tokens_out.to(device), parents_out.to(device), torch.tensor(counts, dtype=torch.long).to(device))


@dataclass
class Verdict:
    """Which nodes each row keeps, in path order, plus the bonus token sampled after the path."""

    accepted: torch.Tensor  # [B, A] long node indices along the accepted path, -1 padded
    num_accepted: torch.Tensor  # [B] long
    bonus: torch.Tensor  # [B] long: token sampled from the target at the end of the path

    def accepted_tokens(self, draft: Draft) -> torch.Tensor:
        """[B, A] tokens of the accepted path (garbage where padded)."""
        return draft.tokens.gather(1, self.accepted.clamp(min=0)) if draft.width else self.accepted


def node_depths(parents: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Depth of every node (children of the root have depth 1); invalid entries get 0.

    Iterates once per tree level (vectorised over rows and nodes), never over single nodes.
    """
    batch, width = parents.shape
    depth = torch.zeros(batch, width, dtype=torch.long, device=parents.device)
    if width == 0:
        return depth
    safe_parents = torch.where(valid, parents, torch.full_like(parents, -1))
    has_parent = safe_parents >= 0
    gather_index = safe_parents.clamp(min=0)
    depth = valid.long()
    for _ in range(width):
        updated = torch.where(has_parent, depth.gather(1, gather_index) + 1, depth) * valid.long()
        if torch.equal(updated, depth):
            break
        depth = updated
    return depth


def path_to(parents: torch.Tensor, node: torch.Tensor, length: torch.Tensor, width: int) -> torch.Tensor:
    """Node indices from the root's child down to `node` [B] whose depth is `length` [B].

    Returns [B, width] padded with -1; rows with length 0 are all -1.
    """
    batch = parents.shape[0]
    device = parents.device
    path = torch.full((batch, max(width, 0)), -1, dtype=torch.long, device=device)
    if width == 0:
        return path
    current = node.clone()
    for step in range(width):
        position = length - 1 - step
        live = (position >= 0) & (current >= 0)
        if not bool(live.any()):
            break
        rows = live.nonzero(as_tuple=True)[0]
        path[rows, position[rows]] = current[rows]
        current = torch.where(live, parents.gather(1, current.clamp(min=0).unsqueeze(1)).squeeze(1), current)
    return path
