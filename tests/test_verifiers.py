"""Unit and property tests of the verifiers (rejection, typical) and their shared tree helpers.

The statistical proof that `rejection` is lossless lives in test_distribution.py.
"""

from __future__ import annotations

import pytest
import torch
from conftest import VOCAB, OracleDrafter, RandomTreeDrafter, hf_greedy, tiny_model
from hypothesis import given, settings
from hypothesis import strategies as st
from sampling_drafters import ContextLM, SampledChainDrafter, SampledTreeDrafter, perturbed_copy, small_llama
from specdec.verifiers._tree import canonical_nodes, child_table, sum_along_paths
from specdec.verifiers.exact import ExactVerifier
from specdec.verifiers.rejection import RejectionVerifier
from specdec.verifiers.typical import TypicalOptions, TypicalVerifier, typical_thresholds

import specdec
from specdec import DecodeState, Draft, Drafter, DrafterError, PluginOptionsError
from specdec.draft import node_depths
from specdec.sampling import SamplingParams, process_logits
from specdec.validation import validate_verdict


def _random_draft(gen: torch.Generator, batch: int, width: int, vocab: int) -> Draft:
    """Random trees with ragged node counts; parents always point to an earlier node or the root."""
    counts = torch.randint(0, width + 1, (batch,), generator=gen)
    tokens = torch.randint(0, vocab, (batch, width), generator=gen)
    parents = torch.stack([torch.tensor([int(torch.randint(-1, i, (1,), generator=gen)) if i else -1
                                         for i in range(width)], dtype=torch.long) for _ in range(batch)]) \
        if width else torch.zeros(batch, 0, dtype=torch.long)
    return Draft(tokens, parents, counts)


def _path_logits(draft: Draft, vocab: int, gen: torch.Generator, scale: float) -> torch.Tensor:
    """Random target logits [B, 1 + N, V] that, like a real target's, depend only on the token
    path: nodes with equal token paths (duplicate siblings) get equal logits."""
    batch, width = draft.tokens.shape
    table: dict[tuple[int, ...], torch.Tensor] = {}
    out = torch.empty(batch, 1 + width, vocab)
    for b in range(batch):
        paths: list[tuple[int, ...]] = []
        for i in range(width):
            parent = int(draft.parents[b, i])
            paths.append((paths[parent] if parent >= 0 else ()) + (int(draft.tokens[b, i]),))
        for slot, path in enumerate([(), *paths]):
            if (b, path) not in table:
                table[(b, path)] = torch.randn(vocab, generator=gen) * scale
            out[b, slot] = table[(b, path)]
    return out


# -- shared tree helpers -----------------------------------------------------------------------------

def test_child_table_lists_children_in_sibling_order():
    #        root
    #       /  |  \
    #      0   1   4        node 2 under 0, node 3 under 1, node 5 under 2; node 6 is padding
    parents = torch.tensor([[-1, -1, 0, 1, -1, 2, 0]])
    valid = torch.tensor([[True] * 6 + [False]])
    table = child_table(parents, valid)
    assert table.shape == (1, 8, 3)
    assert table[0, 0].tolist() == [0, 1, 4]  # root
    assert table[0, 1].tolist() == [2, -1, -1]  # node 0 (padding node 6 is not its child)
    assert table[0, 2].tolist() == [3, -1, -1]
    assert table[0, 3].tolist() == [5, -1, -1]
    assert (table[0, 4:] == -1).all()


def test_child_table_empty():
    assert child_table(torch.zeros(3, 0, dtype=torch.long), torch.zeros(3, 0, dtype=torch.bool)).shape == (3, 1, 0)


def test_canonical_nodes_merge_equal_token_paths():
    # root -> a(0), a(1), b(2); 0 -> c(3); 1 -> c(4), d(5); 4 -> e(6); padding (7) keeps itself
    tokens = torch.tensor([[1, 1, 2, 3, 3, 4, 5, 1]])
    parents = torch.tensor([[-1, -1, -1, 0, 1, 1, 4, -1]])
    valid = torch.tensor([[True] * 7 + [False]])
    assert canonical_nodes(tokens, parents, valid).tolist() == [[0, 0, 2, 3, 3, 5, 6, 7]]


