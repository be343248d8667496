"""The controller's chain exit (specdec.chain_exit) and the score calibration it reads
(`RowAcceptance.factors`): when a scoring chain drafter stops drafting a row."""

from __future__ import annotations

import pytest
from conftest import hf_greedy, tiny_model
from specdec.drafters.draft_model import DraftModelDrafter, DraftModelOptions
from specdec.drafters.layerskip.drafter import LayerSkipDrafter, LayerSkipOptions

import specdec
from specdec import engine
from specdec.acceptance import RowAcceptance, default_factors, score_bin
from specdec.chain_exit import ChainExit, ExitRow
from specdec.controller import GoodputController

pytestmark = pytest.mark.usefixtures("one_thread")

VERIFY = [0.010 + 0.0002 * k for k in range(9)]  # a flat verify curve: 10 ms, 0.2 ms an input more


def _row(per_level: float, conditional: float = 0.9, forced: int = 0, budget: int = 8) -> ExitRow:
    return ExitRow([conditional] * budget, [0.5] * budget, default_factors(),
                   [0.0] + [0.001 + per_level * k for k in range(1, budget + 1)], VERIFY[: budget + 1],
                   (0.0002, 0.0003), forced)


def _decisions(row: ExitRow, scores: list[float]) -> list[bool]:
    return [row.keep_drafting(depth, score) for depth, score in enumerate(scores, start=1)]


def test_a_cheap_confident_chain_goes_on_and_an_unsure_costly_one_stops():
    # Draft forwards a third of a step: confident tokens (twice the usual score) pay for more, unsure ones
    # (a twentieth of it: each halves the path's chance) stop the chain within a few levels.
    assert all(_decisions(_row(0.0035), [1.0] * 5))
    unsure = _decisions(_row(0.0035), [0.025] * 7)
    assert unsure[0] and not all(unsure) and unsure[unsure.index(False):] == [False] * (7 - unsure.index(False))
    # ... and free drafting goes on while the next token is worth its input, a draft forward worth many steps never
    assert all(_decisions(_row(0.0), [0.025] * 3))
    assert not any(_decisions(_row(0.5), [1.0] * 7))


def test_the_exit_reads_scores_as_the_cut_does_and_keeps_probes_and_budgets():
    row = _row(0.0035)
    row.keep_drafting(1, 1.0)
    row.keep_drafting(2, 0.1)
    estimate = RowAcceptance(prior=[0.9] * 8, score_mean=[0.5] * 8)
    assert row.paths == pytest.approx(estimate.node_probs([-1, 0], [1.0, 0.1], explore=True)[:2], rel=0.05)
    # Redrafting from depth 1 (a new step of the same row) forgets the old path.
    row.keep_drafting(1, 0.5)
    assert len(row.paths) == 1
    assert all(_decisions(_row(0.5, forced=4), [1.0] * 3))  # a probe drafts its forced nodes
    assert not _row(0.0, budget=3).keep_drafting(3, 1.0)  # never past the budget


def test_rows_without_a_planned_chain_go_on_and_prices_are_built_once():
    built = []

    def build(b: int) -> ExitRow | None:
        built.append(b)
        return _row(0.5) if b == 0 else None

    rule = ChainExit(3, build)
    assert rule.keep_drafting(1, [1.0, 0.1, 0.1], [True, True, False]) == [False, True, True]
    assert rule.keep_drafting(2, [1.0, 0.1, 0.1], [False, True, False]) == [True, True, True]
    assert built == [0, 1]  # row 2 never drafted: never priced; each row's prices read once


def test_calibration_learns_what_scores_tell_for_planned_drafters_only():
    # A self-draft copying a passage: unsure of tokens it gets right. The square-root rule halves such a token's
    # chance; verdicts teach the calibration that its low scores are accepted as often as any.
    learnt = RowAcceptance(prior=[0.9, 0.9], score_mean=[0.5, 0.5])
    low = score_bin(0.05, 0.5)
    assert low is not None and default_factors()[low] == 0.5
    for _ in range(20):
        _, readings = learnt.node_estimates([-1, 0], [0.05, 0.5], explore=True)
        learnt.observe([-1, 0], [True, True], age=True, readings=readings)
    assert learnt.factors()[low] > 0.8
    unlearnt = RowAcceptance(prior=[0.9, 0.9], score_mean=[0.5, 0.5])
    assert learnt.node_probs([-1, 0], [0.05, 0.5], explore=True)[0] > 0.8 > 0.5 > unlearnt.node_probs(
        [-1, 0], [0.05, 0.5], explore=True)[0]
    # A free drafter's (explore False) is read by the square-root rule, learns nothing, and forks carry it.
    free = RowAcceptance(prior=[0.9, 0.9], score_mean=[0.5, 0.5])
    for _ in range(20):
        _, readings = free.node_estimates([-1, 0], [0.05, 0.5])
        free.observe([-1, 0], [True, True], readings=readings)
    assert free.factors() == pytest.approx(default_factors())
    assert learnt.node_probs([-1, 0], [0.05, 0.5])[0] == pytest.approx(min(1.0, learnt.conditional(0) * 0.5))
    assert learnt.fork().factors() == pytest.approx(learnt.factors())


