"""Hindsight: with a verifier that accepts a node exactly when it is the target's choice (`exact`), each verdict
also says whether the nodes the goodput controller cut away would have been accepted, and a drafter cut by its
scores learns its acceptance by score from every node it proposed, not only from those it kept."""

from __future__ import annotations

from unittest import mock

import pytest
import torch
from conftest import tiny_model

import specdec
from specdec.acceptance import ABSOLUTE_BIN_PRIORS, RowAcceptance, absolute_bin
from specdec.controller import ControllerOptions, GoodputController, Member, Spare, hindsight
from specdec.costs import CostModel, VerifyCurve
from specdec.draft import Draft, Verdict


def test_a_chains_first_dropped_node_is_judged_by_the_bonus():
    spare = Spare(nodes=[2, 3], up=[1, 2], readings=[(4, 0.2), (4, 0.2)])
    # kept nodes 0, 1 both accepted: the target's tokens after them are 11, 12, then the bonus 13
    up, hits, readings, known = hindsight([-1, 0], [True, True], [1, 2], [(5, 0.5), (5, 0.5)], spare,
                                          [11, 12, 13], [11, 12, 13, 99])
    assert hits == [True, True, True] and known == [True, True, True] and up == [-1, 0, 1]
    assert readings == [(5, 0.5), (5, 0.5), (4, 0.2)]  # node 3 hangs below a dropped node: not known, left off
    _, missed, _, _ = hindsight([-1, 0], [True, True], [1, 2], [], spare, [11, 12, 77], [11, 12, 13, 99])
    assert missed == [True, True, False]


def test_nodes_dropped_below_a_rejected_node_are_not_judged():
    spare = Spare(nodes=[2], up=[1], readings=[(4, 0.2)])
    up, hits, _, known = hindsight([-1, 0], [True, False], [1, 0], [], spare, [11, 40], [11, 12, 40])
    assert len(hits) == 2 and known == [True, True]  # the dropped node's parent failed: no trial


def test_a_trees_dropped_siblings_are_judged_against_the_path():
    # root -> a (kept, accepted) -> c (kept, accepted); dropped: b (root's child), d (a's child), e (below b)
    spare = Spare(nodes=[10, 11, 12], up=[-1, 0, 2], readings=[(1, 0.1), (1, 0.1), (1, 0.1)])
    targets = [5, 6, 7]  # a = 5, c = 6, bonus 7
    tokens = {10: 9, 11: 6, 12: 7}
    proposal = [tokens.get(i, 0) for i in range(13)]
    up, hits, _, known = hindsight([-1, 0], [True, True], [1, 2], [], spare, targets, proposal)
    # b (token 9 against a's 5): rejected; d (token 6 against c's 6, a sibling of c with c's token): accepted
    assert hits[2:] == [False, True] and known[2:] == [True, True] and up[2:] == [-1, 0]


def _costs() -> CostModel:
    """Verifying each extra node costs half a plain step: a node pays when it is accepted half the time."""
    model = CostModel("steep")
    model.live.curves[(True, 1)] = VerifyCurve(1, (0, 1, 2, 4, 8), (0.01, 0.015, 0.02, 0.03, 0.05))
    return model


@pytest.mark.parametrize("learns", [True, False])
def test_a_drafter_cut_by_its_scores_learns_from_the_nodes_it_dropped(learns):
    """A free drafter whose nodes score 0.12 (their bin's prior 0.15) is cut to nothing on steep costs at
    first; every dropped first node would have been accepted. In hindsight the row learns so and verifies its
    later drafts; without hindsight its scores are read as before (`node_estimates`), never by value."""
    model = _costs()
    ctl = GoodputController([Member("d", False)], model, model.table(), True, True, ControllerOptions(),
                            hindsight=learns)
    kept_per_step = []
    for _ in range(12):
        plan = ctl.plan([0], [100], 64)
        size = min(2, plan.budget[0])  # (0: the row rests from its drafter)
        draft = Draft.from_rows([([5, 6][:size], [-1, 0][:size])], scores=[[0.12, 0.12 * 0.12][:size]])
        cut_draft, cut = ctl.cut(draft, plan, 0.0)
        kept = int(cut_draft.num_nodes[0])
        kept_per_step.append(kept)
        path = torch.tensor([[0, 1][:kept] + [-1] * (2 - kept)]) if kept else torch.full((1, 1), -1)
        verdict = Verdict(path, torch.tensor([kept]), torch.tensor([[5, 6, 7][kept]]))
        ctl.observe(plan, cut, verdict, {}, [kept], None, [[5, 6, 7][: kept + 1]], [[5, 6][:size]])
    estimate = ctl.rows[0].estimates["d"]
    index = absolute_bin(0.12)
    if learns:
        assert kept_per_step[0] == 0 and kept_per_step[-1] > 0  # dropped, then judged right, then verified
        assert estimate.absolute()[index] > 2 * ABSOLUTE_BIN_PRIORS[index]
    else:
        assert sum(estimate.absolute_trials) == 0


