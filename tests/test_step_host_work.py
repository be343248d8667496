"""The engine's host work per step: layouts from the drafts' host views, value checks judged on the host from the
step's one read-back, and PPD's drafts with host views. Each shortcut is checked against the general path it
stands in for, and each check still catches what it is for."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import VOCAB, tiny_model
from hypothesis import given, settings
from hypothesis import strategies as st
from specdec.benchmarks.host_reads import counting_host_reads, reads_per_step
from specdec.verifiers.exact import ExactVerifier
from test_pruning import drafts

import specdec
from specdec.draft import (
    HOST_LAYOUT_MAX_STEPS,
    Draft,
    DraftHost,
    ExtraHost,
    ExtraSlots,
    Verdict,
    chain_layout,
    host_tree_layout,
    node_depths,
    tree_layout,
)
from specdec.errors import DrafterError, VerifierError
from specdec.plugins import Drafter, Verifier
from specdec.rng import RowGenerators
from specdec.sampling import SamplingParams
from specdec.target import TargetRunner
from specdec.validation import prune_draft, validate_verdict


@st.composite
def input_trees(draw: st.DrawFn) -> list[list[int]]:
    """Per row, parents in input indices: the root (0) is its own parent, every other input's parent is earlier."""
    batch = draw(st.integers(1, 4))
    steps = draw(st.integers(1, HOST_LAYOUT_MAX_STEPS))
    return [[0] + [draw(st.integers(0, t - 1)) for t in range(1, steps)] for _ in range(batch)]


@settings(max_examples=120, deadline=None)
@given(input_trees())
def test_the_host_layout_is_the_device_layout(parents) -> None:
    layout = host_tree_layout(parents, "cpu")
    depths, visible = tree_layout(torch.tensor(parents))
    assert layout is not None
    assert torch.equal(layout[0], depths) and torch.equal(layout[1], visible)


def test_trees_too_large_for_the_host_are_left_to_the_device() -> None:
    assert host_tree_layout([list(range(HOST_LAYOUT_MAX_STEPS + 1))], "cpu") is None
    assert host_tree_layout([[0, 0]] * 300, "cpu") is None


@pytest.mark.parametrize("arch", ["llama", "gemma2"])
@pytest.mark.parametrize("batch", [1, 3])
def test_a_causal_chain_verifies_as_its_tree(arch, batch) -> None:
    """`visible=None` (every row one chain: plain steps, full chains) gives the logits of the same chain laid out
    as a tree; gemma2 alternates sliding-window and full layers (its window shorter than the text)."""
    from families import FAMILIES, WINDOW

    model = FAMILIES["gemma2"].build(seed=0, attn_implementation="sdpa") if arch == "gemma2" else tiny_model(arch)
    lengths = [20, 14, 24][:batch]
    assert WINDOW < max(lengths)
    generator = torch.Generator().manual_seed(0)
    steps = 4
    logits = []
    for causal in (True, False):
        runner = TargetRunner(model, batch, 64)
        runner.prefill(torch.randint(0, VOCAB, (batch, 24), generator=torch.Generator().manual_seed(1)), lengths)
        ids = torch.randint(0, VOCAB, (batch, steps), generator=generator.manual_seed(2))
        if causal:
            depths, visible = chain_layout(batch, steps, "cpu")
        else:
            depths, visible = tree_layout(torch.tensor([[0, 0, 1, 2]] * batch))
        logits.append(runner.verify_forward(ids, depths, visible, valid=np.ones((batch, steps), dtype=bool)))
    torch.testing.assert_close(logits[0], logits[1])


def _host_view_draft(draft: Draft) -> Draft:
    """The same draft with host views of its nodes and extra slots, as a drafter that knows them gives it."""
    sizes = draft.num_nodes.tolist()
    parents = [row[:n] for row, n in zip(draft.parents.tolist(), sizes)]
    chain = all(row == list(range(-1, len(row) - 1)) for row in parents)
    extra = draft.extra
    slot_counts = extra.num_slots.tolist()
    extra_host = ExtraHost(slot_counts, [row[:n] for row, n in zip(extra.parents.tolist(), slot_counts)])
    return Draft(draft.tokens, draft.parents, draft.num_nodes, extra=ExtraSlots(extra.embeds, extra.parents,
                                                                                extra.num_slots, extra_host),
                 host=DraftHost(sizes, chain, None if chain else parents))


