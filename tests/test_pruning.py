"""Pruning and cutting drafts (`prune_draft`, `keep_nodes`) against a direct per-row reference, on random
trees with extra slots (PPD's prompt slots hang from the root, from nodes and from earlier slots)."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec.draft import Draft, ExtraSlots
from specdec.validation import keep_nodes, prune_draft


@st.composite
def drafts(draw: st.DrawFn) -> tuple[Draft, list[list[bool]], list[int], list[int], list[bool]]:
    batch = draw(st.integers(1, 3))
    counts = [draw(st.integers(0, 6)) for _ in range(batch)]
    slot_counts = [draw(st.integers(0, 5)) for _ in range(batch)]
    width, slots = max(counts), max(slot_counts)
    tokens = torch.zeros(batch, width, dtype=torch.long)
    parents = torch.full((batch, width), -1, dtype=torch.long)
    slot_parents = torch.full((batch, slots), -1, dtype=torch.long)
    keep = []
    for b in range(batch):
        for i in range(counts[b]):
            tokens[b, i] = draw(st.integers(0, 50))
            parents[b, i] = draw(st.integers(-1, i - 1))
        for e in range(slot_counts[b]):
            choices = [-1] + list(range(counts[b])) + [width + j for j in range(e)]
            slot_parents[b, e] = draw(st.sampled_from(choices))
        keep.append([draw(st.booleans()) for _ in range(width)])
    embeds = torch.randn(batch, slots, 3)
    draft = Draft(tokens, parents, torch.tensor(counts), extra=ExtraSlots(embeds, slot_parents, torch.tensor(slot_counts)))
    node_limits = [draw(st.integers(-1, 7)) for _ in range(batch)]
    extra_limits = [draw(st.integers(0, 12)) for _ in range(batch)]
    roots = [draw(st.booleans()) for _ in range(batch)]
    return draft, keep, node_limits, extra_limits, roots


def _reference(draft: Draft, b: int, keep: list[bool] | None, node_limit: int | None, extra_limit: int | None,
               root: bool) -> tuple[list[int], list[int], list[int], list[int]]:
    """(tokens, parents, kept slot indices, slot parents) of row b, written out directly."""
    n, width = int(draft.num_nodes[b]), draft.width
    parents = draft.parents[b].tolist()

    def depth(i: int) -> int:
        return 1 if parents[i] < 0 else 1 + depth(parents[i])

    def node_alive(i: int) -> bool:
        return ((keep is None or keep[i]) and (node_limit is None or depth(i) <= node_limit)
                and (parents[i] < 0 or node_alive(parents[i])))

    nodes = [i for i in range(n) if node_alive(i)]
    renumber = {old: new for new, old in enumerate(nodes)}
    slot_parents = draft.extra.parents[b].tolist()

    def slot_depth(e: int) -> int:
        p = slot_parents[e]
        return 1 if p < 0 else 1 + (depth(p) if p < width else slot_depth(p - width))

    def slot_alive(e: int) -> bool:
        p = slot_parents[e]
        parent = root if p < 0 else node_alive(p) if p < width else slot_alive(p - width)
        return parent and (extra_limit is None or slot_depth(e) <= extra_limit)

    slots = [e for e in range(int(draft.extra.num_slots[b])) if slot_alive(e)]
    def new_parent(p: int) -> int:
        return -1 if p < 0 else renumber[p] if p < width else ("slot", slots.index(p - width))

    # A slot's parent that is a slot is numbered after the nodes: ("slot", j) becomes new width + j.
    return ([int(draft.tokens[b, i]) for i in nodes], [renumber.get(parents[i], -1) for i in nodes], slots,
            [new_parent(slot_parents[e]) for e in slots])


def _check(draft: Draft, out: Draft, expected: list) -> None:
    for b, (tokens, parents, slots, slot_parents) in enumerate(expected):
        n = int(out.num_nodes[b])
        assert out.tokens[b, :n].tolist() == tokens and out.parents[b, :n].tolist() == parents
        m = int(out.extra.num_slots[b])
        assert m == len(slots)
        assert torch.equal(out.extra.embeds[b, :m], draft.extra.embeds[b, slots])
        numbered = [p if not isinstance(p, tuple) else out.width + p[1] for p in slot_parents]
        assert out.extra.parents[b, :m].tolist() == numbered
    assert out.width == max((len(e[0]) for e in expected), default=0)  # narrowed to the widest row
    assert out.extra.embeds.shape[1] == max((len(e[2]) for e in expected), default=0)


@settings(max_examples=150, deadline=None)
@given(drafts())
def test_keep_nodes_matches_the_reference(case) -> None:
    draft, keep, _, _, roots = case
    # keep_nodes takes a connected subtree: close the random mask under parents first.
    for b in range(draft.batch_size):
        for i in range(int(draft.num_nodes[b])):
            p = int(draft.parents[b, i])
            keep[b][i] = keep[b][i] and (p < 0 or keep[b][p])
    out = keep_nodes(draft, torch.tensor(keep, dtype=torch.bool).reshape(draft.batch_size, draft.width), None,
                     torch.tensor(roots))
    _check(draft, out, [_reference(draft, b, keep[b], None, None, roots[b]) for b in range(draft.batch_size)])


@settings(max_examples=150, deadline=None)
@given(drafts())
def test_prune_draft_matches_the_reference(case) -> None:
    draft, _, node_limits, extra_limits, _ = case
    out = prune_draft(draft, torch.tensor(node_limits), torch.tensor(extra_limits))
    _check(draft, out, [_reference(draft, b, None, node_limits[b], extra_limits[b], True)
                        for b in range(draft.batch_size)])


def test_a_draft_with_nothing_to_prune_comes_back_as_it_is() -> None:
    tokens, parents = torch.tensor([[4, 5, 6]]), torch.tensor([[-1, 0, 0]])
    draft = Draft(tokens, parents, torch.tensor([3]),
                  extra=ExtraSlots(torch.randn(1, 2, 3), torch.tensor([[-1, 1]]), torch.tensor([2])))
    assert prune_draft(draft, torch.tensor([5]), torch.tensor([9])) is draft