def test_sum_along_paths_matches_walking_up():
    gen = torch.Generator().manual_seed(0)
    draft = _random_draft(gen, batch=5, width=12, vocab=10)
    values = torch.rand(5, 12, generator=gen)
    valid = draft.node_mask()
    total = sum_along_paths(values, draft.parents, valid)
    for b in range(5):
        for i in range(12):
            expected, node = 0.0, i
            while valid[b, i] and node >= 0:
                expected += float(values[b, node])
                node = int(draft.parents[b, node])
            assert total[b, i].item() == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("verifier", [ExactVerifier(), RejectionVerifier(), TypicalVerifier()])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_padding_entries_are_ignored(verifier, temperature):
    """Entries past num_nodes may hold anything (the validator only checks real nodes)."""
    gen = torch.Generator().manual_seed(0)
    clean = Draft(torch.tensor([[1, 2, 0, 0]]), torch.tensor([[-1, 0, -1, -1]]), torch.tensor([2]))
    dirty = Draft(torch.tensor([[1, 2, -7, 10**6]]), torch.tensor([[-1, 0, 99, -40]]), torch.tensor([2]))
    logits = torch.randn(1, 5, 6, generator=gen)
    sampling = SamplingParams(temperature=temperature)
    a = verifier.verify(clean, logits, sampling, torch.Generator().manual_seed(1))
    b = verifier.verify(dirty, logits, sampling, torch.Generator().manual_seed(1))
    assert torch.equal(a.num_accepted, b.num_accepted) and torch.equal(a.bonus, b.bonus)


# -- rejection ---------------------------------------------------------------------------------------

def test_residual_after_rejection():
    p = torch.tensor([[0.5, 0.3, 0.2, 0.0]])
    q = torch.tensor([[0.1, 0.6, 0.2, 0.1]])
    residual = RejectionVerifier.residual_after_rejection(p, torch.tensor([1]), q)
    assert torch.allclose(residual, torch.tensor([[1.0, 0.0, 0.0, 0.0]]))
    point = RejectionVerifier.residual_after_rejection(p, torch.tensor([0]), None)
    assert torch.allclose(point, torch.tensor([[0.0, 0.6, 0.4, 0.0]]))
    # p == q: no residual mass; P is kept (the only mathematically consistent choice).
    assert torch.equal(RejectionVerifier.residual_after_rejection(p, torch.tensor([0]), p.clone()), p)


def test_rejection_explores_every_copy_of_a_duplicated_prefix():
    """Two root children carry the same token; the continuation the target wants hangs under the
    second copy. Greedy rejection must still find the depth-2 path (as exact matching does)."""
    vocab = 5
    logits = torch.full((1, 5, vocab), -5.0)
    logits[0, 0, 1] = 5.0  # root: wants token 1
    logits[0, 2, 3] = 5.0  # after node 1 (token 1): wants token 3
    logits[0, 1, 3] = 5.0  # after node 0 (token 1): the same context, the same choice
    logits[0, 4, 0] = 5.0  # after node 3 (token 3)
    draft = Draft.from_rows([([1, 1, 2, 3], [-1, -1, 0, 1])])
    verdict = RejectionVerifier().verify(draft, logits, SamplingParams(), torch.Generator())
    assert verdict.num_accepted.tolist() == [2]
    assert verdict.accepted[0, :2].tolist() == [1, 3]  # the real path through the second copy
    assert verdict.bonus.tolist() == [0]


def test_rejection_accepts_everything_when_q_equals_p():
    """Drafting from the target itself: min(1, p/q) = 1 at every node."""
    gen = torch.Generator().manual_seed(1)
    sampling = SamplingParams(temperature=0.8, top_p=0.9)
    batch, k, vocab = 64, 5, 12
    logits = torch.randn(batch, k + 1, vocab, generator=gen) * 3
    p = process_logits(logits, sampling)
    tokens = torch.multinomial(p[:, :k].reshape(-1, vocab), 1, generator=gen).reshape(batch, k)
    verdict = RejectionVerifier().verify(Draft.chain(tokens, q=p[:, :k]), logits, sampling, gen)
    assert verdict.num_accepted.tolist() == [k] * batch


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), width=st.integers(0, 9), vocab=st.integers(2, 10),
       temperature=st.sampled_from([0.0, 0.3, 1.0, 2.5]), top_k=st.sampled_from([None, 1, 3]),
       stochastic=st.booleans())
def test_rejection_never_emits_impossible_tokens(seed, width, vocab, temperature, top_k, stochastic):
    """Property: every accepted node and the bonus have target probability > 0, the verdict is a
    valid path, and at temperature 0 the verdict equals the exact (greedy) verifier's (trees with
    duplicate siblings included: rejection merges equal token paths)."""
    gen = torch.Generator().manual_seed(seed)
    batch = 4
    sampling = SamplingParams(temperature=temperature, top_k=top_k)
    draft = _random_draft(gen, batch, width, vocab)
    logits = _path_logits(draft, vocab, gen, scale=4.0)
    if stochastic and width:
        draft.q = torch.rand(batch, width, vocab, generator=gen).softmax(dim=-1)
    verdict = validate_verdict(RejectionVerifier().verify(draft, logits, sampling, gen), draft, "rejection")
    p = process_logits(logits, sampling)
    for b in range(batch):
        node = -1
        for j in range(int(verdict.num_accepted[b])):
            child = int(verdict.accepted[b, j])
            assert p[b, node + 1, draft.tokens[b, child]] > 0
            node = child
        assert p[b, node + 1, verdict.bonus[b]] > 0
    if temperature == 0.0:
        greedy = ExactVerifier().verify(draft, logits, sampling, gen)
        assert torch.equal(greedy.num_accepted, verdict.num_accepted)
        assert torch.equal(greedy.bonus, verdict.bonus)
        depth_rows = verdict.num_accepted > 0
        assert torch.equal(greedy.accepted[depth_rows], verdict.accepted[depth_rows])


