"""Losslessness of `rejection`, proven statistically end to end through `specdec.generate`.

Pre-stated test: a tiny random Llama target (vocab 16, peaky conditionals) generates 3 tokens for
N = 20,000 rows of one prompt (one batched call). The empirical joint of the 3 tokens is compared
with the target's exact joint (enumerated from its conditionals, 16^3 cells) by a chi-square
goodness-of-fit test; cells with expected count < 5 are pooled into one bin. A correct verifier
must give p-value > 1e-3; the deliberately broken verifiers below must give p-value < 1e-3 on the
same setting (the test has power). Seeds are fixed, so the outcome is deterministic.
"""

from __future__ import annotations

import pytest
import torch
from conftest import synthetic_costs
from sampling_drafters import (
    ContextLM,
    ExitingChainDrafter,
    SampledChainDrafter,
    SampledTreeDrafter,
    TopKTreeDrafter,
    exact_joint,
    perturbed_copy,
    small_llama,
)
from specdec.verifiers.exact import ExactVerifier, longest_accepted_path
from specdec.verifiers.rejection import RejectionVerifier

import specdec
from specdec import Draft, Verdict, Verifier
from specdec.sampling import SamplingParams, process_logits, sample

VOCAB = 16
STEPS = 3
ROWS = 20_000
PROMPT = [5]  # one token: no prefill, so the 20k-row runs stay cheap
P_VALUE_THRESHOLD = 1e-3
SETTINGS = {
    "t1.0": SamplingParams(temperature=1.0),
    "t0.7-top_p0.9": SamplingParams(temperature=0.7, top_p=0.9),
}
DRAFTERS = {"sampled_chain": SampledChainDrafter, "topk_tree": TopKTreeDrafter, "sampled_tree": SampledTreeDrafter}


def chi_square_p_value(counts: torch.Tensor, probs: torch.Tensor, min_expected: float = 5.0) -> float:
    """Pearson chi-square goodness of fit; cells expected below `min_expected` are pooled."""
    counts, probs = counts.double().flatten(), probs.double().flatten()
    expected = counts.sum() * probs
    small = expected < min_expected
    observed = torch.cat([counts[~small], counts[small].sum()[None]])
    expected = torch.cat([expected[~small], expected[small].sum()[None]])
    if bool(((expected == 0) & (observed > 0)).any()):
        return 0.0  # a sample the target can never produce
    keep = expected > 0
    observed, expected = observed[keep], expected[keep]
    statistic = ((observed - expected) ** 2 / expected).sum()
    dof = observed.numel() - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2.0, dtype=torch.float64), statistic / 2.0))


class AlwaysAccept(Verifier):
    """Broken on purpose: accepts the whole first path, bonus from p at its end."""

    name = "broken-always-accept"
    lossless = False

    def verify(self, draft: Draft, logits, sampling, generator) -> Verdict:
        first_child = torch.ones_like(draft.tokens, dtype=torch.bool)
        path, length, deepest = longest_accepted_path(draft, first_child)
        p_end = process_logits(logits[torch.arange(draft.batch_size), deepest + 1], sampling)
        return Verdict(path, length, sample(p_end, generator))


class BonusFromP(RejectionVerifier):
    """Broken on purpose: after a rejection keeps sampling from p instead of the residual."""

    name = "broken-bonus-from-p"

    @staticmethod
    def residual_after_rejection(residual, token, q):
        return residual


@pytest.fixture(scope="module")
def target():
    return small_llama(VOCAB, seed=0)


@pytest.fixture(scope="module")
def draft_lm(target):
    return ContextLM(perturbed_copy(target, scale=0.3, seed=1))


@pytest.fixture(scope="module")
def joints(target):
    lm = ContextLM(target)
    return {name: exact_joint(lm, PROMPT, VOCAB, STEPS, params) for name, params in SETTINGS.items()}


def _generate_counts(target, drafter, verifier, params: SamplingParams, seed: int = 0, cost_model=None):
    out = specdec.generate(target, [PROMPT] * ROWS, drafter=drafter, verifier=verifier, max_new_tokens=STEPS,
                           temperature=params.temperature, top_p=params.top_p, top_k=params.top_k, seed=seed,
                           max_draft_nodes=8, cost_model=cost_model)
    tokens = torch.tensor(out.sequences)
    assert tokens.shape == (ROWS, STEPS)
    index = (tokens[:, 0] * VOCAB + tokens[:, 1]) * VOCAB + tokens[:, 2]
    return torch.bincount(index, minlength=VOCAB**STEPS), out.stats


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("drafter_name", list(DRAFTERS))
def test_rejection_matches_target_joint(target, draft_lm, joints, setting, drafter_name):
    drafter = DRAFTERS[drafter_name](draft_lm)
    counts, stats = _generate_counts(target, drafter, "rejection", SETTINGS[setting])
    p_value = chi_square_p_value(counts, joints[setting])
    tv = 0.5 * (counts.double() / ROWS - joints[setting].flatten()).abs().sum()
    print(f"\n[rejection {drafter_name} {setting}] chi2 p={p_value:.3g} tv={tv:.4f} "
          f"accepted/row={stats.accepted_tokens / ROWS:.2f}")
    # Drafts must actually be accepted, or the test would only exercise the bonus path.
    assert stats.accepted_tokens > 0.2 * ROWS, stats.accepted_tokens
    assert p_value > P_VALUE_THRESHOLD, f"p={p_value:.2e} tv={tv:.4f}"


