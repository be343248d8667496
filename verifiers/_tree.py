"""Tree bookkeeping shared by the verifiers: which children each node has, in sibling order, and
sums of per-node values along root-to-node paths. Everything is vectorised over rows and nodes;
loops run once per tree level at most."""

from __future__ import annotations

import torch


def child_table(parents: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Children of every node in sibling order (ascending node index).

    Returns [B, N + 1, R] long: entry [b, s, r] is the r-th child of slot s (slot 0 = the root,
    slot 1 + i = node i), or -1. R is the largest number of children any node has (0 if no nodes).
    Built with one sort, so it costs O(B N log N) regardless of the tree's shape.
    """
    batch, width = parents.shape
    device = parents.device
    if width == 0 or not bool(valid.any()):
        return torch.full((batch, width + 1, 0), -1, dtype=torch.long, device=device)
    slot = torch.where(valid, parents + 1, width + 1)  # invalid nodes go to a dummy slot N + 1
    index = torch.arange(width, device=device).expand(batch, width)
    order = torch.argsort(slot * (width + 1) + index, dim=1)  # keys are unique: no ties
    sorted_slot = slot.gather(1, order)
    group_start = torch.ones_like(sorted_slot, dtype=torch.bool)
    group_start[:, 1:] = sorted_slot[:, 1:] != sorted_slot[:, :-1]
    start_position = torch.where(group_start, index, 0).cummax(dim=1).values
    rank = torch.empty_like(index).scatter_(1, order, index - start_position)
    ranks = int(rank[valid].max()) + 1
    table = torch.full((batch, width + 2, ranks), -1, dtype=torch.long, device=device)
    rows = torch.arange(batch, device=device)[:, None].expand(batch, width)
    table[rows[valid], slot[valid], rank[valid]] = index[valid]
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


def sum_along_paths(values: torch.Tensor, parents: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """[B, N]: for every node, the sum of `values` over the node and all its ancestors.

    Pointer jumping: after k rounds each node has summed 2^k ancestors, so it takes log2(depth)
    rounds of vectorised gathers. Invalid nodes get 0.
    """
    total = torch.where(valid, values, torch.zeros_like(values))
    if parents.shape[1] == 0:
        return total
    jump = torch.where(valid, parents, -1)
    while bool((jump >= 0).any()):
        has = jump >= 0
        safe = jump.clamp(min=0)
        total = total + torch.where(has, total.gather(1, safe), torch.zeros_like(total))
        jump = torch.where(has, jump.gather(1, safe), -1)
    return total