# -- typical -----------------------------------------------------------------------------------------

def test_typical_thresholds():
    uniform = torch.full((4,), 0.25)
    assert typical_thresholds(uniform, 0.09, 0.3).item() == pytest.approx(min(0.09, 0.3 / 4))
    one_hot = torch.tensor([0.0, 1.0, 0.0])
    assert typical_thresholds(one_hot, 0.09, 0.3).item() == pytest.approx(0.09)


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), width=st.integers(0, 10), vocab=st.integers(2, 12),
       temperature=st.sampled_from([0.0, 0.5, 1.0, 2.0]), scale=st.floats(0.1, 8.0),
       epsilon=st.floats(0.01, 1.0), delta=st.floats(0.01, 1.0))
def test_typical_accepts_only_above_threshold_and_longest(seed, width, vocab, temperature, scale, epsilon, delta):
    """Property over random logits and trees: every accepted node has p(x) > threshold of its
    parent's distribution, and no longer fully acceptable path exists."""
    gen = torch.Generator().manual_seed(seed)
    batch = 3
    sampling = SamplingParams(temperature=temperature)
    draft = _random_draft(gen, batch, width, vocab)
    logits = _path_logits(draft, vocab, gen, scale)
    verifier = TypicalVerifier(TypicalOptions(epsilon=epsilon, delta=delta))
    verdict = validate_verdict(verifier.verify(draft, logits, sampling, gen), draft, "typical")
    p = process_logits(logits, sampling)
    threshold = typical_thresholds(p, epsilon, delta)

    def ok(b: int, i: int) -> bool:
        slot = int(draft.parents[b, i]) + 1
        return bool(p[b, slot, draft.tokens[b, i]] > threshold[b, slot])

    depths = node_depths(draft.parents, draft.node_mask())
    for b in range(batch):
        for j in range(int(verdict.num_accepted[b])):
            assert ok(b, int(verdict.accepted[b, j]))
        longest = 0
        for i in range(int(draft.num_nodes[b])):
            node, chain_ok = i, True
            while node >= 0:
                chain_ok &= ok(b, node)
                node = int(draft.parents[b, node])
            if chain_ok:
                longest = max(longest, int(depths[b, i]))
        assert int(verdict.num_accepted[b]) == longest


def test_typical_breaks_ties_by_path_log_probability():
    # Two depth-1 paths both acceptable; the second token is more likely, so it wins the tie.
    logits = torch.log(torch.tensor([[[0.1, 0.3, 0.6, 0.0 + 1e-9], [0.25] * 4, [0.25] * 4]]))
    draft = Draft.from_rows([([1, 2], [-1, -1])])
    verdict = TypicalVerifier().verify(draft, logits, SamplingParams(temperature=1.0), torch.Generator())
    assert verdict.num_accepted.tolist() == [1]
    assert verdict.accepted[0, 0].item() == 1


def test_typical_options_are_validated():
    for bad in ({"epsilon": 0.0}, {"epsilon": 1.5}, {"delta": -0.1}, {"delta": 2.0}, {"eps": 0.1}):
        with pytest.raises(PluginOptionsError, match="typical"):
            specdec.registry.create("verifier", "typical", bad)
    verifier = specdec.registry.create("verifier", "typical", {"epsilon": 0.2, "delta": 0.45})
    assert (verifier.options.epsilon, verifier.options.delta) == (0.2, 0.45)
    assert TypicalVerifier.lossless is False and RejectionVerifier.lossless is True


# -- end to end at temperature 0 ------------------------------------------------------------------------

@pytest.mark.parametrize("verifier", ["rejection", "typical"])
@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_greedy_identical_to_transformers(verifier, arch):
    model = tiny_model(arch)
    prompts = [[5, 6, 7], [9, 1, 2, 3, 4, 8]]
    expected = [hf_greedy(model, p, 20) for p in prompts]
    for drafter in (RandomTreeDrafter(VOCAB, seed=4), OracleDrafter({0: expected[0], 1: expected[1]}, k=4)):
        # controller=False: every tree verified as drafted (the controller would cut most random ones)
        out = specdec.generate(model, prompts, drafter=drafter, verifier=verifier, max_new_tokens=20, controller=False)
        assert out.sequences == expected
        assert out.stats.drafted_tokens > 0
        assert out.verifier_lossless is (verifier == "rejection")