class _StopRowZero:
    """A scripted exit: row 0 stops after two nodes, other rows go on; records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[int, list[float], list[bool]]] = []

    def keep_drafting(self, depth, scores, rows=None):
        self.asked.append((depth, list(scores), list(rows)))
        return [depth < 2 if b == 0 else True for b in range(len(scores))]


class _Scripted(LayerSkipDrafter):
    def propose(self, state):
        self.rule = getattr(self, "rule", _StopRowZero())
        state.draft_exit = self.rule
        state.set_draft_budget([4] * state.batch_size)
        draft = super().propose(state)
        self.sizes = getattr(self, "sizes", []) + [draft.sizes()]
        return draft


@pytest.mark.parametrize("goodput_exit", [True, False])
def test_layer_skip_stops_a_row_where_the_exit_says_and_stays_lossless(goodput_exit: bool):
    model = tiny_model("llama", layers=3)
    prompts = [[5, 6, 7, 8, 9, 10], [40, 41, 42]]
    drafter = _Scripted(LayerSkipOptions(skip={"attention": [2], "mlp": [1]}, max_draft=4, adaptive=False,
                                         goodput_exit=goodput_exit))
    out = specdec.generate(model, prompts, drafter=drafter, verifier="exact", max_new_tokens=12, eos_token_id=[])
    for prompt, got in zip(prompts, out.sequences):
        assert got == hf_greedy(model, prompt, 12)
    if not goodput_exit:
        assert not drafter.rule.asked and max(s[0] for s in drafter.sizes) > 2
        return
    assert drafter.rule.asked and all(sizes[0] <= 2 for sizes in drafter.sizes)
    assert max(sizes[1] for sizes in drafter.sizes) > 2
    for depth, scores, rows in drafter.rule.asked:
        assert 1 <= depth < 4 and all(0.0 < s <= 1.0 for s, r in zip(scores, rows) if r)
        assert depth < 3 or not rows[0]  # a row the exit stopped is not asked again


def test_chains_under_the_controllers_exit_say_they_follow_it_and_the_controller_is_told(monkeypatch):
    """`Drafter.follows_exit`: the controller lets only those chains reach past their planned length
    (tests/test_controller.py), so a drafter that would draft to a longer budget without asking must say no."""
    def draft_model(**options):
        return DraftModelDrafter(DraftModelOptions(**options))

    assert draft_model().follows_exit()
    assert not draft_model(goodput_exit=False).follows_exit()
    assert not draft_model(schedule="heuristic").follows_exit()
    assert not draft_model(branches=2, branch_depth=1).follows_exit()  # trees keep their shape
    skip = {"attention": [2], "mlp": [1]}
    assert LayerSkipDrafter(LayerSkipOptions(skip=skip)).follows_exit()
    assert not LayerSkipDrafter(LayerSkipOptions(skip=skip, goodput_exit=False)).follows_exit()
    assert not LayerSkipDrafter(LayerSkipOptions(skip=skip, schedule="own")).follows_exit()
    told = []

    class Recording(GoodputController):
        def __init__(self, members, *args, **kwargs):
            told.append({member.name: member.follows_exit for member in members})
            super().__init__(members, *args, **kwargs)

    monkeypatch.setattr(engine, "GoodputController", Recording)
    model = tiny_model("llama", layers=3)
    for goodput_exit in (True, False):
        drafter = LayerSkipDrafter(LayerSkipOptions(skip=skip, goodput_exit=goodput_exit))
        specdec.generate(model, [[5, 6, 7]], drafter=drafter, max_new_tokens=4, eos_token_id=[])
    specdec.generate(model, [[5, 6, 7]], drafter="anpd", max_new_tokens=4, eos_token_id=[])
    assert told == [{"layer_skip": True}, {"layer_skip": False}, {"anpd": False}]
