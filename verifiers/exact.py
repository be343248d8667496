"""Exact-match verification: keep the longest path whose every node equals the target's own choice.

At temperature 0 the target's choice is its argmax, so output is token-identical to greedy
decoding. At temperature > 0 the target's choice is a sample from its processed distribution at
each node, which keeps the output distributed exactly as the target's (HF's "exact-match
sampling"), though it accepts less than rejection sampling. Nodes with equal token paths share one
sample of the target (see `ExactVerifier.verify`), which keeps trees with duplicate siblings lossless.
"""

from __future__ import annotations

import numpy as np
import torch

from specdec.draft import Draft, Verdict, node_depths, path_to
from specdec.plugins import Verifier
from specdec.rng import RandomSource
from specdec.sampling import SamplingParams, sample_or_argmax

from ._tree import canonical_nodes


def longest_accepted_path(
    draft: Draft, node_ok: torch.Tensor, tie_score: torch.Tensor | None = None, rounds: int | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Given per-node acceptance `node_ok` [B, N] (a node is acceptable given its parent), find
    the deepest node whose whole ancestor chain is acceptable. Among equally deep nodes the one
    with the highest `tie_score` [B, N] wins if given; otherwise (and among equal scores) the first.

    Returns (path [B, N] of node indices, -1 padded; path length [B]; deepest node [B], -1 = root).
    One iteration per tree level, vectorised over rows and nodes: `rounds` of them (the tree's depth; default: what
    the draft's host view says, nothing read back), else, without a host view, until nothing changes.
    """
    valid = draft.node_mask()
    ok = node_ok & valid
    parents = torch.where(valid, draft.parents, -1)  # padding entries may hold anything
    if rounds is None and draft.host is not None:
        rounds = draft.host.depth()
    chain_ok = ok.clone()
    for _ in range(draft.width if rounds is None else rounds):
        parent_ok = torch.where(parents >= 0, chain_ok.gather(1, parents.clamp(min=0)), True)
        updated = ok & parent_ok
        if rounds is None and torch.equal(updated, chain_ok):
            break
        chain_ok = updated
    depths = node_depths(parents, valid, rounds)
    scored = torch.where(chain_ok, depths, 0)
    length = scored.max(dim=1).values if draft.width else torch.zeros(draft.batch_size, dtype=torch.long)
    if draft.width and tie_score is not None:
        deepest_ones = chain_ok & (depths == length[:, None])
        deepest = torch.where(deepest_ones, tie_score.float(), float("-inf")).argmax(dim=1)
    elif draft.width:
        deepest = scored.argmax(dim=1)
    else:
        deepest = torch.full((draft.batch_size,), -1, dtype=torch.long)
    deepest = torch.where(length > 0, deepest, -1)
    return path_to(parents, deepest, length, draft.width, rounds), length, deepest


def _draft_draws(draft: Draft) -> np.ndarray | torch.Tensor:
    """[B, 1 + N] bool: the root and every real node, the positions a sampling verifier draws at, so that a row's
    random stream depends only on its own draft. From the drafter's host view when it has one (nothing read
    back), else the draft's node mask (read by the sampler)."""
    if draft.host is not None:
        return np.arange(1 + draft.width)[None, :] <= np.asarray(draft.host.sizes)[:, None]
    return torch.cat([torch.ones(draft.batch_size, 1, dtype=torch.bool, device=draft.tokens.device),
                      draft.node_mask()], dim=1)


def _is_chain(draft: Draft, valid: torch.Tensor | None) -> bool:
    """From the drafter's host view when it has one (no device read), else from the parents."""
    if draft.host is not None:
        return draft.host.chain
    valid = draft.node_mask() if valid is None else valid
    chain_parents = torch.arange(-1, draft.width - 1, device=draft.parents.device)
    return bool(((draft.parents == chain_parents) | ~valid).all())


class ExactVerifier(Verifier):
    name = "exact"
    description = "Exact match against the target's choice (argmax when greedy, a sample otherwise); lossless."
    lossless = True
    accepts_target_choice = True

    def verify(
        self, draft: Draft, logits: torch.Tensor, sampling: SamplingParams, generator: RandomSource
    ) -> Verdict:
        used = None  # sampling draws once at the root and at every real node (none for padding)
        if not sampling.greedy:
            used = _draft_draws(draft)
        # unchecked: the engine judges the bonus on the host, where a distribution without mass shows
        choice = sample_or_argmax(logits, sampling, generator, used, checked=False)  # [B, 1 + N]
        if draft.width == 0:
            empty = torch.zeros(draft.batch_size, 0, dtype=torch.long, device=choice.device)
            return Verdict(empty, torch.zeros(draft.batch_size, dtype=torch.long, device=choice.device),
                           choice[:, 0])
        width = draft.width
        full = draft.host is not None and all(size == width for size in draft.host.sizes)  # no padding nodes
        valid = None if full else draft.node_mask()
        if _is_chain(draft, valid):
            # A chain (the common case): node i is accepted iff it and every earlier node match.
            matched = draft.tokens == choice[:, :width]
            if valid is not None:
                matched = matched & valid
            length = matched.long().cumprod(dim=1).sum(dim=1)
            index = torch.arange(width, device=length.device)[None, :]
            path = torch.where(index < length[:, None], index, -1)
            return Verdict(path, length, choice.gather(1, length[:, None]).squeeze(1))
        # One choice per distinct context: nodes with equal token paths (duplicate siblings) share
        # their copy's sample, or picking the copy whose sample happens to match would bias the output.
        valid = draft.node_mask() if valid is None else valid
        parents = torch.where(valid, draft.parents, -1)  # padding entries may hold anything
        rounds = draft.host.depth() if draft.host is not None else None
        canon = canonical_nodes(draft.tokens, parents, valid, span=logits.shape[-1], rounds=rounds)
        choice = torch.cat([choice[:, :1], choice[:, 1:].gather(1, canon)], dim=1)
        choice_at_parent = choice.gather(1, parents + 1)
        path, length, deepest = longest_accepted_path(draft, draft.tokens == choice_at_parent, rounds=rounds)
        bonus = choice.gather(1, (deepest + 1).unsqueeze(1)).squeeze(1)
        return Verdict(path, length, bonus)