@pytest.mark.parametrize("branches", [1, 2])
def test_rejection_with_the_draft_model_drafter(target, joints, branches):
    """The shipped draft_model drafter (its own cache, q from the sampling module) as the stochastic
    drafter: a sampled chain, and a tree whose root children are i.i.d. samples of q."""
    from specdec.drafters.draft_model import DraftModelDrafter

    setting = "t0.7-top_p0.9"
    drafter = DraftModelDrafter(DraftModelDrafter.Options(model=perturbed_copy(target, scale=0.3, seed=1), k=2,
                                                          branches=branches))
    counts, stats = _generate_counts(target, drafter, "rejection", SETTINGS[setting], cost_model=_drafting_costs())
    assert stats.drafter_stats["draft_weights"] == "int8"  # the CPU default: q comes from the int8 copies
    assert stats.accepted_tokens > 0.2 * ROWS, stats.accepted_tokens
    assert chi_square_p_value(counts, joints[setting]) > P_VALUE_THRESHOLD


def test_rejection_with_a_reduced_draft_vocabulary(target, joints):
    """draft_model proposing from 10 of the 16 tokens (draft_vocab): q is zero elsewhere, so
    rejection sampling still reproduces the target's joint."""
    from specdec.drafters.draft_model import DraftModelDrafter

    setting = "t1.0"
    kept = [0, 2, 3, 5, 7, 8, 9, 11, 12, 15]
    drafter = DraftModelDrafter(DraftModelDrafter.Options(model=perturbed_copy(target, scale=0.3, seed=1), k=2,
                                                          draft_vocab=kept))
    counts, stats = _generate_counts(target, drafter, "rejection", SETTINGS[setting], cost_model=_drafting_costs())
    assert stats.drafter_stats["draft_head_tokens"] == len(kept)
    assert stats.accepted_tokens > 0.2 * ROWS, stats.accepted_tokens
    assert chi_square_p_value(counts, joints[setting]) > P_VALUE_THRESHOLD


@pytest.mark.parametrize("drafter_name", ["sampled_tree"])
def test_exact_match_sampling_matches_target_joint(target, draft_lm, joints, drafter_name):
    """`exact` at temperature > 0 (sample the target at every node, keep matching nodes) is lossless
    too, also for trees with duplicate siblings (i.i.d. children repeat tokens)."""
    counts, _ = _generate_counts(target, DRAFTERS[drafter_name](draft_lm), "exact", SETTINGS["t1.0"])
    p_value = chi_square_p_value(counts, joints["t1.0"])
    print(f"\n[exact {drafter_name} t1.0] chi2 p={p_value:.3g}")
    assert p_value > P_VALUE_THRESHOLD


@pytest.mark.parametrize(
    ("broken", "drafter_name", "setting"),
    [
        (AlwaysAccept, "topk_tree", "t1.0"),
        (BonusFromP, "sampled_chain", "t1.0"),
        (BonusFromP, "topk_tree", "t1.0"),
        (BonusFromP, "sampled_tree", "t0.7-top_p0.9"),
    ],
)
def test_broken_verifier_fails_the_same_test(target, draft_lm, joints, broken, drafter_name, setting):
    counts, _ = _generate_counts(target, DRAFTERS[drafter_name](draft_lm), broken(), SETTINGS[setting])
    p_value = chi_square_p_value(counts, joints[setting])
    tv = 0.5 * (counts.double() / ROWS - joints[setting].flatten()).abs().sum()
    print(f"\n[{broken.name} {drafter_name} {setting}] chi2 p={p_value:.3g} tv={tv:.4f}")
    assert p_value < P_VALUE_THRESHOLD