@settings(max_examples=150, deadline=None)
@given(drafts())
def test_pruning_with_host_views_matches_pruning_without(case) -> None:
    """The engine's limits (host lists) on a draft with host views: the same draft as from the tensors alone, and
    the extra slots' host view of the result agrees with its tensors."""
    draft, _, node_limits, extra_limits, _ = case
    with_host = prune_draft(_host_view_draft(draft), node_limits, extra_limits)
    without = prune_draft(draft, torch.tensor(node_limits), torch.tensor(extra_limits))
    for name in ("tokens", "parents", "num_nodes"):
        assert torch.equal(getattr(with_host, name), getattr(without, name))
    assert torch.equal(with_host.extra.parents, without.extra.parents)
    assert torch.equal(with_host.extra.num_slots, without.extra.num_slots)
    assert torch.equal(with_host.extra.embeds, without.extra.embeds)
    host = with_host.extra.host
    counts = with_host.extra.num_slots.tolist()
    assert host.num_slots == counts
    assert host.parents == [row[:n] for row, n in zip(with_host.extra.parents.tolist(), counts)]


class _OneShot(Drafter):
    """Drafts `make(state)` at the second step, nothing before or after."""

    name = "one-shot"

    def __init__(self, make) -> None:
        self.make = make

    def propose(self, state):
        return self.make(state) if state.step == 1 else Draft.empty(state.batch_size)


def _slots(parents: list[int], host_parents: list[int] | None = None) -> ExtraSlots:
    host = None if host_parents is None else ExtraHost([len(host_parents)], [host_parents])
    return ExtraSlots(torch.zeros(1, len(parents), 64), torch.tensor([parents]), torch.tensor([len(parents)]), host)


@pytest.mark.parametrize("extra, message", [
    (lambda: _slots([-1, 0], host_parents=[-1, -1]), "extra slots disagree with their host view"),
    (lambda: _slots([-1, 0], host_parents=[-1]), "extra slots disagree with their host view"),
    (lambda: _slots([-1, 5]), "extra slot parents must be -1, a node, or an earlier extra slot"),
])
def test_extra_slots_are_checked_against_their_host_view(extra, message) -> None:
    model = tiny_model("llama")
    drafter = _OneShot(lambda state: Draft(torch.tensor([[3]]), torch.tensor([[-1]]), torch.tensor([1]),
                                           extra=extra(), host=DraftHost([1], True)))
    with pytest.raises(DrafterError, match=message):
        specdec.generate(model, [1, 2, 3], drafter=drafter, max_new_tokens=4, controller=False)


def test_a_host_view_that_says_more_slots_than_there_are_is_refused_at_once() -> None:
    model = tiny_model("llama")
    drafter = _OneShot(lambda state: Draft(torch.tensor([[3]]), torch.tensor([[-1]]), torch.tensor([1]),
                                           extra=_slots([-1], host_parents=[-1, 0]), host=DraftHost([1], True)))
    with pytest.raises(DrafterError, match=r"extra.num_slots \[2\] outside \[0, 1\]"):
        specdec.generate(model, [1, 2, 3], drafter=drafter, max_new_tokens=4, controller=False)


class _BonusOutside(Verifier):
    name = "bonus-outside"

    def verify(self, draft, logits, sampling, generator):
        batch = draft.batch_size
        return Verdict(torch.full((batch, 0), -1), torch.zeros(batch, dtype=torch.long),
                       torch.full((batch,), logits.shape[-1]))


def test_a_bonus_token_outside_the_vocabulary_is_reported() -> None:
    with pytest.raises(VerifierError, match=f"verifier 'bonus-outside'.*bonus token {VOCAB} outside the vocabulary"):
        specdec.generate(tiny_model("llama"), [1, 2, 3], verifier=_BonusOutside(), max_new_tokens=3)


def test_validate_verdict_judges_a_chain_path() -> None:
    draft = Draft.chain(torch.tensor([[4, 5, 6]]))
    good = Verdict(torch.tensor([[0, 1, -1]]), torch.tensor([2]), torch.tensor([7]))
    assert validate_verdict(good, draft, "v", VOCAB) is good
    skipping = Verdict(torch.tensor([[0, 2, -1]]), torch.tensor([2]), torch.tensor([7]))
    with pytest.raises(VerifierError, match="do not form a path"):
        validate_verdict(skipping, draft, "v", VOCAB)
    too_many = Verdict(torch.tensor([[0, 1]]), torch.tensor([3]), torch.tensor([7]))
    with pytest.raises(VerifierError, match="narrower than num_accepted"):
        validate_verdict(too_many, draft, "v", VOCAB)


