"""Speculative sampling: Leviathan/Chen rejection sampling on chains, SpecInfer-style multi-draft
recursive rejection sampling on trees. The output is distributed exactly as sampling from the
target alone, at any temperature, top-k and top-p (proven empirically by tests/test_distribution.py).
"""

from __future__ import annotations

import numpy as np
import torch

from specdec.draft import Draft, Verdict, path_to
from specdec.plugins import Verifier
from specdec.rng import RandomSource, uniform
from specdec.sampling import SamplingParams, process_logits, sample

from ._tree import TreeShape, canonical_nodes, child_table


class RejectionVerifier(Verifier):
    """Lossless verification of chains and trees of stochastic or deterministic drafts.

    Walk down from the root keeping a "residual" target distribution P (initially the processed
    target distribution p at the current node). Try the current node's children in sibling order
    (ascending node index). Child x with draft distribution q is accepted with probability
    min(1, P(x) / q(x)); on acceptance descend into it with P = p at that child; on rejection
    P <- norm(max(0, P - q)) and try the next sibling. When every child is rejected (or the node is
    a leaf) the bonus token is sampled from P: the residual after rejections, or p itself at a leaf
    whose whole path was accepted.

    Contract for drafters (SpecInfer's multi-step speculative sampling needs it):

    * Stochastic drafts (`Draft.q` given): node i was drawn from `q[b, i]`, the distribution after
      the *same* `process_logits(..., sampling)` the target uses, and siblings were drawn
      independently of each other given their parent's path (the usual case: k children drawn
      i.i.d. from the parent's one q, so every sibling carries that same q). Children drawn
      *without replacement* violate this and bias the output.
    * Deterministic drafts (`Draft.q is None`: argmax, top-k branches, lookups): every node is a
      point mass, so x is accepted with probability P(x) and a rejection zeroes P(x) and
      renormalises. Duplicate siblings are harmless (the second copy has P(x) = 0).

    Siblings with the same token (and, recursively, equal token paths) are merged into one trie
    node whose children are the union of the copies' children: the copies share one target
    distribution, and the union of i.i.d. draws is again i.i.d., so this stays lossless and
    explores every drafted continuation. The reported path runs through the copies' real nodes.

    Numerics: residuals are clamped at 0 and renormalised. A residual can only sum to 0 when
    P == q (then every child is accepted with probability 1, so a rejection is a rounding
    artefact); in that case P is kept unchanged, which is the correct limit. At temperature 0 the
    processed p is one-hot, so exactly the argmax path is accepted and the bonus is the argmax:
    the output equals greedy decoding.

    Vectorised over rows; Python loops run only over tree depth and sibling rank, as many as the draft's host
    view says (`TreeShape`), so a step reads nothing back from the device. Each node's coin is drawn up front,
    one uniform per real node from the row's own stream: a node is tried at most once, so the coins are
    independent as the rule needs, and a row's stream depends only on its own draft's size.
    """

    name = "rejection"
    description = "Speculative (rejection) sampling on chains and trees; lossless at any temperature."
    lossless = True

    def verify(
        self, draft: Draft, logits: torch.Tensor, sampling: SamplingParams, generator: RandomSource
    ) -> Verdict:
        batch, width = draft.batch_size, draft.width
        device = logits.device
        p_all = process_logits(logits, sampling)  # [B, 1 + N, V], the target at root and every node
        rows = torch.arange(batch, device=device)
        residual = p_all[:, 0].clone()
        path = torch.full((batch, width), -1, dtype=torch.long, device=device)
        length = torch.zeros(batch, dtype=torch.long, device=device)
        if width:
            tokens = draft.tokens.to(device)
            q_all = None if draft.q is None else draft.q.to(device)
            valid = draft.node_mask().to(device)
            parents = torch.where(valid, draft.parents.to(device), -1)  # padding entries may hold anything
            shape = TreeShape.of(draft)  # levels and children per level, on the host: the loops read nothing back
            canon = canonical_nodes(tokens, parents, valid, span=p_all.shape[-1], rounds=shape.depth)
            canon_parents = torch.where(parents >= 0, canon.gather(1, parents.clamp(min=0)), -1)
            children = child_table(canon_parents, valid, shape.ranks)
            # One uniform per real node, drawn up front (a node is tried at most once): a row draws as many as
            # it has nodes, whatever the verdict, so nothing about the verdict is read to know whom to draw for.
            drawn = np.arange(width)[None, :] < np.asarray(shape.sizes)[:, None]
            coins = uniform(generator, drawn, device=device)
            current = torch.full((batch,), -1, dtype=torch.long, device=device)  # trie node; -1 = the root
            last = torch.full((batch,), -1, dtype=torch.long, device=device)  # last accepted real node
            descending = torch.ones(batch, dtype=torch.bool, device=device)
            for level_children in shape.level_children:  # one tree level per iteration
                siblings = children[rows, current + 1]  # [B, R]
                accepted = torch.zeros(batch, dtype=torch.bool, device=device)
                for rank in range(level_children):
                    child = siblings[:, rank]
                    trying = descending & ~accepted & (child >= 0)
                    node = child.clamp(min=0)
                    token = tokens[rows, node]
                    q = None if q_all is None else q_all[rows, node].float()  # [B, V]
                    p_x = residual.gather(1, token[:, None]).squeeze(1)
                    q_x = torch.ones_like(p_x) if q is None else q.gather(1, token[:, None]).squeeze(1)
                    # u < P(x)/q(x), written without division; strict so P(x) = 0 is never accepted.
                    take = trying & (coins[rows, node] * q_x < p_x)
                    reject = trying & ~take
                    residual = torch.where(reject[:, None], self.residual_after_rejection(residual, token, q),
                                           residual)
                    residual = torch.where(take[:, None], p_all[rows, node + 1], residual)
                    last = torch.where(take, node, last)
                    current = torch.where(take, canon[rows, node], current)
                    accepted |= take
                length += accepted.long()
                descending &= accepted
            path = path_to(parents, last, length, width, shape.depth)
        # unchecked: the engine judges the bonus on the host, where a distribution without mass shows
        bonus = residual.argmax(dim=-1) if sampling.greedy else sample(residual, generator, checked=False)
        return Verdict(path, length, bonus)

    @staticmethod
    def residual_after_rejection(
        residual: torch.Tensor, token: torch.Tensor, q: torch.Tensor | None
    ) -> torch.Tensor:
        """norm(max(0, P - q)); for a point-mass draft (q None) that is P with P(token) zeroed.

        Rows whose residual has no mass left (P == q up to rounding) keep P.
        """
        if q is None:
            updated = residual.scatter(1, token[:, None], 0.0)
        else:
            updated = (residual - q).clamp(min=0.0)
        mass = updated.sum(dim=-1, keepdim=True)
        return torch.where(mass > 0, updated / mass.clamp(min=torch.finfo(updated.dtype).tiny), residual)