def _wide_draft(p_draft: torch.Tensor, k: int, stochastic: bool, generator: torch.Generator) -> Draft:
    """k siblings under the root: i.i.d. samples from p_draft (with q) or its top-k (q None)."""
    batch = p_draft.shape[0]
    if stochastic:
        tokens = sample(p_draft[:, None].expand(batch, k, -1), generator)
        q = p_draft[:, None].expand(batch, k, -1).contiguous()
    else:
        tokens, q = p_draft.topk(k, dim=-1).indices, None
    return Draft(tokens, torch.full((batch, k), -1), torch.full((batch,), k), q)


@pytest.mark.parametrize("stochastic", [True, False])
def test_many_siblings_first_token_marginal(stochastic):
    """Direct verifier check with 4 siblings (i.i.d. children repeat tokens often): the first
    emitted token of a step must follow the target's processed p at the root."""
    rows, vocab, k = 100_000, 8, 4
    gen = torch.Generator().manual_seed(11)
    sampling = SamplingParams(temperature=0.9, top_k=6)
    root_logits = torch.randn(vocab, generator=gen) * 2
    draft_logits = torch.randn(vocab, generator=gen) * 2
    p_draft = process_logits(draft_logits, sampling).expand(rows, vocab)
    draft = _wide_draft(p_draft, k, stochastic, gen)
    logits = torch.cat([root_logits.expand(rows, 1, vocab), torch.randn(rows, k, vocab, generator=gen)], dim=1)
    verdict = RejectionVerifier().verify(draft, logits, sampling, gen)
    first = torch.where(verdict.num_accepted > 0, verdict.accepted_tokens(draft)[:, 0], verdict.bonus)
    counts = torch.bincount(first, minlength=vocab)
    assert chi_square_p_value(counts, process_logits(root_logits, sampling)) > P_VALUE_THRESHOLD


@pytest.mark.parametrize("verifier", [ExactVerifier(), RejectionVerifier()])
def test_duplicate_siblings_do_not_bias_the_next_token(verifier):
    """Root children [y, y] (two copies), under copy A token 1, under copy B token 2. Given y was
    emitted first, the next token must follow p(. | y) (uniform here). Picking whichever copy's
    subtree happens to match would favour token 2 (0.375 instead of 0.25 before the fix)."""
    rows, vocab = 100_000, 4
    root, after_y = torch.tensor([2.0, 0.0, 0.0, 0.0]), torch.zeros(vocab)
    logits = torch.stack([root, after_y, after_y, torch.zeros(vocab), torch.zeros(vocab)]).expand(rows, 5, vocab)
    draft = Draft(torch.tensor([[0, 0, 1, 2]]).expand(rows, 4).clone(),
                  torch.tensor([[-1, -1, 0, 1]]).expand(rows, 4).clone(), torch.full((rows,), 4))
    verdict = verifier.verify(draft, logits, SamplingParams(temperature=1.0), torch.Generator().manual_seed(0))
    first_is_y = verdict.num_accepted >= 1
    second = torch.where(verdict.num_accepted >= 2, verdict.accepted_tokens(draft)[:, 1], verdict.bonus)
    counts = torch.bincount(second[first_is_y], minlength=vocab)
    assert chi_square_p_value(counts, torch.full((vocab,), 1 / vocab)) > P_VALUE_THRESHOLD


def _drafting_costs():
    """A cost table on which a few more inputs cost nothing and drafting is unmeasured (free): the controller drafts.
    (Priced at nominal costs, a seeded call's default, a draft model the target's size never pays.)"""
    return synthetic_costs((0, 1, 2, 3, 4, 8), (1.0, 1.0, 1.0, 1.0, 1.0, 1.5))


def _cutting_costs():
    """A frozen cost table on which verifying more nodes costs more and more (1, 1.2, 1.9, 2.8, ...):
    budgets stay below the drafts' length and move with each row's acceptance (plain steps too)."""
    return synthetic_costs((0, 1, 2, 3, 4, 8), (1.0, 1.2, 1.9, 2.8, 3.6, 7.0))