def test_by_score_reads_a_nodes_score_whatever_its_position():
    estimate = RowAcceptance()
    probs, readings = estimate.by_score([-1, 0, -1], [0.8, 0.5, 0.8])
    assert probs[0] == probs[2] == pytest.approx(ABSOLUTE_BIN_PRIORS[absolute_bin(0.8)])
    assert probs[1] == pytest.approx(probs[0] * ABSOLUTE_BIN_PRIORS[absolute_bin(0.5)])
    estimate.observe([-1, 0, -1], [True, True, False], readings=readings, by_score=True)
    assert estimate.absolute_trials[absolute_bin(0.8)] > 1.5 and estimate.absolute_hits[absolute_bin(0.5)] > 0.9
    assert estimate.fork().absolute() == pytest.approx(estimate.absolute())  # a new row starts from it


def test_the_by_score_table_kept_between_verdicts_is_the_one_the_counts_give():
    """`by_score` reads a table kept bin by bin as verdicts come, not worked out every step: after any run of
    verdicts it must equal the counts' own reading, and a fork must not share it."""
    estimate = RowAcceptance()
    for step in range(40):
        scores = [(step * 0.037) % 1.0, (step * 0.11) % 1.0, 0.05]
        _, readings = estimate.by_score([-1, 0, 1], scores)
        estimate.observe([-1, 0, 1], [step % 3 != 0, step % 2 == 0, step % 5 == 0], readings=readings, by_score=True)
        counted = [(hits + 2.0 * prior) / (trials + 2.0) for prior, hits, trials
                   in zip(estimate.absolute_prior, estimate.absolute_hits, estimate.absolute_trials)]
        assert estimate.absolute() == pytest.approx(counted)
    child = estimate.fork()
    child.observe([-1], [True], readings=child.by_score([-1], [0.95])[1], by_score=True)
    assert estimate.absolute() == pytest.approx(counted)  # the fork's verdicts are its own


@pytest.mark.parametrize("verifier", ["exact", "rejection"])
def test_the_engine_hands_the_controller_the_targets_choices_and_the_uncut_draft(verifier):
    """Greedy, anpd on steep costs (so drafts are cut): with `exact` each step's targets are exactly the tokens
    the step committed and `proposed` the uncut draft; `rejection` (which does not accept by the target's
    choice alone) gets neither, and the output is the same greedy text either way."""
    model = tiny_model("llama")
    prompt = [1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3]
    seen: list[tuple] = []
    real_observe = GoodputController.observe
    real_cut = GoodputController.cut

    def cut(self, draft, plan, seconds, scoring=None):
        cut_draft, cut = real_cut(self, draft, plan, seconds, scoring)
        seen.append(("cut", draft.tokens.tolist(), draft.sizes(), cut))
        return cut_draft, cut

    def observe(self, plan, cut, verdict, timings, accepted=None, paths=None, targets=None, proposed=None):
        seen.append(("observe", targets, proposed, accepted))
        return real_observe(self, plan, cut, verdict, timings, accepted, paths, targets, proposed)

    with mock.patch.object(GoodputController, "observe", observe), mock.patch.object(GoodputController, "cut", cut):
        out = specdec.generate(model, prompt, drafter="anpd", verifier=verifier, max_new_tokens=40,
                               cost_model=_costs())
    plain = model.generate(torch.tensor([prompt]), max_new_tokens=40, do_sample=False)[0, len(prompt):].tolist()
    assert out.sequences[0] == plain
    position = judged = 0
    for (_, tokens, sizes, cut), (_, targets, proposed, accepted) in zip(seen[0::2], seen[1::2]):
        if verifier == "rejection" or not any(spare is not None for spare in cut.spare):
            assert targets is None and proposed is None
        else:
            judged += 1
            assert proposed[0][: sizes[0]] == tokens[0][: sizes[0]]
            assert targets[0] == plain[position : position + accepted[0] + 1]  # the accepted tokens, the bonus
        position += accepted[0] + 1
    assert position >= len(plain)
    assert (judged > 0) == (verifier == "exact")


def test_a_drafter_whose_look_costs_prompt_slots_keeps_the_positional_reading():
    """PPD's look pays its prompt slots, so it stops looking when its estimates fall and its bins would never be
    judged again: only a drafter that looks every step for free (anpd) reads its scores by value."""
    from specdec.draft import ExtraSlots

    model = _costs()
    ctl = GoodputController([Member("d", False)], model, model.table(), True, True, ControllerOptions(),
                            hindsight=True)
    plan = ctl.plan([0], [100], 64)
    plan.budget = [2]
    free = Draft.from_rows([([5, 6], [-1, 0])], scores=[[0.9, 0.8]])
    assert ctl.cut(free, plan, 0.0)[1].by_score == [True]
    ctl.rows[0].root_extras["d"] = 2.0  # its proposals carry prompt slots at the root
    extra = ExtraSlots(torch.zeros(1, 2, 4), torch.tensor([[-1, -1]]), torch.tensor([2]))
    slotted = Draft(free.tokens, free.parents, free.num_nodes, None, extra, free.scores)
    assert ctl.cut(slotted, plan, 0.0)[1].by_score == [False]
