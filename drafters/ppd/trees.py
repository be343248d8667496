"""Sparse candidate trees for PPD, built offline from measured per-rank accuracies (T ch. 5, P §4).

A tree has two kinds of nodes: candidates (top-k guesses, verified) and prompt tokens hung under
candidates (not verified; their logits are the next step's guesses). A candidate path is a tuple of
ranks: (0, 2) = depth 1 is prompt 1's top-1, depth 2 is prompt 2's top-3. The *state* is how many
prompt-token predictions the previous step left, i.e. the deepest candidate depth possible now.

Dynamic sparse tree (stage 1): for every state d, the best n_c(d) candidate paths of depth <= d by
product of per-rank accuracies (Medusa/Sequoia construction); every candidate starts with m prompt
tokens and the cheapest are removed greedily by expected loss p_end(c) * (f(T_i) - f(T_{i-1}))
until candidates + prompts fit the size n; the n_c per state are searched to maximise the
steady-state acceptance R = sum_d pi_d f(T_d) of the Markov chain over states (with sum pi = 1,
the textbook form of T Prop. 5.6.4). Tree size n excludes the root and the root's m prompts.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

RankPath = tuple[int, ...]


@dataclass(frozen=True)
class StateTree:
    """The tree used when `state` prompt predictions are available (candidates reach depth <= state)."""

    state: int
    paths: tuple[RankPath, ...]  # parents before children
    prompts: tuple[int, ...]  # prompt tokens hung under each candidate (1..m)
    root_prompts: int  # the root always carries all m prompts

    @property
    def size(self) -> int:
        """Candidates + their prompt tokens (the papers' tree length; excludes the root and its prompts)."""
        return len(self.paths) + sum(self.prompts)

    @property
    def num_inputs(self) -> int:
        """Slots in the verification forward for one EPT per prompt: root + candidates + all prompts."""
        return 1 + self.size + self.root_prompts

    def inputs_with(self, num_ept: int) -> int:
        """`num_inputs` with `num_ept` ensemble slots per prompt, as the drafter lays the tree out."""
        return 1 + len(self.paths) + (sum(self.prompts) + self.root_prompts) * num_ept

    def layout(self, num_ept: int = 1) -> dict[str, list[int]]:
        """Flat buffers for the drafter: candidate (depth, rank, parent) and prompt slots.

        Prompt slots come as `num_ept` parallel chains per anchor (root first, then candidates in
        order): slot (anchor, group j, prompt k) has parent slot (anchor, j, k-1), or the anchor for
        k = 1. That is exactly the ensemble attention pattern: group j sees only group j's earlier
        prompts, and all EPTs of prompt k sit at the same position (anchor + k).
        """
        index = {path: i for i, path in enumerate(self.paths)}
        cand_depth = [len(p) - 1 for p in self.paths]
        cand_rank = [p[-1] for p in self.paths]
        cand_parent = [index[p[:-1]] if len(p) > 1 else -1 for p in self.paths]
        anchor_node: list[int] = []  # -1 = root, else candidate index (only for k = 1 slots)
        parent_slot: list[int] = []  # previous slot in the chain, -1 when the parent is the anchor
        embed_row: list[int] = []  # row of the [m * n_ept, hidden] prompt table
        anchors = [(-1, self.root_prompts)] + list(enumerate(self.prompts))
        for node, count in anchors:
            for group in range(num_ept):
                for k in range(count):
                    anchor_node.append(node)
                    parent_slot.append(len(parent_slot) - 1 if k else -1)
                    embed_row.append(k * num_ept + group)
        return {"cand_depth": cand_depth, "cand_rank": cand_rank, "cand_parent": cand_parent,
                "anchor_node": anchor_node, "parent_slot": parent_slot, "embed_row": embed_row}


@dataclass(frozen=True)
class TreeSet:
    """One tree per state 0..m (state 0 = nothing predicted yet: no candidates)."""

    trees: dict[int, StateTree]
    expected_tau: float  # 1 + R: expected tokens per step (bonus included) under the accuracy model
    size: int
    kind: str  # "dynamic" or "static"

    @property
    def num_prompts(self) -> int:
        return max(self.trees)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "size": self.size, "expected_tau": self.expected_tau,
                "states": {str(d): {"paths": [list(p) for p in t.paths], "prompts": list(t.prompts)}
                           for d, t in self.trees.items()}}