@pytest.mark.parametrize("drafter_name", ["sampled_chain", "topk_tree"])
def test_rejection_with_the_controller_cutting_drafts(target, draft_lm, joints, drafter_name):
    """The goodput controller cuts each row's draft to its own budget (a stochastic chain: by node order,
    to a length fixed before drafting; a deterministic tree: its best prefix after drafting), the budget
    moving with the row's acceptance. The joint is still the target's."""
    drafter = DRAFTERS[drafter_name](draft_lm)
    out = specdec.generate(target, [PROMPT] * ROWS, drafter=drafter, verifier="rejection", max_new_tokens=STEPS,
                           temperature=1.0, seed=0, max_draft_nodes=8, cost_model=_cutting_costs(),
                           controller={"trace": True})
    tokens = torch.tensor(out.sequences)
    counts = torch.bincount((tokens[:, 0] * VOCAB + tokens[:, 1]) * VOCAB + tokens[:, 2], minlength=VOCAB**STEPS)
    verified = [n for step in out.stats.controller["trace"] for n in step["verified"]]
    proposed = [n for step in out.stats.controller["trace"] for n in step["proposed"]]
    cut = sum(v < p for v, p in zip(verified, proposed))
    widths = set(verified)
    print(f"\n[controller {drafter_name}] verified widths {sorted(widths)}, {cut} of {len(verified)} drafts cut, "
          f"accepted/row={out.stats.accepted_tokens / ROWS:.2f}")
    assert out.stats.controller["mode"] == "frozen"
    assert cut > 0.2 * len(verified) and len(widths) >= 2  # the controller really cuts, to varied widths
    assert out.stats.accepted_tokens > 0.2 * ROWS
    assert chi_square_p_value(counts, joints["t1.0"]) > P_VALUE_THRESHOLD


def test_rejection_with_the_controllers_exit_stopping_sampled_chains(target, draft_lm, joints):
    """The controller's exit (specdec.chain_exit) stops a sampled chain after seeing each drafted token's
    probability: whether a row drafts deeper depends on the tokens it drafted, never on the next one, so the
    joint is still the target's."""
    from specdec.acceptance import RowAcceptance

    # Flatter than `_cutting_costs`: a first step's budget of 2, whose second node pays after a usual first
    # token and not after an unlikely one. The drafter ran before in this process: its scores' usual level
    # is known from the first step on (what the exit reads a score against).
    costs = synthetic_costs((0, 1, 2, 3, 4, 8), (1.0, 1.1, 1.3, 1.5, 1.7, 3.0))
    costs.live.acceptance[ExitingChainDrafter.name] = RowAcceptance(prior=[0.6] * 3, score_mean=[0.3] * 3)
    drafter = ExitingChainDrafter(draft_lm)
    out = specdec.generate(target, [PROMPT] * ROWS, drafter=drafter, verifier="rejection", max_new_tokens=STEPS,
                           temperature=1.0, seed=0, max_draft_nodes=8, cost_model=costs,
                           controller={"trace": True})
    tokens = torch.tensor(out.sequences)
    counts = torch.bincount((tokens[:, 0] * VOCAB + tokens[:, 1]) * VOCAB + tokens[:, 2], minlength=VOCAB**STEPS)
    proposed = [n for step in out.stats.controller["trace"] for n in step["proposed"]]
    print(f"\n[exit] {drafter.stopped} chains stopped early; proposed lengths {sorted(set(proposed))}")
    assert drafter.stopped > 0.1 * ROWS and len(set(proposed) - {0}) >= 2  # the exit really stops chains
    assert out.stats.accepted_tokens > 0.2 * ROWS
    assert chi_square_p_value(counts, joints["t1.0"]) > P_VALUE_THRESHOLD


def test_rejection_with_the_controllers_exit_stopping_a_draft_models_chains(target, joints):
    """The shipped draft_model under the controller's exit: its chains stop where the draft's confidence in the
    tokens drafted so far says the next ones do not pay, and the joint is still the target's."""
    from specdec.drafters.draft_model import DraftModelDrafter

    from specdec.acceptance import RowAcceptance

    costs = synthetic_costs((0, 1, 2, 3, 4, 8), (1.0, 1.1, 1.3, 1.5, 1.7, 3.0))  # as the test above
    costs.live.acceptance["draft_model"] = RowAcceptance(prior=[0.6] * 3, score_mean=[0.3] * 3)
    drafter = DraftModelDrafter(DraftModelDrafter.Options(model=perturbed_copy(target, scale=0.3, seed=1), k=1,
                                                          k_max=3))
    out = specdec.generate(target, [PROMPT] * ROWS, drafter=drafter, verifier="rejection", max_new_tokens=STEPS,
                           temperature=1.0, seed=0, max_draft_nodes=8, cost_model=costs, controller={"trace": True})
    tokens = torch.tensor(out.sequences)
    counts = torch.bincount((tokens[:, 0] * VOCAB + tokens[:, 1]) * VOCAB + tokens[:, 2], minlength=VOCAB**STEPS)
    steps = out.stats.controller["trace"]
    stopped = sum(0 < n < b for step in steps for n, b in zip(step["proposed"], step["budget"]))
    print(f"\n[draft_model exit] {stopped} chains stopped before their budget")
    assert stopped > 0.1 * ROWS  # the exit really stops chains
    assert out.stats.accepted_tokens > 0.2 * ROWS
    assert chi_square_p_value(counts, joints["t1.0"]) > P_VALUE_THRESHOLD