@pytest.mark.parametrize("controller", [True, False], ids=["controller", "own rule"])
@pytest.mark.parametrize("batch", [1, 4])
def test_ppd_steps_read_the_device_at_most_twice(controller, batch) -> None:
    """PPD's drafts carry host views of their nodes and prompt slots, its candidates stay on the device and its
    observe reads the accepted paths from the engine's host copy, and the exact verifier runs its per-level loops
    as many rounds as the tree is deep: a step reads the device at most twice (issue 20's budget; before, up to
    ~10 reads a step here, most of them the verifier's)."""
    from test_host_reads import PROMPTS

    target = tiny_model("llama")
    options = {"random_init": True, "tree_size": 12}
    per_step, where, out = reads_per_step(target, PROMPTS[:batch], "ppd", options, controller, 16)
    assert per_step and max(per_step) <= 2, f"reads per step: {per_step} at {dict(where)}"
    if not controller:  # the drafting path really ran (the controller may keep a random-init PPD plain)
        assert out.stats.drafted_tokens > 0


def test_ppd_drafts_say_their_index_data_on_the_host() -> None:
    from specdec.drafters.ppd.drafter import PPDDrafter, PPDOptions

    drafts = []

    class Recording(PPDDrafter):
        def propose(self, state):
            draft = super().propose(state)
            drafts.append(draft)
            return draft

    target = tiny_model("llama")
    specdec.generate(target, [[1, 2, 3, 1, 2], [4, 5, 6]], drafter=Recording(PPDOptions(random_init=True,
                                                                                            tree_size=12)),
                     max_new_tokens=6, controller=False)
    assert len(drafts) >= 3 and any(d.width for d in drafts)
    for draft in drafts:
        sizes = draft.num_nodes.tolist()
        assert draft.host.sizes == sizes
        assert [draft.host.parents_of(b) for b in range(len(sizes))] == [
            row[:n] for row, n in zip(draft.parents.tolist(), sizes)]
        counts = draft.extra.num_slots.tolist()
        assert draft.extra.host.num_slots == counts
        assert draft.extra.host.parents == [row[:n] for row, n in zip(draft.extra.parents.tolist(), counts)]


@st.composite
def scored_trees(draw: st.DrawFn) -> tuple[Draft, torch.Tensor]:
    """Random trees (duplicate siblings included: few distinct tokens) with logits that accept some paths."""
    batch = draw(st.integers(1, 3))
    rows = []
    for _ in range(batch):
        count = draw(st.integers(0, 9))
        parents = [draw(st.integers(-1, i - 1)) for i in range(count)]
        tokens = [draw(st.integers(0, 3)) for _ in range(count)]
        rows.append((tokens, parents))
    draft = Draft.from_rows(rows)
    choice = torch.tensor([[draw(st.integers(0, 3)) for _ in range(1 + draft.width)] for _ in range(batch)])
    logits = torch.nn.functional.one_hot(choice, 8).float()
    return draft, logits


@settings(max_examples=200, deadline=None)
@given(scored_trees())
def test_the_exact_verifier_reads_nothing_on_trees_with_a_host_view(case) -> None:
    """Its per-level loops run as many rounds as the host view says the tree is deep: the verdict is the one the
    loops that stop when nothing changes give (the draft without a host view), and nothing is read back."""
    draft, logits = case
    sampling = SamplingParams(temperature=0.0)
    generator = RowGenerators.seeded([0] * draft.batch_size)
    with counting_host_reads() as reads:
        verdict = ExactVerifier().verify(draft, logits, sampling, generator)
    unviewed = Draft(draft.tokens, draft.parents, draft.num_nodes)
    reference = ExactVerifier().verify(unviewed, logits, sampling, generator)
    assert sum(reads.values()) == 0, dict(reads)
    assert torch.equal(verdict.num_accepted, reference.num_accepted)
    assert torch.equal(verdict.accepted, reference.accepted) and torch.equal(verdict.bonus, reference.bonus)
    deepest = int(node_depths(draft.parents, draft.node_mask()).max()) if draft.width else 0
    assert draft.host.depth() == deepest