def test_rejection_greedy_with_stochastic_drafter_q():
    """At temperature 0 a q-providing drafter's q is one-hot; output must still equal greedy."""
    target = small_llama(16, seed=0)
    drafter = SampledChainDrafter(ContextLM(perturbed_copy(target, 0.3, seed=1)), k=3)
    expected = hf_greedy(target, [3, 1], 12)
    out = specdec.generate(target, [3, 1], drafter=drafter, verifier="rejection", max_new_tokens=12,
                           controller=False)  # every draft verified, so some are accepted
    assert out.sequences[0] == expected
    assert out.stats.accepted_tokens > 0


# -- typical vs rejection on the same drafts ---------------------------------------------------------

def _target_logits_for(draft: Draft, contexts: list[list[int]], target_lm: ContextLM) -> torch.Tensor:
    """[B, 1 + N, V]: the target at the root and after every node's path (plain forwards)."""
    rows = []
    for b, context in enumerate(contexts):
        paths = [list(context)]
        node_paths: list[list[int]] = []
        for i in range(draft.width):
            parent = int(draft.parents[b, i])
            base = node_paths[parent] if parent >= 0 else []
            node_paths.append(base + [int(draft.tokens[b, i])])
            paths.append(list(context) + node_paths[-1])
        rows.append(target_lm.logits(paths))
    return torch.stack(rows)


@pytest.mark.parametrize("setting", [SamplingParams(temperature=1.0), SamplingParams(temperature=0.7, top_p=0.9)])
@pytest.mark.parametrize("drafter_cls", [SampledChainDrafter, SampledTreeDrafter])
def test_typical_accepts_at_least_as_many_as_rejection(setting, drafter_cls, capsys):
    """Same drafts, same target logits: typical's (deterministic) accepted count is at least
    rejection's mean accepted count on this setting (a measured property, not a theorem: see
    docs/verifiers.md for a trained pair where it reverses). Figures are printed (pytest -s)."""
    vocab, batch = 16, 300
    target = small_llama(vocab, seed=0)
    target_lm = ContextLM(target)
    drafter = drafter_cls(ContextLM(perturbed_copy(target, 0.3, seed=1)))
    gen = torch.Generator().manual_seed(5)
    contexts = [[int(t) for t in torch.randint(0, vocab, (4,), generator=gen)] for _ in range(batch)]
    state = DecodeState(row_ids=list(range(batch)), sequences=contexts, max_depth=torch.full((batch,), 8),
                        sampling=setting, generator=gen, target=None)
    draft = drafter.propose(state)
    logits = _target_logits_for(draft, contexts, target_lm)
    typical = TypicalVerifier().verify(draft, logits, setting, gen).num_accepted.double().mean().item()
    rejection = torch.stack([RejectionVerifier().verify(draft, logits, setting, gen).num_accepted
                             for _ in range(20)]).double().mean().item()
    with capsys.disabled():
        print(f"\n[{drafter_cls.__name__} T={setting.temperature} top_p={setting.top_p}] mean accepted drafts "
              f"per step: typical {typical:.3f}, rejection {rejection:.3f}")
    assert typical >= rejection


# -- drafter input checks ----------------------------------------------------------------------------

class _BadQDrafter(Drafter):
    name = "bad-q"
    description = "test: returns a broken q"
    provides_q = True

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how

    def propose(self, state: DecodeState) -> Draft:
        batch = state.batch_size
        tokens = torch.zeros(batch, 2, dtype=torch.long)
        if self.how == "shape":
            q = torch.full((batch, 2, VOCAB - 1), 1.0 / (VOCAB - 1))
        elif self.how == "sum":
            q = torch.full((batch, 2, VOCAB), 0.5)
        else:
            q = torch.full((batch, 2, VOCAB), 1.0 / VOCAB)
            q[..., 0] = -q[..., 0]
            q[..., 1] += 2.0 / VOCAB
        return Draft.chain(tokens, q=q)


@pytest.mark.parametrize(("how", "message"), [("shape", "shape"), ("sum", "probability"), ("negative", "probability")])
def test_bad_q_is_a_drafter_error_naming_the_drafter(how, message):
    with pytest.raises(DrafterError, match=rf"'bad-q'.*{message}"):
        specdec.generate(tiny_model("llama"), [1, 2, 3], drafter=_BadQDrafter(how), verifier="rejection",
                         temperature=1.0, max_new_tokens=4)