def validate_accuracies(accuracies: list[list[float]], num_prompts: int) -> list[list[float]]:
    """a[j][k] = P(the truth at distance j+1 is exactly prompt j+1's rank-k guess); rows sum to <= 1."""
    if len(accuracies) < num_prompts:
        raise ValueError(f"accuracies cover {len(accuracies)} prompt tokens, need {num_prompts}")
    rows = [list(map(float, row)) for row in accuracies[:num_prompts]]
    for j, row in enumerate(rows):
        if not row or any(not (0.0 <= a <= 1.0) for a in row) or sum(row) > 1.0 + 1e-6:
            raise ValueError(f"accuracies row {j} must be probabilities in [0, 1] summing to <= 1, got {row}")
    return rows


def prior_accuracies(num_prompts: int, topk: int = 10, first: float = 0.3, depth_decay: float = 0.6,
                     rank_decay: float = 0.5) -> list[list[float]]:
    """A stand-in for unmeasured prompts: geometric in rank and distance. Only shapes the tree of an
    untrained checkpoint (correctness never depends on it); real checkpoints store measured values."""
    rows = []
    for j in range(num_prompts):
        top1 = first * depth_decay**j
        rows.append([top1 * rank_decay**k for k in range(topk)])
    return rows


def _best_first_order(acc: list[list[float]], depth: int, limit: int) -> list[tuple[RankPath, float]]:
    """Candidate paths of depth <= `depth` in decreasing product-of-accuracies order (ties: shorter,
    then lexicographic). Every prefix of the result is a tree, since a child never beats its parent."""
    topk = len(acc[0])
    heap: list[tuple[float, int, RankPath]] = [(-acc[0][k], 1, (k,)) for k in range(topk)]
    heapq.heapify(heap)
    order: list[tuple[RankPath, float]] = []
    while heap and len(order) < limit:
        negative, length, path = heapq.heappop(heap)
        order.append((path, -negative))
        if length < depth:
            row = acc[length]
            for k in range(len(row)):
                heapq.heappush(heap, (negative * row[k], length + 1, path + (k,)))
    return order


def _p_end(paths: list[RankPath], probs: list[float]) -> list[float]:
    """P(candidate is the deepest accepted node) = its path probability minus its children's."""
    index = {path: i for i, path in enumerate(paths)}
    p_end = list(probs)
    for i, path in enumerate(paths):
        if len(path) > 1:
            p_end[index[path[:-1]]] -= probs[i]
    return [max(0.0, p) for p in p_end]


def _assign_prompts(p_end: list[float], f: list[float], num_prompts: int, budget: int) -> list[int] | None:
    """Start every candidate at m prompts; remove the cheapest (p_end * (f_i - f_{i-1})) until
    candidates + prompts <= budget. None when even one prompt each does not fit."""
    count = len(p_end)
    if 2 * count > budget:
        return None
    prompts = [num_prompts] * count
    excess = count * (1 + num_prompts) - budget
    heap = [(p_end[c] * (f[num_prompts] - f[num_prompts - 1]), c) for c in range(count) if num_prompts > 1]
    heapq.heapify(heap)
    while excess > 0 and heap:
        _, c = heapq.heappop(heap)
        prompts[c] -= 1
        excess -= 1
        i = prompts[c]
        if i > 1:
            heapq.heappush(heap, (p_end[c] * (f[i] - f[i - 1]), c))
    return prompts


def stationary(transition: np.ndarray) -> np.ndarray:
    """Stationary distribution (sum 1) of a row-stochastic matrix, by solving pi (P - I) = 0."""
    size = transition.shape[0]
    system = np.vstack([(transition - np.eye(size)).T, np.ones(size)])
    rhs = np.zeros(size + 1)
    rhs[-1] = 1.0
    pi, *_ = np.linalg.lstsq(system, rhs, rcond=None)
    pi = np.clip(pi, 0.0, None)
    return pi / pi.sum()


def _evaluate(orders: dict[int, list[tuple[RankPath, float]]], counts: dict[int, int], num_prompts: int,
              size: int) -> tuple[float, dict[int, StateTree]] | None:
    """Steady-state R and the trees for given candidate counts per state (None if infeasible)."""
    f = [0.0] * (num_prompts + 1)
    for d in range(1, num_prompts + 1):
        f[d] = sum(p for _, p in orders[d][: counts[d]])
    trees: dict[int, StateTree] = {}
    transition = np.zeros((num_prompts, num_prompts))
    for d in range(1, num_prompts + 1):
        chosen = orders[d][: counts[d]]
        paths = [p for p, _ in chosen]
        probs = [p for _, p in chosen]
        p_end = _p_end(paths, probs)
        prompts = _assign_prompts(p_end, f, num_prompts, size)
        if prompts is None:
            return None
        for c, i in enumerate(prompts):
            transition[d - 1, i - 1] += p_end[c]
        transition[d - 1, num_prompts - 1] += max(0.0, 1.0 - sum(p_end))
        ordered = sorted(zip(paths, prompts), key=lambda item: (len(item[0]), item[0]))
        trees[d] = StateTree(d, tuple(p for p, _ in ordered), tuple(i for _, i in ordered), num_prompts)
    transition /= transition.sum(axis=1, keepdims=True)
    pi = stationary(transition)
    return float(sum(pi[d - 1] * f[d] for d in range(1, num_prompts + 1))), trees


