"""Tree bookkeeping shared by the verifiers: which children each node has, in sibling order, and
sums of per-node values along root-to-node paths. Everything is vectorised over rows and nodes;
loops run once per tree level at most."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specdec.draft import Draft


@dataclass(frozen=True)
class TreeShape:
    """What a verifier's per-level loops need to know about a draft, on the host: how many levels, and at each
    level at most how many children a node has (the row's nodes one level deeper bound them, also after equal
    token paths are merged). Read from the drafter's host view, so the loops run with nothing read back."""

    sizes: list[int]  # real nodes per row
    level_children: list[int]  # per level d (the root's children at d = 0), a bound on any node's children

    @property
    def depth(self) -> int:
        return len(self.level_children)

    @property
    def ranks(self) -> int:
        return max(self.level_children, default=0)

    @classmethod
    def of(cls, draft: Draft) -> TreeShape:
        """From the draft's host view (nothing read back; without one, read once: `Draft.host_view`)."""
        host = draft.host_view()
        rows = host.level_sizes()
        levels = max((len(counts) for counts in rows), default=0)
        return cls(list(host.sizes), [max(counts[d] if d < len(counts) else 0 for counts in rows)
                                      for d in range(levels)])


def child_table(parents: torch.Tensor, valid: torch.Tensor, ranks: int | None = None) -> torch.Tensor:
    """Children of every node in sibling order (ascending node index).

    Returns [B, N + 1, R] long: entry [b, s, r] is the r-th child of slot s (slot 0 = the root,
    slot 1 + i = node i), or -1. R is `ranks` when given (a bound on any node's children, `TreeShape.ranks`:
    nothing is read back), else the largest number of children any node has (read back; 0 if no nodes).
    Built with one sort, so it costs O(B N log N) regardless of the tree's shape.
    """
    batch, width = parents.shape
    device = parents.device
    if width == 0 or ranks == 0 or (ranks is None and not bool(valid.any())):
        return torch.full((batch, width + 1, 0), -1, dtype=torch.long, device=device)
    slot = torch.where(valid, parents + 1, width + 1)  # invalid nodes go to a dummy slot N + 1
    index = torch.arange(width, device=device).expand(batch, width)
    order = torch.argsort(slot * (width + 1) + index, dim=1)  # keys are unique: no ties
    sorted_slot = slot.gather(1, order)
    group_start = torch.ones_like(sorted_slot, dtype=torch.bool)
    group_start[:, 1:] = sorted_slot[:, 1:] != sorted_slot[:, :-1]
    start_position = torch.where(group_start, index, 0).cummax(dim=1).values
    rank = torch.empty_like(index).scatter_(1, order, index - start_position)
    if ranks is None:
        ranks = int(rank[valid].max()) + 1
    table = torch.full((batch, width + 2, ranks), -1, dtype=torch.long, device=device)
    rows = torch.arange(batch, device=device)[:, None].expand(batch, width)
    # Every entry written, the invalid ones as -1 into the dummy slot's first rank (dropped below): no boolean
    # indexing, whose output size the device would have to report. A valid rank past `ranks` raises.
    table[rows, slot, torch.where(valid, rank, 0)] = torch.where(valid, index, -1)
    return table[:, : width + 1]


def canonical_nodes(tokens: torch.Tensor, parents: torch.Tensor, valid: torch.Tensor, span: int | None = None,
                    rounds: int | None = None) -> torch.Tensor:
    """[B, N]: for every node the smallest node index with the same token path from the root.

    Nodes with equal token paths have equal target distributions, so a verifier may treat them as
    one node of a token trie whose children are the union of the copies' children. Invalid nodes
    map to themselves. One sort per tree level. `span`: more than any valid token (the vocabulary's size) and
    `rounds`: the tree's depth; given both, nothing is read back (else the largest token is read, and each level
    reads whether anything changed).
    """
    batch, width = tokens.shape
    index = torch.arange(width, device=tokens.device).expand(batch, width)
    canon = index.clone()
    if width == 0:
        return canon
    if span is None:
        span = int(tokens[valid].max()) + 1 if bool(valid.any()) else 1
    for _ in range(width if rounds is None else rounds):
        canon_parent = torch.where(parents >= 0, canon.gather(1, parents.clamp(min=0)), -1)
        key = torch.where(valid, (canon_parent + 1) * span + tokens, -1 - index)  # invalid: unique keys
        order = torch.argsort(key * width + index, dim=1)  # by key, then by node index
        sorted_key = key.gather(1, order)
        group_start = torch.ones_like(sorted_key, dtype=torch.bool)
        group_start[:, 1:] = sorted_key[:, 1:] != sorted_key[:, :-1]
        first = order.gather(1, torch.where(group_start, index, 0).cummax(dim=1).values)
        updated = torch.empty_like(canon).scatter_(1, order, first)
        if rounds is None and torch.equal(updated, canon):
            break
        canon = updated
    return canon


def sum_along_paths(values: torch.Tensor, parents: torch.Tensor, valid: torch.Tensor,
                    depth: int | None = None) -> torch.Tensor:
    """[B, N]: for every node, the sum of `values` over the node and all its ancestors.

    Pointer jumping: after k rounds each node has summed 2^k ancestors, so it takes log2(depth)
    rounds of vectorised gathers: for a tree `depth` levels deep exactly that many (nothing read back), else
    until no node has an ancestor left (a read per round). Invalid nodes get 0.
    """
    total = torch.where(valid, values, torch.zeros_like(values))
    if parents.shape[1] == 0:
        return total
    jump = torch.where(valid, parents, -1)
    rounds = None if depth is None else max(depth - 1, 0).bit_length()  # 2^rounds >= depth: a whole path
    while (bool((jump >= 0).any()) if rounds is None else rounds > 0):
        has = jump >= 0
        safe = jump.clamp(min=0)
        total = total + torch.where(has, total.gather(1, safe), torch.zeros_like(total))
        jump = torch.where(has, jump.gather(1, safe), -1)
        if rounds is not None:
            rounds -= 1
    return total