def _candidates_range(d: int, size: int, topk: int, num_prompts: int) -> list[int]:
    high = size // 2
    if d == 1:
        high = min(high, topk)
    high = max(high, 1)
    low = max(1, min(high, size // (num_prompts + 1)) // 2)
    step = max(1, (high - low) // 40)
    values = list(range(low, high + 1, step))
    if values[-1] != high:
        values.append(high)
    return values


def build_dynamic_trees(accuracies: list[list[float]], num_prompts: int, size: int, sweeps: int = 3) -> TreeSet:
    """Per-state trees of `size` (candidates + prompts) maximising the steady-state acceptance.

    The candidate counts per state are found by coordinate ascent (the reference code grid-searches a
    hard-wired m = 3; this works for any m and reaches the same optimum on its grid in practice).
    """
    if size < 2:
        raise ValueError(f"tree size must be >= 2 (one candidate and its prompt), got {size}")
    acc = validate_accuracies(accuracies, num_prompts)
    topk = len(acc[0])
    orders = {d: _best_first_order(acc, d, size // 2) for d in range(1, num_prompts + 1)}
    ranges = {d: [c for c in _candidates_range(d, size, topk, num_prompts) if c <= len(orders[d])]
              for d in orders}
    counts = {d: ranges[d][len(ranges[d]) // 2] for d in orders}
    best = _evaluate(orders, counts, num_prompts, size)
    assert best is not None, "the middle of each range always fits"
    for _ in range(sweeps):
        improved = False
        for d in orders:
            for value in ranges[d]:
                trial = {**counts, d: value}
                result = _evaluate(orders, trial, num_prompts, size)
                if result is not None and result[0] > best[0] + 1e-12:
                    best, counts, improved = result, trial, True
        if not improved:
            break
    trees = dict(best[1])
    trees[0] = StateTree(0, (), (), num_prompts)
    return TreeSet(trees, 1.0 + best[0], size, "dynamic")


def build_static_tree(accuracies: list[list[float]], num_prompts: int, size: int) -> TreeSet:
    """The naive sparse tree (T §5.3): one candidate tree whose every node carries all m prompts.

    Every accepted node then leaves m predictions, so after the first step the state is always m.
    Lower states (only after the engine pruned prompts near the context end) use the same tree cut
    to the available depth.
    """
    acc = validate_accuracies(accuracies, num_prompts)
    count = max(1, size // (num_prompts + 1))
    order = _best_first_order(acc, num_prompts, count)
    trees = {0: StateTree(0, (), (), num_prompts)}
    for d in range(1, num_prompts + 1):
        paths = sorted((p for p, _ in order if len(p) <= d), key=lambda p: (len(p), p))
        trees[d] = StateTree(d, tuple(paths), tuple([num_prompts] * len(paths)), num_prompts)
    expected = 1.0 + sum(p for _, p in order)
    return TreeSet(trees, expected, trees[num_prompts].size, "static")


def expected_tau(accuracies: list[list[float]], trees: TreeSet) -> float:
    """Recompute 1 + R for given trees under an accuracy model (e.g. measured after building)."""
    m = trees.num_prompts
    acc = validate_accuracies(accuracies, m)
    f = [0.0] * (m + 1)
    transition = np.zeros((m, m))
    for d in range(1, m + 1):
        tree = trees.trees[d]
        probs = [math.prod(acc[j][r] for j, r in enumerate(p)) for p in tree.paths]
        f[d] = sum(probs)
        p_end = _p_end(list(tree.paths), probs)
        for c, i in enumerate(tree.prompts):
            transition[d - 1, i - 1] += p_end[c]
        transition[d - 1, m - 1] += max(0.0, 1.0 - sum(p_end))
    transition /= transition.sum(axis=1, keepdims=True)
    pi = stationary(transition)
    return 1.0 + float(sum(pi[d - 1] * f[d] for d in range(1, m + 1)))
