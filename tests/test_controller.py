"""The goodput controller's parts on synthetic costs: cost curves, acceptance estimates, plans, cuts,
probes, and that frozen decisions never move with wall-clock timings."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from conftest import tiny_model
from hypothesis import given, settings
from hypothesis import strategies as st

import specdec
from specdec import costs as costs_module
from specdec.acceptance import DECAY, FADE_FLOOR, PRIOR_FIRST, PRIOR_NEXT, PRIOR_WEIGHT, RowAcceptance
from specdec.controller import (
    BATCH_MARGIN,
    BATCH_PREPARE_STEPS,
    BATCH_QUIET_MAX,
    BATCH_QUIET_STEPS,
    CHEAP_DRAFT,
    FIRST_PROBE_STEPS,
    FIRST_REST,
    FREE_NODES,
    LEARN_EVERY,
    PROBE_STREAK,
    QUIET_SAMPLE,
    SLOT_LOOK_LOSS,
    STATIC_WORTH_FLOOR,
    ControllerOptions,
    GoodputController,
    LiveBatch,
    Member,
    Plan,
    _Items,
    _SlotLook,
    lane_ends,
    last_chances,
    row_weights,
)
from specdec.costs import (
    DRAFT_FEATURES,
    DRAFT_RIDGE,
    CostModel,
    CostTable,
    LinearFit,
    VerifyCurve,
    context_band,
    cost_model_for,
    draft_features,
    ragged_contexts,
)
from specdec.draft import Draft, ExtraSlots, Verdict

# A CPU-like verification curve at batch 1: one input 10 ms, 2-9 inputs 14 ms, then +1 ms per 8 inputs.
GRID = (0, 1, 2, 4, 8, 16, 32, 64)
CPU_LIKE = (0.010, 0.014, 0.014, 0.014, 0.015, 0.016, 0.018, 0.022)


def synthetic(curve=CPU_LIKE, batch: int = 1, draft: tuple[float, float, float] | None = None,
              name: str = "d") -> CostModel:
    model = CostModel("test")
    model.live.curves[(True, batch)] = VerifyCurve(batch, GRID, tuple(curve))
    if batch != 1:
        model.live.curves[(True, 1)] = VerifyCurve(1, GRID, tuple(curve))
    if draft is not None:
        fit = LinearFit(DRAFT_FEATURES)
        for nodes in (1, 2, 3, 5, 8) * 4:  # measured drafts of several lengths, costing `draft` exactly
            fit.update(draft_features(nodes, nodes), draft[0] + (draft[1] + draft[2]) * nodes)
        model.live.drafters[name] = fit
    return model


def controller(model: CostModel, live: bool = True, members=None, **options) -> GoodputController:
    table = model.table() if live else model.snapshot()
    members = list(members) if members is not None else [Member("d", False)]
    return GoodputController(members, model, table, live, True, ControllerOptions(**options))


def chain(tokens: list[list[int]]) -> Draft:
    return Draft.from_rows([(row, list(range(-1, len(row) - 1))) for row in tokens])


def verdict(accepted: list[int], width: int) -> Verdict:
    path = torch.full((len(accepted), max(width, 1)), -1, dtype=torch.long)
    for b, count in enumerate(accepted):
        path[b, :count] = torch.arange(count)
    return Verdict(path, torch.tensor(accepted), torch.zeros(len(accepted), dtype=torch.long))


def step(ctl: GoodputController, rows: list[int], proposal: list[list[int]], accepted: list[int],
         timings: dict | None = None):
    plan = ctl.plan(rows, [100] * len(rows), 64)
    proposal = [row[: plan.budget[b]] for b, row in enumerate(proposal)]
    draft, cut = ctl.cut(chain(proposal), plan, 0.0)
    kept = draft.num_nodes.tolist()
    ctl.observe(plan, cut, verdict([min(a, k) for a, k in zip(accepted, kept)], draft.width), timings or {})
    return plan, draft


def test_verify_curve_interpolates_and_extrapolates():
    curve = VerifyCurve(1, (0, 2, 4), (1.0, 2.0, 2.0))
    assert curve.at(1) == pytest.approx(1.5)
    assert curve.at(3) == pytest.approx(2.0)
    assert curve.at(10) == pytest.approx(2.0)  # flat last segment: never cheaper, not steeper
    table = CostTable(curves={(True, 1): VerifyCurve(1, (0, 8), (1.0, 2.0)),
                              (True, 2): VerifyCurve(2, (0, 8), (3.0, 4.0))})
    assert table.verify(1, 5) == pytest.approx(1.5)  # 4 extra inputs at batch 1
    # batch 2 is measured; batch 1.5 does not exist, but batch 2 with extra 0 is 3.0
    assert table.verify(2, 2) == pytest.approx(3.0)


@settings(max_examples=60, deadline=None)
@given(batch=st.integers(1, 12), first=st.integers(0, 40), count=st.integers(1, 70),
       context=st.one_of(st.none(), st.floats(0, 3000)), packed=st.booleans(), learnt=st.integers(0, 6))
def test_prices_in_one_call_equal_prices_one_at_a_time(batch, first, count, context, packed, learnt):
    """The controller prices every prefix at once (`verify_from`, `draft_chain`): the same numbers as asking
    `verify` and `draft` for each, between measured batch buckets, behind any context, and after the
    model learnt (its memo of the curves is dropped when they move)."""
    model = CostModel("test")
    for bucket, short, long in ((1, CPU_LIKE, 2.0), (4, tuple(3 * x for x in CPU_LIKE), 2.5),
                                (8, tuple(5 * x for x in CPU_LIKE), 3.0), (16, tuple(9 * x for x in CPU_LIKE), 3.5)):
        model.live.curves[(True, bucket)] = VerifyCurve(bucket, GRID, short, 32, 512, tuple(long * x for x in short))
    table = model.table()
    first = max(first, batch)
    for _ in range(2):
        got = table.verify_from(batch, first, count, packed, context)
        assert got == pytest.approx([table.verify(batch, first + k, packed, context) for k in range(count)], rel=1e-9)
        for k in range(learnt):  # the next round reads the moved curves
            model.observe_verify(batch, batch + 3 * k, packed, 0.05 * (1 + k), context)
    fit = LinearFit(DRAFT_FEATURES)
    for nodes in (1, 2, 5, 9):
        fit.update(draft_features(nodes, nodes, 40.0), 0.001 + 0.002 * nodes)
    table.drafters["d"] = fit
    assert table.draft_chain("d", count, 40.0) == pytest.approx([table.draft("d", k, k, 40.0) for k in range(count)])


def test_static_batch_tokens_are_worth_the_seconds_they_save():
    assert row_weights([10, 10], [1.0, 1.0], True, 0.001, 0.02) == ([1.0, 1.0], None)  # prompts wait
    weights, base = row_weights([30, 10, 10], [1.0, 1.0, 1.0], False, 0.001, 0.02)
    assert base == 0.02  # a plain step is worth what it costs, and the weights sum to it
    assert weights == pytest.approx([0.001 + (0.02 - 3 * 0.001), 0.001, 0.001], abs=1e-5)
    # Three tied for last: each is as likely to end the batch; their tokens are worth alike, a third of the end each
    # (before stop 63 only with the others' first-node acceptance: 0.5^2 each, and tied rows never drafted).
    weights, base = row_weights([30, 30, 30], [1.0, 1.0, 1.0], False, 0.001, 0.02)
    assert weights == pytest.approx([0.001 + 0.017 / 3] * 3) and sum(weights) == pytest.approx(base)
    # Rows are projected at the batch's mean pace (here 2), not at their own: the row with most tokens left is
    # last, though drafted lately (pace 3: at its own pace it would end first and row 1 alone last). A token is
    # worth what it is at any pace: a plain step's is not divided by the pace either (before stop 63 a drafted
    # token's was, and a batch whose drafts paid stopped drafting).
    weights, _ = row_weights([60, 30, 10], [3.0, 1.0, 2.0], False, 0.001, 0.02)
    assert weights == pytest.approx([0.001 + 0.017, 0.001, 0.001], abs=1e-5)
    # Two rows a token apart: with many tokens left either may end the batch (their ends spread over the steps
    # left); with few left the one behind almost surely does.
    early, _ = row_weights([40, 39], [1.0, 1.0], False, 0.001, 0.02)
    late, _ = row_weights([3, 2], [1.0, 1.0], False, 0.001, 0.02)
    assert early[1] < early[0] < 0.001 + 0.018 * 0.6 and late[0] > 0.001 + 0.018 * 0.75


def test_the_chance_of_ending_the_batch_follows_the_ends_and_their_spread():
    assert sum(last_chances([12.0, 30.0, 29.0, 5.0])) == pytest.approx(1.0)
    assert last_chances([20.0] * 4) == pytest.approx([0.25] * 4)
    far = last_chances([101.0, 21.0, 21.0, 21.0])
    assert far[0] == pytest.approx(1.0) and max(far[1:]) < 1e-6
    near, wide = last_chances([4.0, 3.0]), last_chances([64.0, 63.0])
    assert near[0] > wide[0] > 0.5  # a step apart matters less the more steps are left to spread over


def test_the_last_wave_of_a_continuous_batch_ends_where_the_last_waiting_prompts_do():
    """With no more prompts waiting than rows, the first rows to finish hand their places on, and the batch ends
    with the lanes those prompts extend; with more waiting than rows, every token counts alike."""
    assert lane_ends([31.0, 11.0, 21.0], [25]) == [31.0, 36.0, 21.0]
    assert lane_ends([31.0, 11.0, 21.0], [25, 5]) == [31.0, 36.0, 26.0]
    assert row_weights([10, 30, 20], [1.0] * 3, [25, 25, 25, 25], 0.001, 0.02) == ([1.0] * 3, None)
    # Row 1 finishes first and its place takes the waiting prompt: that place most likely ends the batch, not row
    # 0's own end (36 steps against 31).
    weights, base = row_weights([30, 10, 20], [1.0] * 3, [25], 0.001, 0.02)
    assert base == 0.02 and weights[1] > 0.001 + 0.017 * 0.75 and weights[0] < 0.001 + 0.017 * 0.25
    assert weights[2] == pytest.approx(0.001, abs=1e-5)
    assert row_weights([30, 10, 20], [1.0] * 3, [], 0.001, 0.02) == row_weights([30, 10, 20], [1.0] * 3, False,
                                                                                0.001, 0.02)
    # As many prompts waiting as rows, all of one size: every place ends together, each as likely to end last.
    tied, _ = row_weights([63, 63], [1.0, 1.0], [64, 64], 0.001, 0.02)
    assert tied == pytest.approx([0.001 + 0.018 / 2] * 2)


def test_a_static_batch_drafts_for_the_row_that_ends_it():
    """In a static batch a token of a row that is not last only lets that row leave a step sooner (here 1
    ms of a 13 ms step); drafts pay for the row the batch waits for, and rows tied for last draft as if every
    token counted alike."""
    model = CostModel("test")
    for bucket, curve in ((1, CPU_LIKE), (2, (0.011, 0.0125, 0.014, 0.017, 0.023, 0.035, 0.059, 0.107)),
                          (4, (0.013, 0.0145, 0.016, 0.019, 0.025, 0.037, 0.061, 0.109))):
        model.live.curves[(True, bucket)] = VerifyCurve(bucket, GRID, curve)

    def kept(remaining: list[int], waiting: bool | list[int] = False) -> list[int]:
        ctl = controller(model)
        plan = ctl.plan([0, 1, 2, 3], remaining, 64, waiting)
        draft, _ = ctl.cut(chain([[1, 2, 3]] * 4), plan, 0.0)
        return draft.num_nodes.tolist()

    straggler = kept([100, 20, 20, 20])
    assert straggler[0] >= 1 and straggler[1:] == [0, 0, 0]
    alike = kept([50, 50, 50, 50], waiting=True)  # while prompts wait, every token counts alike
    assert sum(alike) > 0
    assert kept([50, 50, 50, 50], waiting=[64] * 5) == alike  # more than a wave waits: alike too
    # Rows tied for last are each as likely to end the batch: drafted as if tokens counted alike (before stop 63
    # a tied row's token moved the end only with the others' first-node acceptance, and none drafted), in a
    # static batch and in a continuous batch's last wave whose places all end together.
    assert kept([50, 50, 50, 50]) == alike
    assert kept([50, 50, 50, 50], waiting=[64] * 4) == alike
    handing_on = kept([20, 50, 50, 50], waiting=[64])  # row 0's place, taken by the prompt, ends the batch
    assert handing_on[0] >= 1 and handing_on[1:] == [0, 0, 0]


def test_a_static_batch_prices_a_row_cut_for_another_again_next_step():
    """A row cut to nothing because another row's nodes paid better is priced again at the next step: in a static
    batch the row ahead is the last once the other's draft is accepted. (Kept quiet for a few steps, as rows the
    batch's pricing made plain are, the two rows of static batches of 2 drafted in turn, one a step.)"""
    model = synthetic(batch=2, draft=(0.0026, 0.0, 0.0001))  # a costly drafter: planned before it drafts
    ctl = controller(model)
    first = ctl.plan([0, 1], [12, 6], 64, waiting=False)
    assert first.budget[0] > 0 and first.choice[1] is None  # row 0 ends the batch: only its draft pays
    draft, cut = ctl.cut(chain([[1] * first.budget[0], []]), first, 0.0)
    ctl.observe(first, cut, verdict([first.budget[0], 0], draft.width), {})
    second = ctl.plan([0, 1], [3, 5], 64, waiting=False)  # row 0's draft was accepted: row 1 is last now
    assert second.choice[1] == "d" and second.budget[1] > 0


def test_a_static_batch_is_priced_in_seconds_on_steps_where_a_probe_is_due():
    """Whether prompts wait decides what a token is worth; a row's due probes must not stand in for it (they
    once did, through a reused name: a static batch was then priced in tokens on every step where the last
    row priced had a probe due)."""
    model = synthetic(batch=2, draft=(0.03, 0.0, 0.005))  # a costly drafter: rows decode plainly and probe it
    ctl = controller(model, probe_after=1, max_probe_interval=2, probe_share=1.0)
    probes = priced = 0
    for _ in range(60):
        plan = ctl.plan([0, 1], [100, 100], 64, waiting=False)
        probes += sum(plan.probe)
        if any(name is not None for name in plan.choice):  # (a plan where no row drafts weighs nothing)
            priced += 1
            assert plan.base is not None and all(w < 0.5 for w in plan.weights)  # seconds, not one token each
        draft, cut = ctl.cut(chain([list(range(1, 1 + b)) for b in plan.budget]), plan, 0.0)
        ctl.observe(plan, cut, verdict([0, 0], draft.width), {})
    assert probes > 0 and priced > 0


def test_a_probe_in_a_batch_waits_for_the_rows_share_of_the_step():
    """A probe holds up every row of a batch: at batch 8, where a plain step costs twice a lone one, a row's
    share of it is a quarter of a lone step, so each row probes a costly drafter about a quarter as often."""
    model = synthetic(draft=(0.004, 0.0, 0.001))
    model.live.curves[(True, 8)] = VerifyCurve(8, GRID, tuple(2 * x for x in CPU_LIKE))
    model.live.curves[(True, 4)] = VerifyCurve(4, GRID, tuple(1.5 * x for x in CPU_LIKE))

    def probes_per_row(rows: int) -> float:
        ctl = controller(model, probe_after=1, max_probe_interval=4, probe_share=0.1, chain_probe_share=0.1)
        for row in range(rows):  # a drafter known to be wrong: it is only ever probed
            ctl._row(row).estimates["d"] = RowAcceptance(prior=[0.05], weight=50.0)
        probes = 0
        for _ in range(300):
            plan = ctl.plan(list(range(rows)), [1000] * rows, 64, waiting=True)
            probes += sum(plan.probe)
            draft, cut = ctl.cut(chain([list(range(1, 1 + b)) for b in plan.budget]), plan, 0.0)
            ctl.observe(plan, cut, verdict([0] * rows, draft.width), {})
        return probes / rows

    alone, batched = probes_per_row(1), probes_per_row(8)
    assert alone >= 8 and batched < 0.5 * alone


def test_a_costly_chains_failed_probes_space_out_by_their_loss_alone():
    """A costly drafter without prompt slots (a draft model) backs off through its probes' expected loss
    (`_probe_wait`), not by doubling its interval as well: where a one-node probe costs little it comes every
    `probe_after` steps however often it failed (doubled to 64 steps, answers that had turned repetitive were
    found 16-64 steps late)."""
    flat = (0.010, 0.0102, 0.0104, 0.0108, 0.0116, 0.0132, 0.0164, 0.0228)  # +2% a verified input
    ctl = controller(synthetic(flat, draft=(0.003, 0.0, 0.0002)), probe_after=4, max_probe_interval=64,
                     chain_probe_share=0.5,  # not a free drafter: a draft costs a third of a plain step
                     max_probe_discount=1.0)  # (not the failed probes' streak)
    ctl._row(0).estimates["d"] = RowAcceptance(prior=[0.02], weight=50.0)  # known to lose a little
    probes = 0
    for _ in range(200):
        plan = ctl.plan([0], [1000], 64)
        probes += sum(plan.probe)
        assert plan.budget[0] == (1 if plan.probe[0] else 0)  # only ever probed, one node at a time
        draft, cut = ctl.cut(chain([list(range(1, 1 + plan.budget[0]))]), plan, 0.0)
        ctl.observe(plan, cut, verdict([0], draft.width), {})
    assert probes >= 30  # ~every fifth step (4, 8, ..., 64 steps apart: 7 probes)


def test_a_batch_verifies_a_draft_only_when_it_clearly_pays():
    """`_solve`'s margin: in a batch a draft must promise BATCH_MARGIN more than a plain step; alone, any gain."""
    flat = (0.010, 0.0102, 0.0104, 0.0108, 0.0116, 0.0132, 0.0164, 0.0228)  # +2% a verified input
    ctl = controller(synthetic(flat, batch=2))
    rows = [_Items([0.1], [1], 0, member="d"), _Items([], [], 0)]
    assert ctl._solve(rows, 2, 0.0, None) == [1, 0]  # 2.1 tokens for 2% more time: 3% more a second
    assert ctl._solve(rows, 2, 0.0, None, margin=BATCH_MARGIN) == [0, 0]
    rows = [_Items([0.95, 0.9, 0.9], [1, 1, 1], 0, member="d"), _Items([], [], 0)]
    assert ctl._solve(rows, 2, 0.0, None, margin=BATCH_MARGIN) == [3, 0]  # a clear gain is kept


@settings(max_examples=200, deadline=None)
@given(probs=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=24), data=st.data(),
       base=st.integers(0, 3), weight=st.floats(0.1, 4.0), draft=st.floats(0.0, 0.02),
       overheads=st.tuples(st.floats(0.0, 0.004), st.floats(0.0, 0.004)),
       corrections=st.lists(st.floats(0.5, 2.0), min_size=3, max_size=3),
       context=st.one_of(st.none(), st.floats(0.0, 2000.0)))
def test_one_row_is_cut_where_the_general_search_cuts_it(probs, data, base, weight, draft, overheads, corrections,
                                                          context):
    """`_solve_row` (the cut of a row alone) keeps the prefix `_solve` keeps for that row: same nodes, forced or not,
    whatever the curve's corrections, the overheads and the row's extra slots."""
    model = synthetic((0.010, 0.0135, 0.0131, 0.014, 0.0152, 0.016, 0.019, 0.022))  # dips: corrections can too
    for point, factor in zip((1, 3, 5), corrections):
        model.live.corrections[(True, 1, point, context_band(context))] = factor
    model.live.overheads[("d", False)], model.live.overheads[("d", True)] = overheads
    ctl = controller(model)
    sizes = data.draw(st.lists(st.integers(1, 3), min_size=len(probs), max_size=len(probs)))
    forced = data.draw(st.integers(0, len(probs)))
    items = _Items(probs, sizes, base, forced, "d", weight, context)
    assert ctl._solve_row(items, draft) == ctl._solve([items], 1, draft)[0]


def test_a_live_batch_measures_the_curve_of_one_row_fewer():
    """What a row leaving a static batch saves is read from the curves at B and B - 1 rows: measuring only
    B's priced it as nothing."""
    model = tiny_model("llama")
    costs = CostModel("test")
    prompts = [[1, 2, 3, 4], [5, 6, 7], [8, 9, 10, 11, 12], [13, 14]]
    specdec.generate(model, prompts, drafter="anpd", max_new_tokens=4, eos_token_id=[], cost_model=costs)
    assert {(True, 4), (True, 2)} <= set(costs.live.curves)


def test_a_live_batch_measures_every_size_it_can_shrink_to_at_its_first_step():
    """A batch whose rows all end together still measures the curves of the smaller sizes a later call's batch
    shrinks through, at its first step: before, a batch of 8 measured 4 and 8 rows, and the 2-row curve came due
    in whichever later call first fell to 4 rows, inside its timed steps."""
    model = tiny_model("llama")
    costs = CostModel("test")
    prompts = [[1 + row, 2, 3, 4 + row] for row in range(8)]
    specdec.generate(model, prompts, drafter="anpd", max_new_tokens=3, eos_token_id=[], cost_model=costs)
    assert {(True, 1), (True, 2), (True, 4), (True, 8)} <= set(costs.live.curves)


def test_linear_fit_learns_a_drafters_cost():
    fit = LinearFit(3, forgetting=0.99)
    for nodes in [1, 2, 3, 4, 5, 6, 1, 3, 5] * 5:
        fit.update([1.0, nodes, nodes], 0.002 + 0.004 * nodes)
    assert fit.predict([1.0, 4, 4]) == pytest.approx(0.018, rel=0.05)


def test_a_draft_learnt_from_lone_chains_prices_a_batch_by_its_forwards():
    """At batch 1 a chain's levels equal its nodes, so its timings cannot split a draft's cost between forwards and
    rows; the fit puts it on the forwards (`DRAFT_RIDGE`) and lets a batch's own drafts move it. Split equally (one
    ridge for all), a batch of 4 was priced at 1.8x what it cost, and no batch draft was ever tried."""
    def seconds(levels: int, nodes: int) -> float:  # a small draft model: 1.4 ms a forward, 0.2 ms a row in it
        return 0.0005 + 0.0014 * levels + 0.0002 * nodes

    costs = CostModel("test")
    for k in [1, 2, 3, 5, 7, 4, 2, 6] * 6:
        costs.observe_draft("d", k, k, seconds(k, k), 0.0, 100.0)
    table = costs.table()
    # batch 1: as measured, up to the constant's ridge (its 0.5 ms fixed part a little shrunk)
    assert table.draft("d", 3, 3, 0.0, 100.0) == pytest.approx(seconds(3, 3), rel=0.05)
    truth = seconds(3, 12)
    assert 0.7 * truth < table.draft("d", 3, 12, 0.0, 100.0) < 1.05 * truth  # batch 4, before any batch draft
    equal = LinearFit(DRAFT_FEATURES)  # the single ridge's split
    for k in [1, 2, 3, 5, 7, 4, 2, 6] * 6:
        equal.update(draft_features(k, k, 0.0, 100.0), seconds(k, k))
    assert equal.predict(draft_features(3, 12, 0.0, 100.0)) > 1.5 * truth
    for k in [1, 3, 2, 4]:  # a few drafts of a batch of 4 bring its price to what it costs
        costs.observe_draft("d", k, 4 * k, seconds(k, 4 * k), 0.0, 100.0)
    assert costs.table().draft("d", 3, 12, 0.0, 100.0) == pytest.approx(truth, rel=0.1)


def test_a_drafter_drafting_one_length_does_not_learn_a_fixed_cost_from_drift():
    """A drafter whose chains are all about one length (layer_skip's 9-12 levels in repetitive answers) cannot tell a
    fixed cost from a per-level one, and the machine's slow drift decided it: a sweep's fit read 16.6 ms fixed and 2.5 ms
    a level where drafts took ~5 ms a level, priced a one-node probe at twice a plain step, and a row that went plain
    waited longer than its request for its next probe. With the constant's ridge (`DRAFT_RIDGE`) a short chain is priced near its
    forwards; with none, two of these four drifting runs price it below half or above 1.5x of them."""
    per_level = 0.0055
    for seed in range(4):
        rng = np.random.default_rng(seed)
        fit, drift = LinearFit(DRAFT_FEATURES, ridge=DRAFT_RIDGE), 0.0
        for _ in range(300):
            drift = 0.9 * drift + rng.normal(0.0, 0.08)
            levels = int(rng.choice([12, 12, 11, 10, 12, 9]))
            lag = max(1, levels - int(rng.integers(0, 3)))
            fit.update(draft_features(levels, levels, lag, 300.0), per_level * levels * math.exp(drift + rng.normal(0.0, 0.1)))
        assert 0.5 * per_level < fit.predict(draft_features(1, 1, 2, 300.0)) < 1.5 * per_level
        assert fit.predict(draft_features(11, 11, 10, 300.0)) == pytest.approx(11 * per_level, rel=0.35)


def test_a_drafter_with_nothing_to_catch_up_on_is_not_priced_a_whole_prompt_of_catch_up():
    """A new row's catch-up is its whole prompt (a draft model feeds it first), priced by the drafter's fit along
    the lag it saw between drafts. layer_skip's lag is 1-12 tokens and its fit drifted along it (a sweep's read
    0.47 ms a lag token): behind a 1000-token document its first draft was priced at several plain steps, and every
    summarization request of one repeat decoded plainly, 0 probes: where the pooled estimates said plain, the first
    probe (`FIRST_PROBE_SHARE`) cost more than the request may lose to it. A drafter that reads only the target's
    cache and logits (`Drafter.catches_up` False) is priced no catch-up and probes within FIRST_PROBE_STEPS; one that
    catches up, fitted the same, stays plain (what the flag changes)."""
    def first_drafted_step(catches_up: bool) -> int | None:
        model = synthetic()
        fit = model.live.drafters["d"] = LinearFit(DRAFT_FEATURES, ridge=DRAFT_RIDGE)
        for levels in (9, 10, 11, 12) * 8:  # ~5 ms a level, and 0.5 ms a lag token (lag: the last chain + 1)
            lag = levels - 1
            fit.update(draft_features(levels, levels, lag, 1000.0), 0.005 * levels + 0.0005 * lag)
        ctl = controller(model, members=[Member("d", False, catches_up=catches_up)])
        ctl.pooled["d"] = RowAcceptance(prior=[0.3] * 12)  # earlier requests: a draft does not pay here
        for index in range(2 * FIRST_PROBE_STEPS):
            plan = ctl.plan([0], [128 - index], 64, contexts=[1000.0 + index])
            draft, cut = ctl.cut(chain([list(range(1, plan.budget[0] + 1))]), plan, 0.0)
            ctl.observe(plan, cut, verdict([draft.num_nodes.tolist()[0]], draft.width), {})
            if plan.budget[0]:
                return index
        return None

    assert first_drafted_step(catches_up=False) <= FIRST_PROBE_STEPS
    assert first_drafted_step(catches_up=True) is None


def test_acceptance_estimates_move_with_verdicts_and_stay_monotone():
    est = RowAcceptance()
    prior = est.probs(4)
    assert prior == sorted(prior, reverse=True)
    for _ in range(6):
        est.observe([-1, 0, 1], [True, True, False])
    after = est.probs(4)
    assert after[0] > prior[0] and after[2] < prior[2]
    assert after == sorted(after, reverse=True)
    # Conditionals: verdicts at the first position move every deeper node of a chain.
    chain = RowAcceptance()
    for _ in range(6):
        chain.observe([-1], [True])
    assert chain.probs(5)[4] > RowAcceptance().probs(5)[4]
    scored = RowAcceptance()
    for _ in range(10):
        scored.observe_scores([0.4, 0.5])
        scored.observe([-1, 0], [True, False])
    better, usual, worse = (scored.node_probs([-1, 0], s) for s in ([0.8, 0.9], [0.4, 0.5], [0.1, 0.2]))
    assert better[0] > usual[0] > worse[0] and usual == pytest.approx(scored.probs(2))


def test_unverified_deeper_positions_are_not_held_down_by_a_pessimistic_prior():
    # A pooled prior that says the fifth node is a coin flip must not keep a row that accepts its first four
    # every time from ever trying a fifth: past its deepest verified position a chain is taken as no worse.
    # (for drafters whose length is planned before drafting; a free drafter's cut keeps the prior)
    row = RowAcceptance(prior=[0.9, 0.9, 0.9, 0.9, 0.3, 0.3])
    for _ in range(10):
        row.observe([-1, 0, 1, 2], [True] * 4)
    assert row.conditional(4, explore=True) >= row.conditional(3) > 0.95
    assert row.probs(6, explore=True)[5] > 0.9 > 0.5 > row.probs(6)[5]
    # ... and a sibling (not a chain extension) keeps its own prior
    assert row.node_probs([-1, 0, 1, 2, 2], explore=True)[4] == pytest.approx(row.node_probs([-1, 0, 1])[2] * 0.3)
    ctl = controller(synthetic(draft=(0.0, 0.0, 0.0015)))  # a costly drafter: its length is planned
    pooled = RowAcceptance(prior=[0.9, 0.9, 0.9, 0.9, 0.2, 0.2, 0.2, 0.2])
    ctl.pooled["d"] = pooled
    for _ in range(12):
        plan, _ = step(ctl, [0], [list(range(1, 13))], [12])
    assert plan.budget[0] > 4


def test_an_explored_position_accepted_the_first_time_is_not_priced_lower_for_it():
    """A chain position verified for the first time enters with the prior pseudo-counts it was priced at (no less
    likely than its parent, for a drafter whose length is planned), not the pooled prior's: entered at the pooled prior,
    a node fell on being accepted (1.0 -> 0.71 under 0.5), and layer_skip's chains stopped at seven."""
    row = RowAcceptance(prior=[0.95] * 6 + [0.5] * 6)
    chain = list(range(-1, 11))
    for _ in range(3):
        row.observe(chain[:6], [True] * 6, age=True)
    before = row.conditional(6, True, row.conditional(5, True, 1.0))
    row.observe(chain[:7], [True] * 7, age=True)
    assert row.conditional(6, True, row.conditional(5, True, 1.0)) >= before > 0.95
    rejected = copy.deepcopy(row)
    rejected.observe(chain[:8], [True] * 7 + [False], age=True)
    assert rejected.conditional(7, True, rejected.conditional(6, True, 1.0)) < 0.7  # a rejection still counts at once
    free = RowAcceptance(prior=[0.95] * 6 + [0.5] * 6)  # a free drafter's (not explored) keeps the prior
    free.observe(chain[:7], [True] * 7)
    assert free.conditional(6) == pytest.approx((0.5 * PRIOR_WEIGHT * DECAY + 1) / (PRIOR_WEIGHT * DECAY + 1))


def test_a_deeper_position_not_verified_lately_is_tried_again():
    # Regression: a draft model whose second token failed twice early was then held at one token a step
    # for 60 steps accepting every first token: the second position's counts never moved again.
    row, free = RowAcceptance(), RowAcceptance()
    for _ in range(4):
        row.observe([-1, 0], [True, False], age=True)
        free.observe([-1, 0], [True, False])
    stale = row.conditional(1)
    assert row.conditional(1, True, row.conditional(0)) < 0.5 * row.conditional(0)
    for _ in range(30):
        row.observe([-1], [True], age=True)
        free.observe([-1], [True])
    assert row.conditional(1) == pytest.approx(stale)  # the counts age, their ratio stays
    parent = row.conditional(0)
    assert row.conditional(1, True, parent) > 0.8 * parent  # explored: back to its parent's estimate
    assert row.probs(2, explore=True)[1] > 0.8 * parent * parent
    row.observe([-1, 0], [True, False], age=True)  # verified again and rejected: down again at once
    assert row.conditional(1, True, parent) < 0.6 * parent
    # A free drafter's counts do not age: one verdict after a quiet spell moves its estimate as little as ever.
    free.observe([-1, 0], [True, True])
    assert free.conditional(1) < 0.5
    # In the controller (a costly drafter, its length planned before drafting): the row drafts two again.
    ctl = controller(synthetic(draft=(0.0, 0.0, 0.0015)))
    budgets = []
    for _ in range(40):
        plan, _ = step(ctl, [0], [list(range(1, 13))], [1])  # the first token accepted, the second never
        budgets.append(plan.budget[0])
    late = budgets[20:]
    assert 1 <= sum(b >= 2 for b in late) <= len(late) // 3  # tried again now and then, not every step


def test_a_chain_that_follows_the_exit_reaches_past_its_planned_length_where_the_draft_is_sure():
    # A draft model accepting 6 of 6 every other step and 2 of 6 otherwise, 4 ms a drafted token: its third token is
    # a coin flip, and its plan keeps 3. Its exit, which reads this step's scores, may draft on to the positions it
    # priced (the most the row proposed, 6, plus two): where the first three are drafted surer than usual, to all
    # eight; where they are as sure as usual, it stops where the plan did.
    planned = controller(synthetic(draft=(0.0, 0.0, 0.004)))
    planned.pooled["d"] = RowAcceptance(prior=[0.95] * 8)
    for accepted in [6, 2] * 6:
        step(planned, [0], [[1] * 6], [accepted])
    planned.rows[0].estimates["d"].score_mean = [0.5] * 8  # the draft's usual confidence at every depth
    reaching = copy.deepcopy(planned)
    reaching.members["d"].follows_exit = True
    keep = copy.deepcopy(planned).plan([0], [100], 64).budget[0]
    plan = copy.deepcopy(reaching).plan([0], [100], 64)
    assert keep == 3 and plan.budget == [8]
    assert copy.deepcopy(reaching).plan([0], [2], 64).budget == [2]  # never past the tokens left
    usual, sure = copy.deepcopy(plan.exit), copy.deepcopy(plan.exit)
    assert [usual.keep_drafting(depth, [0.5])[0] for depth in range(1, 4)] == [True, True, False]
    assert all(sure.keep_drafting(depth, [1.0])[0] for depth in range(1, 8))
    assert not sure.keep_drafting(8, [1.0])[0]


def test_a_new_request_probes_a_drafter_that_earlier_requests_gave_up_on():
    # Regression: after one request lowered a costly drafter's pooled estimate, every later request started
    # plain and waited ~100 steps for a probe (its whole loss against 1% of the row's time), so no verdict
    # ever moved the pooled estimate again: layer_skip decoded summarization and qa prompts plainly.
    model = synthetic(draft=(0.0, 0.0, 0.002))  # 2 ms a drafted node against a ~10 ms step
    model.live.acceptance["d"] = RowAcceptance(prior=[0.1, 0.5], weight=50.0)
    ctl = controller(model)
    pooled = ctl.pooled["d"].conditional(0)
    plans = [step(ctl, [0], [list(range(1, 9))], [8])[0] for _ in range(24)]
    assert plans[0].choice == [None]  # the pooled estimate says the drafter does not pay
    first = next(i for i, plan in enumerate(plans) if plan.choice == ["d"])
    # Probed early: its one-token probe is expected to lose ~0.2 of a plain step, a tenth of even a 3-token answer,
    # so it comes after the first interval, not after FIRST_PROBE_STEPS.
    assert plans[first].probe == [True] and first <= ctl.options.probe_after + 1
    assert ctl.pooled["d"].conditional(0) > pooled  # the verdict reaches what the next request starts from
    # A probe expected to lose more than a plain step waits FIRST_PROBE_STEPS, so that a short answer (translation's
    # 9-11 tokens) does not pay for it.
    dear_model = synthetic(draft=(0.0, 0.0, 0.015))
    dear_model.live.acceptance["d"] = RowAcceptance(prior=[0.1, 0.5], weight=50.0)
    dear = controller(dear_model)
    plans = [step(dear, [0], [list(range(1, 9))], [8])[0] for _ in range(24)]
    first = next(i for i, plan in enumerate(plans) if plan.choice == ["d"])
    assert plans[first].probe == [True] and FIRST_PROBE_STEPS <= first <= FIRST_PROBE_STEPS + 1
    # Once the row has its own verdicts, failed probes wait as long as their loss says.
    again = controller(model)
    plans = [step(again, [0], [list(range(1, 9))], [0])[0] for _ in range(64)]
    assert sum(plan.probe[0] for plan in plans) <= 3


def test_a_relaxed_estimate_starts_part_of_the_way_back_where_an_unseen_one_starts():
    estimate = RowAcceptance(prior=[0.5, 0.5])
    for _ in range(20):
        estimate.observe([-1, 0], [True, False])
    learnt = [estimate.conditional(i) for i in range(2)]
    assert learnt[0] > PRIOR_FIRST and learnt[1] < 0.1
    relaxed = estimate.relaxed(0.25)
    assert [relaxed.conditional(i) for i in range(2)] == pytest.approx(
        [0.75 * learnt[0] + 0.25 * PRIOR_FIRST, 0.75 * learnt[1] + 0.25 * PRIOR_NEXT])
    # Upwards only (drafter="auto"'s members): a first node learnt likelier than the start stays.
    upwards = estimate.relaxed(0.25, down=False)
    assert [upwards.conditional(i) for i in range(2)] == pytest.approx([learnt[0], 0.75 * learnt[1] + 0.25 * PRIOR_NEXT])
    assert [estimate.relaxed(0.0).conditional(i) for i in range(2)] == pytest.approx(learnt)
    assert relaxed.weight == estimate.weight and relaxed.decay == estimate.decay
    # A drafter that scores its nodes starts from its mean scores, and relaxes towards them (a PPD tree's siblings
    # have small chances, not 60% each: relaxed towards the default prior, ppd drafted where it lost).
    scored = RowAcceptance()
    scored.observe_scores([0.3, 0.1])
    for _ in range(20):
        scored.observe([-1], [False])
    assert scored.relaxed(1.0).conditional(0) == pytest.approx(scored.score_mean[0])
    assert scored.relaxed(1.0).conditional(1) == pytest.approx(scored.score_mean[1])


def test_an_auto_members_optimism_no_verdict_reached_stays_and_a_lone_drafters_relaxes():
    """drafter="auto": a member the rows did not draft with was beaten by another, not judged against plain decoding;
    relaxed down, layer_skip's pooled estimate fell over math calls that drafted with anpd and draft_model and the
    first RAG call did without it. A lone drafter's estimate moves back down (its optimism bought probes that lost)."""
    kept = {}
    for members in (["d"], ["d", "e"]):
        model = synthetic()
        model.live.acceptance["d"] = RowAcceptance(prior=[0.95, 0.95], weight=50.0)
        ctl = controller(model, members=[Member(name, False) for name in members])
        ctl._steps = 64  # a call of 64 steps in which no verdict on "d" reached its pooled estimate
        ctl.finish()
        kept[len(members)] = model.live.acceptance["d"].conditional(0)
    assert kept[2] == pytest.approx(0.95) and kept[1] == pytest.approx(0.5 * 0.95 + 0.5 * PRIOR_FIRST)


def test_a_pooled_estimate_no_verdict_reached_moves_back_towards_the_default_prior(monkeypatch):
    """Once rows stop drafting on a pessimistic pooled estimate, nothing moved it again: in batches of 2 (a new
    call per batch) no call after the fourth drafted. A call that took no verdict on a drafter hands the next one
    its pooled estimate relaxed; one that took verdicts hands on what it learnt."""
    from specdec import controller as goodput

    def calls(count: int) -> list[int]:
        model = synthetic(batch=2, draft=(0.004, 0.0, 0.001))
        model.live.acceptance["d"] = RowAcceptance(prior=[0.1, 0.3], weight=50.0)
        drafted = []
        for _ in range(count):  # batches of 2 rows, 48 tokens each; every drafted node would be accepted
            ctl = controller(model)
            steps = 0
            for _ in range(48):
                plan = ctl.plan([0, 1], [48, 48], 64, waiting=True)
                draft, cut = ctl.cut(chain([list(range(1, 1 + b)) for b in plan.budget]), plan, 0.0)
                kept = draft.num_nodes.tolist()
                ctl.observe(plan, cut, verdict(kept, draft.width), {})
                steps += any(kept)
            learnt = ctl.pooled["d"]
            ctl.finish()
            stored = model.live.acceptance["d"]
            if steps:
                assert stored is learnt
            else:
                share = 1 - (1 - goodput.POOLED_RELAX) ** (48 / goodput.RELAX_STEPS)  # this share per 48 steps
                assert stored.conditional(0) == pytest.approx((1 - share) * learnt.conditional(0) + share * PRIOR_FIRST)
            drafted.append(steps)
        return drafted

    relaxed = calls(8)
    assert relaxed[0] == 0 and relaxed[-1] > 40
    monkeypatch.setattr(goodput, "POOLED_RELAX", 0.0)
    assert calls(8) == [0] * 8
    # A drafter whose look needs prompt slots (PPD) keeps its estimate: whether its tree pays is the device's.
    monkeypatch.setattr(goodput, "POOLED_RELAX", 0.5)
    model = synthetic(draft=(0.004, 0.0, 0.001))
    model.live.acceptance["d"] = RowAcceptance(prior=[0.1, 0.3], weight=50.0)
    ctl = controller(model)
    ctl.pooled_extras["d"] = (2.0, 0.0)
    for _ in range(48):
        plan = ctl.plan([0], [48], 64)
        draft, cut = ctl.cut(chain([[]]), plan, 0.0)
        ctl.observe(plan, cut, verdict([0], draft.width), {})
    ctl.finish()
    assert model.live.acceptance["d"] is ctl.pooled["d"]
    model.live.extras.clear()
    ctl = controller(model)  # nor after a call of no steps
    ctl.finish()
    assert model.live.acceptance["d"] is ctl.pooled["d"]


def test_evidence_fades_between_verdicts_so_one_verdict_after_a_long_wait_decides():
    """Acceptance comes in bursts: a row whose drafts failed for a while and then waited many plain steps
    must take its next verdict seriously. Fading keeps each position's ratio (pricing does not move until
    a verdict) and never drops below FADE_FLOOR trials."""
    failed, faded = RowAcceptance(), RowAcceptance()
    for est in (failed, faded):
        for _ in range(10):
            est.observe([-1, 0], [False, False], age=True)
    before = faded.conditional(0)
    faded.fade(30)
    assert faded.conditional(0) == pytest.approx(before)
    assert min(faded.trials) >= FADE_FLOOR - 1e-9 and faded.trials[0] < failed.trials[0]
    faded.fade(0)
    for est in (failed, faded):
        est.observe([-1], [True], age=True)
    assert failed.conditional(0) < 0.25 < 0.5 < faded.conditional(0)
    # In the controller: a costly drafter (1 ms + 1 ms a node against a 10 ms step) rejected twelve times, then
    # probed after a wait of 8 steps and its one-node probe accepted, drafts again at once (unfaded, the old
    # failures kept the row plain after that probe).
    ctl = controller(synthetic(draft=(0.001, 0.0, 0.001)), probe_after=8, max_probe_interval=8, chain_probe_share=0.5)
    outcomes = iter([0] * 12 + [1] * 600)  # rejected, then its first token right again
    next_plan = None
    for index in range(600):
        plan = ctl.plan([0], [1000], 64)
        if next_plan == index:
            break
        draft, cut = ctl.cut(chain([list(range(1, 1 + plan.budget[0]))]), plan, 0.0)
        accepted = next(outcomes) if plan.budget[0] else 0
        ctl.observe(plan, cut, verdict([min(accepted, draft.width)], draft.width), {})
        if plan.probe[0] and accepted and next_plan is None:
            assert ctl.rows[0].since["d"] == 0 and plan.budget[0] == 1
            next_plan = index + 1
    assert next_plan is not None and plan.choice == ["d"] and plan.budget[0] >= 1


def test_a_plain_row_keeps_probing_while_its_catch_up_grows():
    """A draft model feeds every token committed since it last drafted (its catch-up), so a plain row's next
    draft costs more the longer it waits. Priced at the current lag, the wait grew faster than it ran and the
    row never probed again; priced at one interval's catch-up, probes keep coming, spaced by their loss, also
    in a lone row where the drafter was never right (a translation that turns repetitive after its first drafts
    failed). In a live batch, where every probe holds up the other rows, only rows where the drafter was right
    get that price: with it everywhere, draft_model's probes at batch 4 and 8 took it from 1.00x to 0.83-0.95x
    of batched plain decoding."""
    model = synthetic()
    fit = LinearFit(DRAFT_FEATURES)
    for nodes, lag in [(1, 1), (2, 5), (3, 20), (5, 60), (8, 2), (1, 100), (2, 40), (4, 10)] * 4:
        # 2 ms a node, 0.2 ms a catch-up token: twice 1% of a 10 ms plain step
        fit.update(draft_features(nodes, nodes, lag), 0.002 * nodes + 0.0002 * lag)
    model.live.drafters["d"] = fit

    def run(right_at_first: bool, rows: int = 1, steps: int = 1500) -> tuple[list[int], GoodputController]:
        model.live.acceptance["d"] = RowAcceptance(prior=[0.9, 0.9], weight=2.0)
        ctl = controller(model)
        seen, drafted = [], 0
        for index in range(steps):
            accepted = 8 if right_at_first and drafted < 2 else 0  # right twice, then never again
            plan, _ = step(ctl, list(range(rows)), [list(range(1, 9))] * rows, [accepted] * rows)
            drafted += plan.budget[0] > 0
            if plan.probe[0]:
                seen.append(index)
        return seen, ctl

    for right_at_first in (True, False):
        seen, _ = run(right_at_first)
        assert len(seen) >= 4 and seen[-1] > 1000
        assert min(b - a for a, b in zip(seen, seen[1:])) >= 16  # still held to their loss
    # In a batch of two where the drafter drafted and was never right, the next probe runs ahead of the wait.
    _, ctl = run(False, rows=2, steps=600)
    row = ctl.rows[0]
    assert row.due["d"] > row.since["d"] + 500


def test_a_costly_chains_probes_in_a_lone_row_take_their_own_steady_share():
    """A costly chain drafter's wait in a row priced alone never doubles, so its failed probes cost a steady
    share of the row's time: `chain_probe_share`, not `probe_share` (which is where waits that double start).
    Three times the share, a third of the wait, and a row whose drafter is never right probes about three
    times as often, until its failed probes' streak brings the share back to `probe_share` (on a model where
    the drafter never pays, probing at 3% cost draft_model 3%); a live batch's probe, a free drafter's and one
    that needs prompt slots keep `probe_share`."""
    model = synthetic(draft=(0.0, 0.0, 0.004))  # 4 ms a node against a 10 ms plain step: a probe loses
    model.live.curves[(True, 4)] = VerifyCurve(4, GRID, (0.020, 0.023, 0.026, 0.030, 0.036, 0.04, 0.05, 0.07))
    items = _Items([0.1, 0.05], [1, 1], 0, member="d")
    option = (items, 2, 0.0, 2)
    batch = LiveBatch(4, None, 0.005, 0.020)
    low, high = controller(model, chain_probe_share=0.01), controller(model, chain_probe_share=0.03)
    assert low._probe_wait(option) > 10
    assert high._probe_wait(option) == pytest.approx(low._probe_wait(option) / 3)
    assert controller(model, chain_probe_share=0.005)._probe_wait(option) == pytest.approx(2 * low._probe_wait(option))
    assert low._probe_wait(option, batch=batch) > 0
    assert high._probe_wait(option, batch=batch) == pytest.approx(low._probe_wait(option, batch=batch))
    assert high._probe_wait(option, costly=False) == pytest.approx(low._probe_wait(option, costly=False))
    slots = (_Items([0.1, 0.05], [1, 1], 3, member="d"), 2, 0.0, 2)
    assert low._probe_wait(slots) > 0
    assert high._probe_wait(slots) == pytest.approx(low._probe_wait(slots))

    def probes(**options) -> int:
        model.live.acceptance["d"] = RowAcceptance(prior=[0.1, 0.1], weight=2.0)
        model.live.probe_streaks.clear()
        ctl = controller(model, **options)
        return sum(step(ctl, [0], [list(range(1, 9))], [0])[0].probe[0] for _ in range(1200))

    rare = probes(chain_probe_share=0.01, max_probe_discount=1.0)
    often = probes(chain_probe_share=0.03, max_probe_discount=1.0)
    assert rare >= 5 and 2.0 * rare <= often <= 4.0 * rare
    # Probes that keep failing (`_probe_discount`) bring the share back down to probe_share, not below it.
    assert rare <= probes(chain_probe_share=0.03) < 0.5 * often
    assert probes(chain_probe_share=0.01) == rare


def test_a_probe_in_a_live_batch_is_priced_at_the_batch_step():
    """A probe in a live batch makes every row's step dearer: it pays what its inputs add to the batch's forward,
    against its tokens at the row's share of a plain step. A probe that pays for itself alone (a lone plain step
    is worth twice a row's share here) waits in a batch of four, and waits the longer the dearer its inputs
    make the batch's forward. Priced as the row alone it never waited, and draft_model's probes took it to
    0.83-0.95x of batched plain decoding at batch 4 and 8."""
    model = synthetic(draft=(0.0, 0.0, 0.001))  # 1 ms a node; a lone plain step 10 ms, 2 extra inputs 14 ms
    model.live.curves[(True, 4)] = VerifyCurve(4, GRID, (0.020, 0.023, 0.026, 0.030, 0.036, 0.04, 0.05, 0.07))
    ctl = controller(model)
    items = _Items([0.5, 0.4], [1, 1], 0, member="d")
    option = (items, 2, 0.0, 2)
    assert ctl._probe_wait(option) == 0.0  # alone: 12 ms for 1.9 tokens against 10 ms a token
    share = ctl.options.probe_share
    row_share = 0.020 / 4
    # in the batch: 2 ms of draft and 6 ms of forward for 0.9 tokens at 5 ms
    assert ctl._probe_wait(option, batch=LiveBatch(4, None, row_share, 0.020)) == pytest.approx(
        (0.002 + 0.006 - 0.9 * row_share) / (share * row_share))
    model.live.curves[(True, 4)] = VerifyCurve(4, GRID, (0.020, 0.021, 0.022, 0.024, 0.03, 0.04, 0.05, 0.07))
    model.live.changed()
    assert ctl._probe_wait(option, batch=LiveBatch(4, None, row_share, 0.020)) == 0.0  # 4 ms for 0.9 tokens: pays


def test_a_free_drafters_first_probe_is_not_held_back():
    """The first probe of a free drafter (anpd: a lookup, one node verified) in a row that would not draft
    comes after the first interval, not after FIRST_PROBE_STEPS: it costs next to nothing, and held back
    anpd lost 10% of its speedup on Spec-Bench."""
    model = synthetic(draft=(0.0001, 0.0, 0.00001))  # a lookup: free
    model.live.acceptance["d"] = RowAcceptance(prior=[0.1, 0.5], weight=50.0)
    ctl = controller(model)
    plans = [step(ctl, [0], [list(range(1, 9))], [0])[0] for _ in range(3 * FIRST_PROBE_STEPS)]
    assert "d" in ctl._cheap_drafters()
    first = next(i for i, plan in enumerate(plans) if plan.probe[0])  # after its looks' first rest
    assert first < FIRST_PROBE_STEPS


def test_low_acceptance_decodes_plainly_high_acceptance_drafts_long():
    ctl = controller(synthetic())
    for _ in range(20):
        plan, draft = step(ctl, [0], [[1, 2, 3, 4, 5, 6, 7]], [0])
    # a free drafter (no cost of its own) still proposes every step; the cut verifies none of it
    assert int(draft.num_nodes[0]) == 0 or plan.probe == [True]
    assert ctl.stats()["no_draft_share"] > 0.5
    costly = controller(synthetic(draft=(0.002, 0.0, 0.002)))
    for _ in range(20):
        plan, _ = step(costly, [0], [[1, 2, 3, 4, 5, 6, 7]], [0])
    assert plan.budget == [0] or plan.probe == [True]  # a costly one is not even asked
    good = controller(synthetic())
    for _ in range(8):
        plan, _ = step(good, [0], [[1, 2, 3, 4, 5, 6, 7]], [7])
    assert plan.budget[0] >= 7


def test_a_drafters_own_cost_shortens_its_drafts():
    # 4 ms per drafted node against ~1 ms of verify per extra input: long drafts stop paying.
    free, costly = controller(synthetic()), controller(synthetic(draft=(0.0, 0.0, 0.004)))
    for ctl in (free, costly):
        for _ in range(10):
            step(ctl, [0], [[1] * 12], [3])
    assert costly.plan([0], [100], 64).budget[0] < free.plan([0], [100], 64).budget[0]


def test_a_costly_drafter_measured_at_one_length_is_not_taken_for_free():
    # Regression: a draft model that always drafted 12 tokens (8 ms, 0.8 of a plain step) gave the fit no
    # slope; its one-token extrapolation read as free, so it was asked for 12 tokens every step.
    model = synthetic()
    fit = LinearFit(DRAFT_FEATURES)
    for _ in range(10):
        fit.update(draft_features(12, 12, 1.0), 0.008)
    model.live.drafters["d"] = fit
    assert model.live.draft("d", 1, 1) < CHEAP_DRAFT * model.live.verify(1, 1)  # the fit's own guess: free
    plan = controller(model).plan([0], [100], 64)
    assert plan.free == [False] and plan.budget[0] < 12


def test_a_drafter_whose_free_looks_cost_a_lot_is_not_free_again():
    # Regression: a draft model asked for one token a step (12% of a plain step) read as free, so it was asked
    # for FREE_NODES tokens (one forward each), mostly rejected, then priced again and cut back, and so on.
    model = synthetic()
    step_seconds = model.live.verify(1, 1)
    ctl = controller(model)
    cheap_draft = {"verify": step_seconds, "draft_by_member": {"d": (1, 1, 0.12 * step_seconds)}}
    plan, _ = step(ctl, [0], [[1] * FREE_NODES], [0], cheap_draft)
    assert plan.free == [True]  # unmeasured: it looks once
    look = {"verify": step_seconds, "draft_by_member": {"d": (FREE_NODES, FREE_NODES, 0.9 * step_seconds)}}
    plan, _ = step(ctl, [0], [[1] * FREE_NODES], [2], look)
    assert plan.free == [True]
    assert model.live.look_cost("d") == pytest.approx(0.9 * step_seconds)  # learnt at once
    for _ in range(3 * LEARN_EVERY):  # its planned one-token drafts are cheap: the mean falls under the line
        plan, _ = step(ctl, [0], [[1] * FREE_NODES], [1], cheap_draft)
        assert plan.free == [False] and plan.budget[0] < FREE_NODES
    assert model.live.draft_mean("d") < CHEAP_DRAFT * step_seconds
    # A lookup stays free through one slow look (the median of the last few counts).
    lookup = synthetic()
    for seconds in (0.02, 0.03, 0.9, 0.02):
        lookup.observe_look("d", seconds * step_seconds)
        lookup.observe_draft("d", 4, 4, seconds * step_seconds)
    assert controller(lookup).plan([0], [100], 64).free == [True]
    # ... and is not judged by its young fit's extrapolation to a free look's size (that made anpd costly
    # after its first drafts, so planned from estimates it never drafted again, and the fit never moved).
    young = synthetic()
    young.observe_draft("d", 1, 1, 0.01 * step_seconds)
    young.observe_draft("d", 3, 3, 0.05 * step_seconds)
    assert young.live.draft("d", FREE_NODES, FREE_NODES) > CHEAP_DRAFT * step_seconds
    assert controller(young).plan([0], [100], 64).free == [True]


def test_a_drafter_kept_from_looking_by_its_last_looks_looks_again_in_the_next_call():
    # Regression: on a small model anpd's looks once cost a little over the line, and a drafter that no longer
    # looks never measures its looks again: it was planned from its estimates for the rest of the process.
    model = synthetic()
    step_seconds = model.live.verify(1, 1)
    line = CHEAP_DRAFT * step_seconds
    for _ in range(5):
        model.observe_look("d", 1.5 * line)
        model.observe_draft("d", 4, 4, 0.5 * line)
    lookup = {"verify": step_seconds, "draft_by_member": {"d": (4, 4, 0.5 * line)}}
    ctl = controller(model)
    for _ in range(2 * LEARN_EVERY):  # it looks again, and its looks now cost little: it stays free
        plan, _ = step(ctl, [0], [[1, 2, 3, 4]], [2], lookup)
        assert plan.free == [True]
    assert model.live.look_cost("d") < line
    # Once per call: looks that cost over the line again keep it from looking for the rest of the call.
    again = synthetic()
    for _ in range(5):
        again.observe_look("d", 1.5 * line)
        again.observe_draft("d", 4, 4, 0.5 * line)
    ctl = controller(again)
    costly_look = {"verify": step_seconds, "draft_by_member": {"d": (4, 4, 1.5 * line)}}
    plan, _ = step(ctl, [0], [[1, 2, 3, 4]], [2], costly_look)
    assert plan.free == [True]
    plans = [step(ctl, [0], [[1, 2, 3, 4]], [2], lookup)[0] for _ in range(LEARN_EVERY)]
    assert not any(p.free[0] for p in plans)
    # Looks far over the line (a draft model's) are not tried again.
    far = synthetic()
    for _ in range(5):
        far.observe_look("d", 4 * line)
        far.observe_draft("d", 1, 1, 0.5 * line)
    assert controller(far).plan([0], [100], 64).free == [False]


def test_a_drafters_first_timing_is_learnt_at_once():
    """Timings are learnt in batches of LEARN_EVERY steps, but a drafter's first at once: an unmeasured
    drafter gets one free look, and a costly one is planned from the very next step."""
    model = synthetic()
    ctl = controller(model)
    timings = {"verify": 0.014, "other": 0.0005, "draft_by_member": {"d": (12, 12, 0.008)}}
    plan, _ = step(ctl, [0], [[1] * 12], [0], timings)
    assert plan.free == [True] and "d" in model.live.drafters
    assert ctl.plan([0], [100], 64).free == [False]
    before = model.live.verify(1, 1)
    # Slower forwards, drafts all accepted (the row keeps drafting, so every step's timings are kept): learnt
    # only once LEARN_EVERY steps are kept.
    for _ in range(LEARN_EVERY - 1):
        step(ctl, [0], [[1] * 12], [12], {**timings, "verify": 0.05})
    assert model.live.verify(1, 1) == before
    step(ctl, [0], [[1] * 12], [12], {**timings, "verify": 0.05})
    assert model.live.verify(1, 1) > 1.5 * before


def test_quiet_rows_are_planned_plainly_and_learnt_from_one_step_in_a_few():
    """A row priced as plain stays plain without being priced again, and of such steps the cost model learns
    from one in QUIET_SAMPLE (on the 1 ms step of a small model, learning from every one cost 0.7%)."""
    model = synthetic(draft=(0.02, 0.0, 0.002))  # a costly drafter: 20 ms a draft against a 10 ms step
    ctl = controller(model, probe_after=1024, max_probe_interval=1024)
    steps = 4 * LEARN_EVERY * QUIET_SAMPLE
    plans, timed = [], 0
    for _ in range(steps):
        plan = ctl.plan([0], [100], 64)
        # The engine reads its clock only for the steps whose timings are kept (None otherwise: observe would
        # fail on a kept step that was not timed).
        kept = ctl.keeps_timings(plan)
        draft, cut = ctl.cut(Draft.empty(1), plan, 0.0)
        ctl.observe(plan, cut, verdict([0], 0), {"verify": 0.010, "other": 0.0005} if kept else None)
        plans.append(plan)
        timed += kept
    assert all(plan.choice == [None] for plan in plans)
    assert sum(plan.quiet for plan in plans) >= steps - steps // 16
    learnt = model.live.overhead_samples[("d", False)] + len(ctl._unlearnt) // 2
    assert steps / QUIET_SAMPLE <= learnt <= steps / QUIET_SAMPLE + steps // 16
    assert timed == learnt
    # A frozen call learns no timings: none of its steps is timed.
    frozen = controller(synthetic(draft=(0.02, 0.0, 0.002)), live=False)
    assert not frozen.keeps_timings(frozen.plan([0], [100], 64))


def test_a_quiet_run_is_observed_as_its_steps_one_by_one():
    # Quiet steps of the same rows are planned without checks and observed at the run's end (`_settle`):
    # what the rows and the stats hold afterwards is what step-by-step observation gave.
    model = synthetic(draft=(0.02, 0.0, 0.002))  # a costly drafter: 20 ms a draft against a 10 ms step
    ctl = controller(model, probe_after=1024, max_probe_interval=1024)
    steps = 100
    plans = []
    for index in range(steps):
        plan = ctl.plan([0], [steps - index], 64, contexts=[50 + index])
        draft, cut = ctl.cut(Draft.empty(1), plan, 0.0)
        ctl.observe(plan, cut, verdict([0], 0), {"verify": 0.010, "other": 0.0005})
        plans.append(plan)
    assert all(plan.choice == [None] for plan in plans) and sum(plan.quiet for plan in plans) >= steps - 4
    stats = ctl.stats()
    assert stats["row_steps"] == stats["plain_row_steps"] == steps
    assert sum(stats["plain_reasons"].values()) == steps
    row = ctl.rows[0]
    assert row.since["d"] == steps and row.lag["d"] == 50 + steps
    assert row.pace == pytest.approx(1.0)


def test_a_row_kept_off_a_free_drafter_with_prompt_slots_is_quiet():
    # PPD costs nothing to draft but its look needs prompt slots in the forward, so it is never a free look;
    # a row priced as plain from it takes the quiet path (it was priced every step: ~1% of each plain step).
    ctl = controller(synthetic(), probe_after=1024, max_probe_interval=1024)
    assert ctl._cheap_drafters() == frozenset({"d"})
    row = ctl._row(0)
    row.root_extras["d"], row.quiet = 3.0, 5
    plan = ctl.plan([0], [100], 64)
    assert plan.quiet and plan.choice == [None] and row.quiet == 4
    row.root_extras["d"] = 0.0  # the same drafter without slots looks for free: never quiet
    assert not ctl.plan([0], [100], 64).quiet


def test_a_free_drafter_rests_after_looks_that_are_cut_not_after_finding_nothing():
    # Looks whose drafts are cut to nothing cost a lookup, a check and a cut every step: the row rests.
    cut_away = controller(synthetic(), probe_after=1024, max_probe_interval=1024)
    for _ in range(30):
        step(cut_away, [0], [[1, 2, 3, 4, 5, 6, 7]], [0])
    assert cut_away.counts["plain_reasons"].get("free drafter resting after fruitless looks", 0) > 0
    # Finding nothing to propose (anpd on text that does not repeat) costs next to nothing: no rest, so the
    # first repetition is seen at once.
    empty = controller(synthetic(), probe_after=1024, max_probe_interval=1024)
    for _ in range(30):
        step(empty, [0], [[]], [0])
    assert "free drafter resting after fruitless looks" not in empty.counts["plain_reasons"]
    plan, draft = step(empty, [0], [[1, 2, 3]], [3])
    assert plan.free == [True] and plan.budget[0] >= 3


BATCH_REST_REASON = "batch resting from the free drafter: its looks did not pay"


def batch_step(ctl: GoodputController, left: list[int], accepted: list[int], waiting: bool | list[int],
               seconds: float) -> Plan:
    """A live batch step of the free drafter "d" proposing 4 tokens a row, timed at `seconds` in all when it
    looked, at the curve's 10 ms when plain."""
    rows = list(range(len(left)))
    plan = ctl.plan(rows, left, 64, waiting)
    proposal = [[1, 2, 3, 4][: plan.budget[b]] for b in rows]
    draft, cut = ctl.cut(chain(proposal), plan, 0.0)
    kept = draft.num_nodes.tolist()
    ctl.observe(plan, cut, verdict([min(a, k) for a, k in zip(accepted, kept)], draft.width),
                {"draft": 0.0, "verify": 0.010 if plan.plain else seconds, "other": 0.0})
    return plan


def test_a_live_batch_rests_from_a_free_drafter_whose_looking_steps_do_not_pay():
    """Looking steps that measure slower than a plain step while the batch's end comes no nearer: the whole
    batch rests from the free drafter, rests doubling, and the next call starts from the longer rest."""
    model = synthetic(batch=2)  # a plain step of 2 rows: 10 ms
    ctl = controller(model, probe_after=1024, max_probe_interval=1024)
    left = [64, 64]
    for _ in range(40):
        batch_step(ctl, left, [4, 0], waiting=False, seconds=0.014)  # row 1 never advances faster
        left = [max(1, left[0] - 5), left[1] - 1]
    assert ctl.counts["plain_reasons"].get(BATCH_REST_REASON, 0) > 0
    assert model.live.batch_rests[("d", 2, True)] > 2 * FIRST_REST  # rests doubled
    # A later call on the same model: its first rest is the one the last call learnt.
    later = controller(model, probe_after=1024, max_probe_interval=1024)
    steps = [not any(batch_step(later, [64, 64], [0, 0], waiting=False, seconds=0.014).budget) for _ in range(40)]
    first_rest = steps[steps.index(True):].index(False)
    assert first_rest > 2 * FIRST_REST


def test_a_continuous_batchs_last_wave_judges_its_looks_on_the_places_ends():
    """The last wave of a continuous batch: row 0 finishes first and hands its place to the waiting prompt, so its
    place ends last; its accepted drafts bring the end nearer though row 1 keeps the most tokens of its own. Its
    looking steps pay (5 plain steps' progress in 1.4 plain steps' time) and the batch never rests from them; the
    same rows with nothing waiting (a static batch, whose end row 1 sets) rest."""
    for waiting, rests in (([60], False), (False, True)):
        model = synthetic(batch=2)
        ctl = controller(model, probe_after=1024, max_probe_interval=1024)
        left = [40, 44]
        for _ in range(7):
            batch_step(ctl, left, [4, 0], waiting=waiting, seconds=0.014)
            left = [left[0] - 5, left[1] - 1]
        assert (ctl.counts["plain_reasons"].get(BATCH_REST_REASON, 0) > 0) is rests


def test_a_weighed_steps_tokens_are_credited_by_the_weights_the_cut_priced_them_with():
    """Rows tied for the end of a static batch: a token of either is credited at once, by its row's chance of being
    last, alike for both (crediting the fall of the last end gave a token ahead of the last row nothing until that
    row caught up); a row far ahead of the last is credited its own place in the step only; and where the batch's
    tokens were found worth less than STATIC_WORTH_FLOOR of the weights' claim in earlier calls
    (`CostTable.static_worth`), the credit is the fall of the end itself."""
    model = synthetic(batch=2)
    model.live.curves[(True, 1)] = VerifyCurve(1, GRID, tuple(0.6 * x for x in CPU_LIKE))  # a row: 0.4 of a step
    ctl = controller(model, probe_after=1024, max_probe_interval=1024)
    tied = ctl.plan([0, 1], [40, 40], 64, False)
    assert tied.base is not None and 0 < tied.marginal < tied.base / 2
    assert ctl._credit(tied, [4, 0]) == pytest.approx(ctl._credit(tied, [0, 4]))
    assert ctl._credit(tied, [4, 0]) > 1.0  # four tokens, half of them the batch's end's
    ahead = ctl.plan([0, 1], [20, 44], 64, False)
    assert ctl._credit(ahead, [4, 0]) == pytest.approx(4 * ahead.marginal / ahead.base, rel=0.01)
    ctl._static_rows = frozenset([0, 1])
    model.live.static_worth[("d", 2)] = (STATIC_WORTH_FLOOR / 2, 1.0)  # (steps moved, steps claimed)
    assert ctl._credit(tied, [4, 0]) == 0.0  # row 1 keeps 39 tokens to go: the end came one step nearer
    assert ctl._credit(tied, [4, 4]) == 4.0


def static_call(model: CostModel, accepts: list[int], left: int = 40) -> GoodputController:
    """A static batch of the free drafter "d" to its end, each row accepting up to `accepts[row]` a step; a row
    leaves when its tokens are done."""
    ctl = controller(model, probe_after=1024, max_probe_interval=1024)
    remaining = {row: left for row in range(len(accepts))}
    ids = list(remaining)
    while ids:
        plan = ctl.plan(ids, [remaining[row] for row in ids], 64, False)
        draft, cut = ctl.cut(chain([[1, 2, 3, 4][: plan.budget[b]] for b in range(len(ids))]), plan, 0.0)
        kept = draft.num_nodes.tolist()
        accepted = [min(accepts[row], k, remaining[row] - 1) for row, k in zip(ids, kept)]
        ctl.observe(plan, cut, verdict(accepted, draft.width),
                    {"draft": 0.0, "verify": 0.010 if plan.plain else 0.011, "other": 0.0})
        for row, a in zip(ids, accepted):
            remaining[row] -= 1 + a
        ids = [row for row in ids if remaining[row] > 0]
    ctl.finish()
    return ctl


def test_a_static_batch_learns_what_its_accepted_tokens_did_to_its_end():
    """Rows that advance together bring the batch's end nearer by what the weights said (worth ~1); a row that
    never accepts sets the end whatever the other accepts, so that batch's tokens were worth less than the weights
    said, and the next call credits its looks with the fall of its end (`_credit`), as does a first call of a
    larger static batch, which has learnt nothing of its own yet."""
    together = synthetic(batch=2)
    for _ in range(2):
        static_call(together, [4, 4])
    moved, claimed = together.live.static_worth[("d", 2)]
    assert claimed > 0 and moved / claimed > 0.8
    lopsided = synthetic(batch=2)
    static_call(lopsided, [4, 0])
    moved, claimed = lopsided.live.static_worth[("d", 2)]
    assert claimed > 0 and moved / claimed < STATIC_WORTH_FLOOR
    ctl = controller(lopsided)
    ctl._static_rows = frozenset(range(4))
    assert ctl._static_worth() == moved / claimed  # a batch of 4 reads what batches of 2 learnt
    fresh = controller(synthetic(batch=2))
    fresh._static_rows = frozenset(range(4))
    assert fresh._static_worth() == 1.0  # nothing learnt: the weights at their word


def test_a_batch_resting_from_its_free_drafter_is_one_quiet_run(monkeypatch):
    """The batch's rest from its free drafter is planned once and observed in bulk, as quiet rows are (each
    resting step planned and observed alone cost ~0.35 ms of host work on this CPU): a run of one plain plan that
    lasts the rest, or until a row has a token left but none to draft, and decides as step-by-step resting did
    (with the cost model held still: the run's steps teach it one in QUIET_SAMPLE)."""

    def run(bulk: bool) -> tuple[list[tuple], list[Plan], dict, list[tuple]]:
        monkeypatch.setattr(GoodputController, "_learn", lambda self: self._unlearnt.clear())
        if not bulk:  # every resting step planned through the pricing loop, as before the quiet run
            monkeypatch.setattr(GoodputController, "_resting_run", lambda *args: None)
        ctl = controller(synthetic(batch=2), probe_after=1024, max_probe_interval=1024)
        left, plans = [64, 70], []  # row 1 is the batch's last and never advances faster; it nears its end
        for _ in range(80):
            plans.append(batch_step(ctl, left, [4, 0], waiting=False, seconds=0.014))
            left = [max(20, left[0] - 5), max(1, left[1] - 1)]
        monkeypatch.undo()
        decided = [(tuple(plan.choice), tuple(plan.budget)) for plan in plans]
        stats = ctl.stats()  # (a run's steps reach its rows when it ends)
        rows = [(dict(row.rest), dict(row.since), dict(row.lag), round(row.pace, 9)) for row in ctl.rows.values()]
        return decided, plans, stats, rows

    decided, plans, stats, rows = run(bulk=True)
    step_by_step = run(bulk=False)
    assert decided == step_by_step[0] and stats == step_by_step[2] and rows == step_by_step[3]
    resting = stats["plain_reasons"].get(BATCH_REST_REASON, 0)
    assert resting >= 2 * 2 * FIRST_REST  # rests were taken, by both rows
    runs = [plan for index, plan in enumerate(plans) if index and plan.quiet and plan is plans[index - 1]]
    assert runs, "no resting step took the run's plan"
    assert 2 * sum(plan.quiet for plan in plans) == resting  # every resting step was one of a run
    assert all(not step_by_step[1][index].quiet for index in range(len(plans)))


def test_a_live_batch_keeps_looking_while_its_looks_bring_its_end_nearer():
    model = synthetic(batch=2)
    static = controller(model, probe_after=1024, max_probe_interval=1024)
    for index in range(14):  # both rows advance 5 tokens a step: the batch's end comes 5 steps nearer
        plan = batch_step(static, [70 - 5 * index] * 2, [4, 4], waiting=False, seconds=0.014)
        assert plan.free == [True, True]
    waiting = controller(model, probe_after=1024, max_probe_interval=1024)
    for _ in range(30):  # prompts wait: every committed token counts, one row's are enough
        plan = batch_step(waiting, [64, 64], [4, 0], waiting=True, seconds=0.014)
        assert plan.free[0]  # (row 1 may rest on its own: its looks are cut away)
    assert BATCH_REST_REASON not in static.counts["plain_reasons"]
    assert BATCH_REST_REASON not in waiting.counts["plain_reasons"]


def test_probes_wait_longer_for_a_drafter_that_must_catch_up_first():
    # A draft model feeds every token committed since it last drafted (at first the whole prompt): behind
    # a long document a row's first probe costs several plain steps, so it comes later (after it, only what
    # the row committed since is left to feed).
    model = synthetic()
    fit = LinearFit(DRAFT_FEATURES)
    for nodes, lag in [(1, 0), (2, 5), (4, 1000), (3, 400), (1, 50), (8, 2)] * 4:
        fit.update(draft_features(nodes, nodes, lag), 0.001 * nodes + 0.00005 * lag)
    model.live.drafters["d"] = fit
    assert model.live.draft("d", 1, 1, 2000) == pytest.approx(0.101, rel=0.05)

    def probes_of_a_new_row(context: int) -> list[int]:
        ctl = controller(model, probe_after=1, max_probe_interval=1024, max_probe_discount=1.0)
        probes = []
        for row, steps in ((0, 100), (1, 200)):  # row 0's failures make the drafter's prior hopeless
            for index in range(steps):
                plan = ctl.plan([row], [steps], 64, contexts=[10 if row == 0 else context])
                draft, cut = ctl.cut(chain([list(range(1, 8))[: plan.budget[0]]]), plan, 0.0)
                ctl.observe(plan, cut, verdict([0], draft.width), {})
                if row == 1 and plan.probe[0]:
                    probes.append(index)
        return probes

    short, long = probes_of_a_new_row(10), probes_of_a_new_row(2000)
    assert len(short) >= 2 and all(index > short[0] + 10 for index in long)  # (here: none in 200 steps)


def test_a_new_rows_probe_pays_the_drafters_prepare_and_learns_what_it_costs():
    # A draft model prefills a row's prompt in `prepare` before it first drafts the row (timed apart from its
    # drafts): behind a 1000-token document that cost ~30 plain steps of a small target, which the first
    # probe of every request paid while the draft never drafted otherwise.
    def first_probe(prepares: list[tuple[int, float]], context: int) -> int | None:
        model = synthetic(draft=(0.0, 0.0, 0.002))
        model.live.acceptance["d"] = RowAcceptance(prior=[0.1, 0.5], weight=50.0)  # the pooled prior: no pay
        for tokens, seconds in prepares:
            model.observe_prepare("d", tokens, seconds)
        ctl = controller(model)
        for index in range(100):
            plan = ctl.plan([0], [100 - index], 64, contexts=[context + index])
            draft, cut = ctl.cut(chain([list(range(1, 9))[: plan.budget[0]]]), plan, 0.0)
            ctl.observe(plan, cut, verdict([0], draft.width), {})
            if plan.probe[0]:
                return index
        return None

    early = FIRST_PROBE_STEPS + 1
    assert first_probe([], 1000) <= early  # its prepare not measured yet: probed early, as before
    per_token = [(1000, 0.03), (100, 0.003)]  # 30 us a token: 30 ms behind 1000 tokens, 3 plain steps
    assert first_probe(per_token, 10) <= early
    late = first_probe(per_token, 1000)
    assert late is None or late > 50

    # Learnt from the engine's timing of the step that first drafts a row (the rows' tokens), and only then:
    model = synthetic(draft=(0.0, 0.0, 0.002))
    ctl = controller(model)
    timings = {"verify": 0.014, "other": 0.0005, "draft_by_member": {"d": (4, 4, 0.008)}, "prepare_by_member": {"d": 0.012}}
    for _ in range(2):
        plan = ctl.plan([0], [100], 64, contexts=[400])
        draft, cut = ctl.cut(chain([[1, 2, 3, 4][: plan.budget[0]]]), plan, 0.0)
        ctl.observe(plan, cut, verdict(draft.num_nodes.tolist(), draft.width), timings)
    ctl.finish()
    assert plan.budget[0] > 0 and plan.prepares == {}  # the second step: the row is prepared
    assert model.live.prepare("d", 400) == pytest.approx(0.012, rel=0.05)
    model.observe_prepare("d", 40, 0.003)  # a fixed part and a part per token
    assert model.live.prepare("d", 40) == pytest.approx(0.003, rel=0.2)
    assert model.live.prepare("d", 4000) > model.live.prepare("d", 400) > model.live.prepare("d", 40)
    assert model.live.prepare("d", 0) == 0.0  # a prepared row: nothing to feed, nothing to pay (not the fixed part)


def test_a_batch_row_starts_a_drafter_only_if_its_prepare_pays_back_soon():
    """In a live batch a draft model's prefill of a row (its prepare) must pay for itself within
    BATCH_PREPARE_STEPS drafted steps, not over all the row's tokens left: whether batch rows draft is decided
    again every step, and rows of a continuous batch of 8 that started a draft model stopped after a few drafted
    steps, having paid prefills that took draft_model to 0.93x of plain decoding."""
    model = synthetic(batch=2, draft=(0.0, 0.0, 0.0005))
    for tokens in (200, 400, 800) * 3:
        model.observe_prepare("d", tokens, 0.00025 * tokens)  # 100 ms for 400 tokens: ten plain steps
    ctl = controller(model)

    def kept(prepare: int, left: float) -> int:
        rows = [_Items([0.9] * 4, [1] * 4, 0, member="d", prepare=prepare, left=left), _Items([], [], 0)]
        return ctl._solve(rows, 2, None, None, BATCH_MARGIN)[0]

    assert kept(0, 1000) == 4  # prepared already: four likely tokens for 2 ms of drafting and 5 ms of forward
    assert kept(400, 20) == 0  # a prefill that twenty tokens cannot pay back
    # Over 1000 tokens left the prefill looked cheap (0.5 ms a step); it has to pay back within 8 drafted steps.
    assert kept(400, 1000) == kept(400, BATCH_PREPARE_STEPS * 4.6) == 0
    assert kept(40, 1000) == 4  # a short prompt's prefill does


def test_each_members_draft_is_priced_on_the_controllers_clock_in_its_share_of_the_step():
    # drafter="auto" times its members itself, on the wall clock when it proposes for itself; the step's drafting
    # is timed by the controller's clock (process CPU time on a 1-thread CPU, the GPU's timeline on CUDA), as the
    # verify curve is. Each member's fit takes its share of the step's seconds, never the other clock's.
    from types import SimpleNamespace

    from specdec.engine import SpeculativeEngine

    auto = SimpleNamespace(name="auto", last_draft_seconds={"d": (3, 3, 0.006), "e": (4, 4, 0.002)})
    engine = SimpleNamespace(drafter=auto)
    costs = SpeculativeEngine._draft_costs(engine, Draft.empty(1), 0.004)
    assert costs == {"d": (3, 3, pytest.approx(0.003)), "e": (4, 4, pytest.approx(0.001))}
    assert auto.last_draft_seconds == {}  # read once per step
    single = SimpleNamespace(drafter=SimpleNamespace(name="anpd"))  # one drafter: the step's seconds are its own
    assert SpeculativeEngine._draft_costs(single, Draft.chain(torch.tensor([[5, 6, 7]]), [3]), 0.002) == {
        "anpd": (3, 3, 0.002)}


def test_each_members_prepare_is_learnt_from_its_own_seconds():
    # With drafter="auto" one step may prepare a draft model (a prefill) and a lookup (a table) at once:
    # shared by tokens, the lookup was priced at half a prefill and never started again.
    from types import SimpleNamespace

    from specdec.engine import SpeculativeEngine

    auto = SimpleNamespace(name="auto", last_prepare_seconds={"d": 0.03, "e": 0.0003})
    engine = SimpleNamespace(_prepares=True, drafter=auto)
    shares = SpeculativeEngine._prepare_costs(engine, 0.0101)  # the step's prepare by the controller's clock
    assert shares == {"d": pytest.approx(0.01), "e": pytest.approx(0.0001)}
    single = SimpleNamespace(_prepares=True, drafter=SimpleNamespace(name="d"))
    assert SpeculativeEngine._prepare_costs(single, 0.01) == {"d": 0.01}
    assert SpeculativeEngine._prepare_costs(SimpleNamespace(_prepares=False, drafter=auto), 0.01) is None

    model = synthetic()
    ctl = controller(model, members=(Member("d", False), Member("e", False)))
    plan = ctl.plan([0], [100], 64, contexts=[500])
    plan.prepares = {"d": 500.0, "e": 500.0}
    _, cut = ctl.cut(Draft.empty(1), plan, 0.0)
    ctl._record(plan, cut, {"prepare_by_member": shares})
    ctl._learn()
    assert model.live.prepare("d", 500) == pytest.approx(0.01, rel=0.05)
    assert model.live.prepare("e", 500) == pytest.approx(0.0001, rel=0.05)


def test_a_drafter_whose_prepare_outweighs_what_it_saves_in_the_tokens_left_is_not_started():
    # The prefill of a draft model behind a long prompt pays back over many tokens, not over a few.
    def first_choice(depth: int, prepare: bool) -> str | None:
        model = synthetic(draft=(0.0, 0.0, 0.001))  # 1 ms a drafted node: the default prior says it pays
        if prepare:
            model.observe_prepare("d", 1000, 0.2)  # 200 ms behind 1000 tokens: 20 plain steps
            model.observe_prepare("d", 100, 0.02)
        return controller(model).plan([0], [depth], 64, contexts=[1000]).choice[0]

    assert first_choice(10, prepare=False) == "d"
    assert first_choice(10, prepare=True) is None
    assert first_choice(1000, prepare=True) == "d"


def test_a_costly_drafter_is_probed_less_where_another_drafter_commits_more():
    # drafter="auto": a probe takes the row from its best drafter for a step, so it costs what that drafter
    # would have committed. Probing a hopeless drafter beside one whose chains are all accepted must wait
    # longer than beside one whose chains are all rejected (the row then decodes plainly).
    model = synthetic()
    for name in ("good", "d"):  # both costly: 4 ms + 1 ms a node against a 10 ms plain step
        fit = LinearFit(DRAFT_FEATURES)
        for nodes in (1, 2, 3, 5, 8) * 4:
            fit.update(draft_features(nodes, nodes), 0.004 + 0.001 * nodes)
        model.live.drafters[name] = fit

    def probes_of_d(good_is_right: bool) -> int:
        ctl = controller(model, members=[Member("good", False), Member("d", False)], probe_after=1,
                         max_probe_interval=4, chain_probe_share=0.1,  # waits set by the probes' expected loss
                         max_probe_discount=1.0)  # (not by failed probes' streak)
        probes = 0
        for _ in range(400):
            plan = ctl.plan([0], [1000], 64)
            proposal = list(range(1, 9))[: plan.budget[0]]
            draft, cut = ctl.cut(chain([proposal]), plan, 0.0)
            kept = int(draft.num_nodes[0])
            right = plan.choice[0] == "good" and good_is_right
            ctl.observe(plan, cut, verdict([kept if right else 0], draft.width), {})
            probes += plan.probe[0] and plan.choice[0] == "d"
        return probes

    beside_plain = probes_of_d(good_is_right=False)
    assert beside_plain >= 10 and probes_of_d(good_is_right=True) < 0.75 * beside_plain


def _measured(model: CostModel, name: str, constant: float, per_node: float) -> None:
    fit = LinearFit(DRAFT_FEATURES)
    for nodes in (1, 2, 3, 5, 8) * 4:
        fit.update(draft_features(nodes, nodes), constant + per_node * nodes)
    model.live.drafters[name] = fit


def test_auto_probes_once_each_drafter_nothing_is_known_of():
    """Priced from the default prior, unmeasured drafters all look alike and the first in order always
    won (auto in a fresh process ran anpd alone). A row probes each drafter nothing is known of, once."""
    timings = {"verify": 0.014, "other": 0.0005}
    ctl = controller(synthetic(), members=[Member("first", False), Member("second", False)],
                     probe_after=1024, max_probe_interval=1024)  # no probes but these
    chosen = []
    for _ in range(12):
        plan = ctl.plan([0], [100], 64)
        name = plan.choice[0]
        chosen.append((name, plan.probe[0]))
        draft, cut = ctl.cut(chain([[1, 2, 3][: plan.budget[0]]]), plan, 0.0)
        ctl.observe(plan, cut, verdict([0], draft.width), {**timings, "draft_by_member": {name: (3, 3, 0.004)}})
    assert chosen[0] == ("second", True)
    assert chosen.count(("second", True)) == 1 and chosen.count(("first", True)) <= 1
    assert sum(probe for _, probe in chosen) == ctl.counts["probes"] <= 2
    # Both measured before the call: no such probe.
    model = synthetic()
    for name in ("first", "second"):
        _measured(model, name, 0.004, 0.001)
    plan = controller(model, members=[Member("first", False), Member("second", False)], probe_after=1024).plan(
        [0], [100], 64)
    assert plan.probe == [False]


def test_a_free_drafter_that_promises_most_looks_in_front_of_a_costly_one():
    """Where a free drafter (a lookup) finds nothing, its row would decode plainly: the best costly
    drafter is the row's plan and the free one looks first (its draft replaces the plan where it promises
    more)."""
    model = synthetic()
    _measured(model, "lookup", 0.00001, 0.0)
    _measured(model, "model", 0.001, 0.0005)
    ctl = controller(model, members=[Member("lookup", False), Member("model", False)], probe_after=1024)
    plan = ctl.plan([0], [100], 64)
    assert plan.choice == ["model"] and plan.look == ["lookup"] and plan.budget[0] > 0
    assert plan.rate[0] > 1.0 / 0.0105  # the costly plan's expected rate, above a plain step's


def test_a_batch_where_no_draft_pays_says_so():
    # A costly drafter that pays for a row alone, in a batch of two where every extra input costs as much as
    # a whole step: the joint pricing keeps nothing, and the reason names the batch's cost, not other rows.
    model = synthetic(draft=(0.002, 0.0, 0.001))
    steep = tuple(0.020 * (1 + extra) for extra in GRID)
    model.live.curves[(True, 2)] = VerifyCurve(2, GRID, steep)
    ctl = controller(model)
    single = ctl.plan([7], [100], 64)
    assert single.budget[0] > 0  # alone, the row drafts
    plan = ctl.plan([0, 1], [100, 100], 64)
    assert plan.budget == [0, 0] and plan.choice == [None, None]
    assert ctl.counts["plain_reasons"] == {"batch: no row's draft pays for its inputs at this batch size": 2}


def test_a_batch_priced_plain_again_stays_plain_longer_each_time():
    """The rows the batch's pricing keeps plain stay quiet BATCH_QUIET_STEPS steps, then twice as long each time
    the same batch is priced plain again, up to BATCH_QUIET_MAX; another batch starts over."""
    model = synthetic(draft=(0.002, 0.0, 0.001))
    model.live.curves[(True, 2)] = VerifyCurve(2, GRID, tuple(0.020 * (1 + extra) for extra in GRID))
    ctl = controller(model, probe_after=1024, max_probe_interval=1024)

    def priced_steps(rows: list[int], steps: int) -> list[int]:
        priced = []
        for index in range(steps):
            plan = ctl.plan(rows, [1000, 1000], 64, waiting=False)
            assert plan.budget == [0, 0]
            if not plan.quiet:
                priced.append(index)
            draft, cut = ctl.cut(chain([[] for _ in rows]), plan, 0.0)
            ctl.observe(plan, cut, verdict([0, 0], draft.width), {})
        return priced

    quiet = [BATCH_QUIET_STEPS * 2 ** k for k in range(8) if BATCH_QUIET_STEPS * 2 ** k <= BATCH_QUIET_MAX]
    waits = quiet + [BATCH_QUIET_MAX] * 2
    starts = [sum(w + 1 for w in waits[:k]) for k in range(len(waits) + 1)]
    assert priced_steps([0, 1], starts[-1]) == starts[:-1]
    assert priced_steps([2, 3], 2 * BATCH_QUIET_STEPS + 2) == [0, BATCH_QUIET_STEPS + 1]  # a new batch


def test_plain_rows_probe_again_with_growing_waits():
    ctl = controller(synthetic(), probe_after=2, max_probe_interval=8, probe_share=0.03)  # waits set by the interval
    probes = []
    for index in range(40):
        plan, _ = step(ctl, [0], [[1, 2, 3]], [0])
        if plan.probe[0]:
            probes.append(index)
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert len(probes) >= 3 and gaps == sorted(gaps) and max(gaps) <= 9


def test_frozen_decisions_ignore_wall_clock():
    """The same verdicts with wildly different timings give the same plans when frozen (a seeded
    sampled call); and the frozen call leaves the cost model as it found it."""
    model_a, model_b = synthetic(), synthetic()
    ctl_a, ctl_b = controller(model_a, live=False), controller(model_b, live=False)
    gen = torch.Generator().manual_seed(0)
    plans_a, plans_b = [], []
    for _ in range(30):
        accepted = [int(torch.randint(0, 5, (1,), generator=gen))]
        plans_a.append(step(ctl_a, [0], [[1, 2, 3, 4, 5, 6]], accepted,
                            {"verify": 0.001, "other": 0.0, "draft_by_member": {"d": (3, 3, 0.0)}})[0].budget)
        plans_b.append(step(ctl_b, [0], [[1, 2, 3, 4, 5, 6]], accepted,
                            {"verify": 5.0, "other": 3.0, "draft_by_member": {"d": (3, 3, 9.0)}})[0].budget)
    assert plans_a == plans_b
    assert model_a.live.scale == {} and model_a.live.drafters == {} and model_a.live.overheads == {}


def test_costs_between_buckets_correct_the_curves_they_are_read_from():
    """A 15-row step is priced mostly from the 16-row curve: its error corrects that curve, not the scale
    shared by every batch size (whose drift past 2x re-measures every curve at the next call)."""
    model = CostModel("test")
    for bucket in (8, 16):
        model.live.curves[(True, bucket)] = VerifyCurve(bucket, GRID, tuple(bucket * x for x in CPU_LIKE))
    table = model.table()
    truth = 1.5 * table.verify(15, 15)
    for _ in range(60):
        model.observe_verify(15, 15, True, truth)
    assert table.verify(15, 15) == pytest.approx(truth, rel=0.05)
    assert table.scale[True] < 1.15


def test_corrections_learnt_behind_long_contexts_do_not_price_short_ones():
    """Per-width corrections are kept per band of context (`context_band`): plain steps behind 1000-token
    documents that cost more than the curve's context line says (most of a RAG request's steps are plain) no
    longer make a short row's plain step dearer than its drafted ones."""
    model = CostModel("test")
    model.live.curves[(True, 1)] = VerifyCurve(1, GRID, CPU_LIKE, 32, 512, tuple(1.2 * x for x in CPU_LIKE))
    table = model.table()
    assert [context_band(c) for c in (None, 40, 127, 128, 511, 512, 1000, 2048, 10**6)] == [0, 0, 0, 1, 1, 2, 2, 3, 3]
    short_plain, short_drafted = table.verify(1, 1, True, 40), table.verify(1, 3, True, 40)
    long_truth = 1.3 * table.verify(1, 1, True, 1000)
    for _ in range(80):  # long rows decode plainly, dearer than priced; short rows draft, as priced
        model.observe_verify(1, 1, True, long_truth, 1000)
        model.observe_verify(1, 3, True, table.verify(1, 3, True, 40), 40)
    assert table.verify(1, 1, True, 1000) == pytest.approx(long_truth, rel=0.05)
    assert table.verify(1, 1, True, 40) < table.verify(1, 3, True, 40)  # a plain step stays the cheaper
    assert table.verify(1, 1, True, 40) / short_plain == pytest.approx(table.verify(1, 3, True, 40) / short_drafted,
                                                                        rel=0.02)
    assert table.verify_from(1, 1, 3, True, 40) == pytest.approx([table.verify(1, w, True, 40) for w in (1, 2, 3)])


def test_a_width_no_step_used_reads_the_corrections_of_its_neighbours():
    """A batch of 8 that learnt a dearer plain step (grid point 0) and drafted steps of 4 to 8 extra inputs never
    priced 1 to 3 extra inputs at the bare curve (8-14% below its plain step after a batching run here): a width
    without a correction of its own reads the nearest learnt ones on either side (`correction_sources`), in both
    ways of pricing, and learning there first starts from that value."""
    model = CostModel("test")
    grid = (0, 1, 2, 3, 4, 8, 16, 32)
    seconds = tuple(1.0 + 0.05 * min(e, 8) for e in grid)
    curve = model.live.curves[(True, 8)] = VerifyCurve(8, grid, seconds)
    table = model.table()
    for _ in range(60):  # plain steps cost 25% more than measured, drafted ones of 4 and 8 extra inputs 6% more
        model.observe_verify(8, 8, True, 1.25 * seconds[0])
        model.observe_verify(8, 12, True, 1.06 * curve.at(4))
        model.observe_verify(8, 16, True, 1.06 * curve.at(8))
    plain = table.verify(8, 8)
    assert [table.verify(8, 8 + e) > plain for e in (1, 2, 3, 4)] == [True] * 4
    factors = [table.verify(8, 8 + e) / (table.scale[True] * curve.at(e)) for e in (0, 1, 2, 3, 4)]
    assert factors == sorted(factors, reverse=True)  # from the plain step's correction down to 4 extra inputs'
    assert table.verify_from(8, 8, 20) == pytest.approx([table.verify(8, 8 + e) for e in range(20)], rel=1e-9)
    before = table.verify(8, 10)
    model.observe_verify(8, 10, True, before)  # first learnt at 2 extra inputs: priced as before, so unchanged
    assert table.verify(8, 10) == pytest.approx(before, rel=1e-9)
    assert table.verify_from(8, 8, 20) == pytest.approx([table.verify(8, 8 + e) for e in range(20)], rel=1e-9)


def test_widths_between_grid_points_are_priced_and_learnt_by_both_neighbours():
    """The learnt corrections never put a step into the curve between grid points: a 7-node chain behind a RAG
    prompt was priced 6.6 ms (a third of a step) above a 6-node one, read from grid point 8's correction where the
    6-node one read point 4's, and layer_skip's exit stopped there with every node accepted. Widths between two
    learnt points read a blend that moves linearly across them, and a step there teaches both."""
    model = CostModel("test")
    grid = (0, 1, 2, 3, 4, 8, 16, 32)
    seconds = tuple(0.010 + 0.0005 * e for e in grid)
    curve = model.live.curves[(True, 1)] = VerifyCurve(1, grid, seconds)
    table = model.table()
    for _ in range(40):  # noise left point 4 reading cheap and point 8 dear
        model.observe_verify(1, 5, True, 0.9 * curve.at(4))
        model.observe_verify(1, 9, True, 1.2 * curve.at(8))
    factors = [table.verify(1, 1 + e) / (table.scale[True] * curve.at(e)) for e in range(4, 9)]
    assert factors[-1] > 1.1 * factors[0]
    rises = [b - a for a, b in zip(factors, factors[1:])]
    assert max(rises) == pytest.approx(min(rises), rel=1e-6)  # linear from 4 to 8 extra inputs, no step
    assert table.verify_from(1, 1, 12) == pytest.approx([table.verify(1, w) for w in range(1, 13)], rel=1e-9)
    fresh = CostModel("test")
    fresh.live.curves[(True, 1)] = curve
    for _ in range(40):  # steps of 6 extra inputs alone, 20% dearer than measured: both neighbours learn what the
        fresh.observe_verify(1, 7, True, 1.2 * curve.at(6))  # curve's level leaves, alike (halfway between them)
    learnt = {point: factor for (_, _, point, _), factor in fresh.live.corrections.items()}
    assert set(learnt) == {4, 5}  # the indices of grid points 4 and 8
    assert min(learnt.values()) == pytest.approx(max(learnt.values())) and min(learnt.values()) > 1.0
    assert fresh.table().verify(1, 7) == pytest.approx(1.2 * curve.at(6), rel=0.05)


def test_step_noise_moves_the_curves_level_more_than_its_shape():
    """Forwards time ~15% apart between repeats on this CPU. With one fast rate per grid point, each point was an
    average of its last few steps, and adjacent widths read 3-5 ms apart in a sweep where timing every width showed
    ~0.5 ms per input; a width choice reads only the differences. The level every width shares takes the common part
    (LEVEL_RATE), the points their own slowly (POINT_RATE): here adjacent widths' priced ratio strays from the true one
    by ~3% (RMS) against ~6% with a rate of 0.25 per point alone."""
    grid = (0, 1, 2, 3, 4, 8, 16, 32)
    truth = VerifyCurve(1, grid, tuple(0.010 + 0.0005 * e for e in grid))
    strays = []
    for seed in range(4):
        rng = np.random.default_rng(seed)
        model = CostModel("test")
        model.live.curves[(True, 1)] = truth
        table = model.table()
        for step_index in range(600):  # half the steps plain, the rest 2 to 4 extra inputs, as a chain's exit does
            extra = int(rng.choice([0, 0, 2, 3, 4]))
            model.observe_verify(1, 1 + extra, True, truth.at(extra) * math.exp(rng.normal(0.0, 0.15)))
            if step_index >= 200:
                priced = [table.verify(1, 1 + e) / truth.at(e) for e in range(5)]
                strays += [math.log(b / a) for a, b in zip(priced, priced[1:])]
    assert math.sqrt(float(np.mean(np.square(strays)))) < 0.04


def test_live_decisions_learn_costs():
    model = synthetic()
    ctl = controller(model)
    for _ in range(20):
        step(ctl, [0], [[1, 2, 3]], [3], {"verify": 0.05, "other": 0.001, "draft_by_member": {"d": (3, 3, 0.002)}})
    ctl.finish()
    assert model.live.scale[True] > 1.2 and "d" in model.live.drafters and model.live.overhead("d") > 0
    assert ("d", True) in model.live.overheads  # learnt as the overhead of steps that verified a draft
    assert model.live.overhead("another drafter") == 0.0  # one drafter's engine work never prices another's
    assert "d" in model.live.acceptance  # the next call's prior


def test_a_drafted_steps_extra_engine_work_is_priced_against_the_draft():
    """Steps that verify a draft cost the engine more (cut, verifier, commit) than plain ones; the two are
    learnt apart, and a draft whose expected gain is smaller than that difference is cut to nothing."""
    model = synthetic()
    model.observe_overhead("d", 0.001, drafted=False)
    assert model.live.overhead("d", drafted=True) == pytest.approx(0.001)  # unseen kind: the other's
    model.observe_overhead("d", 0.004, drafted=True)
    assert model.live.overhead("d", drafted=False) == pytest.approx(0.001)
    assert model.live.overhead("d", drafted=True) == pytest.approx(0.004)
    model.live.curves[(True, 1)] = VerifyCurve(1, GRID, (0.010, 0.0105, 0.011, 0.012, 0.013, 0.014, 0.016, 0.02))

    def kept_after_one_step() -> int:
        ctl = controller(model)  # "d" has no measured draft cost: a free drafter, cut after proposing
        ctl._row(0).estimates["d"] = RowAcceptance(prior=[0.25], weight=100.0)
        _, draft = step(ctl, [0], [[5]], [0])
        return int(draft.num_nodes[0])

    assert kept_after_one_step() == 0  # 1.25 tokens in 10.5 + 4 ms (86/s) < 1 token in 10 + 1 ms (91/s)
    for _ in range(40):
        model.observe_overhead("d", 0.001, drafted=True)
    assert kept_after_one_step() == 1  # the same engine work on both: 1.25 / ~11.9 ms (105/s) > 91/s


def test_frozen_rows_are_planned_alone():
    """Frozen: a row's plan does not depend on the other rows of the batch."""
    model = synthetic(batch=4)
    alone = controller(model, live=False)
    batch = controller(model, live=False)
    for _ in range(6):
        plan_alone, _ = step(alone, [7], [[1, 2, 3, 4]], [2])
        plan_batch, _ = step(batch, [3, 7, 9], [[5], [1, 2, 3, 4], [6, 6]], [0, 2, 1])
        assert plan_batch.budget[1] == plan_alone.budget[0]


def test_scored_tree_keeps_a_connected_best_subtree_and_its_extra_slots():
    ctl = controller(synthetic(curve=(0.010, 0.011, 0.012, 0.014, 0.017, 0.025, 0.04, 0.07)))
    plan = ctl.plan([0], [100], 64)
    for _ in range(5):  # the row's usual scores: 0.5 at every rank
        ctl.rows[0].estimates["d"].observe_scores([0.5] * 4)
    # root -> a (0.9) -> c (0.8); root -> b (0.05) -> d (0.9, capped by b); each node has one extra slot.
    tokens = torch.tensor([[1, 2, 3, 4]])
    parents = torch.tensor([[-1, -1, 0, 1]])
    scores = torch.tensor([[0.9, 0.05, 0.8, 0.9]])
    extra = ExtraSlots(torch.zeros(1, 6, 4), torch.tensor([[-1, -1, 0, 1, 2, 3]]), torch.tensor([6]))
    draft = Draft(tokens, parents, torch.tensor([4]), None, extra, scores)
    plan.budget = [4]
    cut_draft, cut = ctl.cut(draft, plan, 0.0)
    kept = cut_draft.tokens[0, : int(cut_draft.num_nodes[0])].tolist()
    best_first = [kept[i] for i in cut.order[0]]
    assert best_first[:2] == [1, 3] and len(kept) < 4  # a then c first; not all of it
    assert 4 not in kept or 2 in kept  # d never without its parent b
    parents = cut_draft.parents[0, : len(kept)].tolist()
    assert all(p < i for i, p in enumerate(parents))  # a tree, compacted in node order
    assert int(cut_draft.extra.num_slots[0]) == 2 + len(kept)  # root slots + one per kept node
    assert cut_draft.width == len(kept)  # narrowed to the kept nodes


def test_stochastic_drafts_are_cut_only_to_their_budget():
    ctl = controller(synthetic(), members=(Member("d", True),))
    for _ in range(5):
        step(ctl, [0], [[1, 2, 3, 4, 5, 6]], [0])
    plan = ctl.plan([0], [100], 64)
    plan.budget, plan.choice = [3], ["d"]
    q = torch.full((1, 6, 8), 1 / 8)
    draft = Draft.chain(torch.tensor([[1, 2, 3, 4, 5, 6]]), q=q)
    cut_draft, _ = ctl.cut(draft, plan, 0.0)
    assert int(cut_draft.num_nodes[0]) == 3  # exactly the budget fixed before drafting, by node order


def test_plain_rows_drop_their_root_extra_slots():
    ctl = controller(synthetic())
    plan = ctl.plan([0, 1], [100, 100], 64)
    plan.choice, plan.budget = ["d", None], [2, 0]
    extra = ExtraSlots(torch.zeros(2, 2, 4), torch.full((2, 2), -1), torch.tensor([2, 2]))
    draft = Draft(torch.zeros(2, 0, dtype=torch.long), torch.zeros(2, 0, dtype=torch.long),
                  torch.zeros(2, dtype=torch.long), None, extra)
    cut_draft, _ = ctl.cut(draft, plan, 0.0)
    assert cut_draft.extra.num_slots.tolist() == [2, 0]


def test_cost_model_is_kept_per_model_and_measured_once():
    model = tiny_model("llama")
    costs = cost_model_for(model, "cpu")
    assert cost_model_for(model, "cpu") is costs
    assert cost_model_for(tiny_model("llama", seed=1), "cpu") is not costs
    spent = costs.ensure(model, [1], True, False, 16)
    assert spent > 0 and costs.ensure(model, [1], True, False, 16) == 0.0
    curve = costs.live.curves[(True, 1)]
    assert list(curve.seconds) == sorted(curve.seconds)  # never cheaper with more inputs


def test_generate_reports_the_controller(tmp_path):
    model = tiny_model("llama")
    prompt = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3]
    out = specdec.generate(model, prompt, drafter="anpd", max_new_tokens=24, controller={"trace": True})
    report = out.stats.controller
    assert report["mode"] == "live" and report["drafters"] == ["anpd"]
    assert report["row_steps"] == out.stats.steps and len(report["trace"]) == out.stats.batch_steps
    assert 0.0 <= out.stats.no_draft_share <= 1.0
    off = specdec.generate(model, prompt, drafter="anpd", max_new_tokens=24, controller=False)
    assert off.stats.controller == {} and off.sequences == out.sequences
    own = specdec.generate(model, prompt, drafter="anpd", drafter_options={"schedule": "constant"},
                           max_new_tokens=24)
    assert own.stats.controller == {}
    sampled = specdec.generate(model, prompt, drafter="anpd", max_new_tokens=8, temperature=1.0, seed=1)
    assert sampled.stats.controller["mode"] == "frozen"


def test_auto_reports_usable_drafters():
    model = tiny_model("llama")
    out = specdec.generate(model, [1, 2, 3, 1, 2, 3, 1, 2], drafter="auto", max_new_tokens=16)
    assert out.drafter == "auto"
    usable = out.stats.drafter_stats["usable"]
    assert usable == ["anpd"] and "draft_model" in out.stats.drafter_stats["unusable"]
    with pytest.raises(ValueError, match="controller"):
        specdec.generate(model, [1, 2, 3], drafter="auto", max_new_tokens=4, controller=False)


@pytest.mark.parametrize("name, options", [
    ("anpd", {}), ("ppd", {"random_init": True}), ("layer_skip", {"skip": {"attention": [1], "mlp": [1]}}),
    ("draft_model", {"model": "@target"}),
])
def test_controller_off_drafters_still_draft(name, options):
    """generate(controller=False) falls back to each drafter's own rule: it must still draft (a budget
    of None means no limit, not nothing)."""
    model = tiny_model("llama", seed=4)
    if options.get("model") == "@target":
        options = {"model": model}
    prompt = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3]
    out = specdec.generate(model, prompt, drafter=name, drafter_options=options, max_new_tokens=16,
                           controller=False)
    assert sum(out.stats.drafted_per_step) > 0 and out.stats.controller == {}
    assert out.sequences[0] == specdec.generate(model, prompt, drafter="none", max_new_tokens=16).sequences[0]


def test_cost_measurement_fits_a_short_context():
    """The cost curve is measured with forwards that fit the model's positions (a 32-token GPT-2 has 32
    position embeddings): widths that cannot fit are left out, the prefix shrinks."""
    model = tiny_model("llama", max_position_embeddings=32)
    costs = CostModel("test")
    costs.ensure(model, [1], True, False, 1024, max_positions=32)
    curve = costs.live.curves[(True, 1)]
    assert max(curve.extras) <= 29 and curve.extras[0] == 0
    out = specdec.generate(tiny_model("llama", seed=1, max_position_embeddings=32), [1, 2, 3] * 9,
                           drafter="anpd", max_new_tokens=4)
    assert len(out.sequences[0]) == 4


@given(st.integers(1, 64), st.integers(1, 600), st.integers(0, 600))
def test_ragged_measuring_contexts_keep_their_mean(batch, mean, room):
    """The rows a verify curve is measured on hold `mean` tokens on average, none longer than `most`, and any
    leading rows (those given the extra inputs) about the mean too."""
    most = mean + room
    contexts = ragged_contexts(batch, mean, most)
    assert len(contexts) == batch and contexts.min() >= 1 and contexts.max() <= most
    assert abs(contexts.mean() - mean) <= 0.5
    if batch >= 4 and mean >= 2 and room >= mean:  # room to spread: rows differ, the first pair straddles the mean
        assert contexts.min() < mean < contexts.max()
        assert contexts[0] < mean < contexts[1]


def test_batch_curves_are_measured_on_rows_of_different_lengths(monkeypatch):
    """A batch's verify curve is timed behind rows of different lengths (real batches hold different prompts; on a
    CPU such a batch attends row by row), fitting the model's positions, its long prefix bounded by LONG_TOKENS over
    the batch even when the model's positions allow more."""
    from specdec import target as target_module

    prefilled: list[tuple[int, list[int]]] = []
    original = target_module.TargetRunner.prefill

    def spy(self, input_ids, lengths):
        prefilled.append((input_ids.shape[0], [int(x) for x in lengths]))
        return original(self, input_ids, lengths)

    monkeypatch.setattr(target_module.TargetRunner, "prefill", spy)
    monkeypatch.setattr(costs_module, "LONG_TOKENS", 256)
    model = tiny_model("llama", max_position_embeddings=160)
    costs = CostModel("test")
    costs.ensure(model, [4], True, False, 128, max_positions=160)
    curve = costs.live.curves[(True, 4)]
    assert curve.long_context == 64  # LONG_TOKENS // 4, not the 128 the positions would allow
    rows = [lengths for batch, lengths in prefilled if batch == 4]
    assert rows and all(len(set(lengths)) > 1 for lengths in rows)
    assert {round(sum(lengths) / 4) for lengths in rows} == {curve.context, curve.long_context}
    widest = 1 + -(-max(curve.extras) // 4)
    assert max(max(lengths) for lengths in rows) + widest <= 160


class _AlwaysWrong(specdec.Drafter):
    """Proposes a chain of tokens the target never picks, recording what each call was asked for."""

    name = "test-always-wrong"
    description = "test: wrong chains"

    def __init__(self, greedy: list[int], prompt_length: int) -> None:
        super().__init__()
        self.greedy, self.prompt_length = greedy, prompt_length
        self.budgets: list[list[int]] = []
        self.observed = 0

    def propose(self, state):
        self.budgets.append(state.draft_budget.tolist())
        done = len(state.sequences[0]) - self.prompt_length
        wrong = [(token + 1) % 64 for token in self.greedy[done: done + 3]] or [0]
        return Draft.from_rows([(wrong, list(range(-1, len(wrong) - 1)))])

    def observe(self, state, draft, verdict, committed, extra_logits) -> None:
        self.observed += 1


def test_steps_the_controller_decodes_plainly_do_not_ask_the_drafter():
    """Once the controller plans a plain step for every row the drafter's propose is skipped (on a small
    model its work was ~2% of a step), while observe still sees every step; the output stays greedy."""
    from conftest import hf_greedy

    model = tiny_model("llama")
    prompt = [5, 9, 3, 7, 2, 8]
    greedy = hf_greedy(model, prompt, 48)
    drafter = _AlwaysWrong(greedy, len(prompt))
    out = specdec.generate(model, prompt, drafter=drafter, max_new_tokens=48)
    assert out.sequences[0] == greedy
    assert drafter.observed == out.stats.batch_steps
    assert all(any(budget) for budget in drafter.budgets)  # never asked when nothing would be verified
    assert 0 < len(drafter.budgets) < out.stats.batch_steps


def test_a_drafter_whose_probes_keep_failing_is_probed_more_rarely_across_calls():
    """Each row probes its drafter afresh; a drafter that never pays on this device (PPD's trees on a CPU)
    cost ~1% of every request that way. Probes that fail in a row, across rows and calls, make the next
    ones rarer where a probe needs prompt slots (a tree's worth is the device's, the same in every request);
    one that pays starts them over."""
    model = synthetic(draft=(0.0, 0.0, 0.004))
    ctl = controller(model)
    probes = []
    for index in range(600):
        plan, _ = step(ctl, [0], [list(range(1, 9))], [0])
        if plan.probe[0]:
            probes.append(index)
    assert ctl.streaks["d"] == len(probes) >= 2 * PROBE_STREAK
    discount = ctl._probe_discount("d")
    assert discount == min(ControllerOptions().max_probe_discount, 2.0 ** (len(probes) // PROBE_STREAK)) > 1
    row = ctl.rows[0]
    items = ctl._position_items(row, "d", 8, None, explore=True)

    def wait(base: int, streak: int) -> float:
        items.base, ctl.streaks["d"] = base, streak
        return ctl._probe_wait((items, 2, 0.0, 2))

    assert wait(3, len(probes)) == pytest.approx(discount * wait(3, 0))  # prompt slots: rarer
    # a draft model's or self-draft's: from chain_probe_share back to probe_share, never rarer than that
    assert wait(0, len(probes)) == pytest.approx(wait(0, 0) * ctl.options.chain_probe_share / ctl.options.probe_share)
    ctl.streaks["d"] = len(probes)
    ctl.finish()
    assert model.live.probe_streaks["d"] == len(probes)
    frozen = controller(model, live=False)  # reads the streak, never moves it
    assert frozen._probe_discount("d") == discount
    frozen._judge_probe("d", paid=True)
    assert frozen.streaks["d"] == len(probes)
    later = controller(model)
    assert later.streaks["d"] == len(probes)
    later._judge_probe("d", paid=True)
    assert later.streaks["d"] == 0 and later._probe_discount("d") == 1


# A flat curve (extra inputs nearly free: a short prompt on this CPU) and a rising one (each input +1 ms).
FLAT = (0.010, 0.0101, 0.0102, 0.0103, 0.0104, 0.011, 0.012, 0.014)
RISING = (0.010, 0.011, 0.012, 0.014, 0.018, 0.026, 0.042, 0.074)


def slot_model(curve) -> CostModel:
    """Costs of a drafter known (from earlier calls) to hang one prompt slot under the root and one per node."""
    model = synthetic(curve=curve)
    model.live.extras["d"] = (1.0, 1.0)
    return model


def slot_draft(score: float = 0.5) -> Draft:
    """PPD's smallest draft: one candidate with a prompt slot under it, and one slot under the root."""
    extra = ExtraSlots(torch.zeros(1, 2, 4), torch.tensor([[-1, 0]]), torch.tensor([2]))
    return Draft(torch.tensor([[7]]), torch.tensor([[-1]]), torch.tensor([1]), None, extra, torch.tensor([[score]]))


def slot_step(ctl: GoodputController, accepted: int) -> tuple[Plan, Draft]:
    """One step of a lone row drafting with slots when planned to (its candidate accepted `accepted` times)."""
    plan = ctl.plan([0], [100], 64)
    proposal = slot_draft() if plan.budget[0] else Draft.empty(1)
    draft, cut = ctl.cut(proposal, plan, 0.0)
    kept = int(draft.num_nodes[0])
    ctl.observe(plan, cut, verdict([min(accepted, kept)], draft.width), {})
    return plan, draft


def test_a_row_with_prompt_slots_starts_engaged_and_stays_while_its_bursts_pay():
    """A drafter whose predictions ride in the forward (PPD) has none after a plain step, so a row that went plain
    after a few rejections missed the bursts of accepted tokens that follow. A request starts engaged and keeps its
    root slots every step while they pay at the table's prices: behind a short prompt (slots nearly free) one
    accepted token in ten keeps it drafting."""
    ctl = controller(slot_model(FLAT))
    drafted = 0
    for index in range(120):
        plan, draft = slot_step(ctl, accepted=int(index % 10 == 9))
        assert plan.budget[0] > 0 and int(draft.extra.num_slots[0]) >= 1  # engaged every step
        drafted += int(draft.num_nodes[0])
        assert "d" in ctl.rows[0].looking
    assert drafted > 100


def test_a_row_whose_slots_cost_more_than_they_bring_lets_them_go():
    """Where each slot costs a millisecond (behind a long document) and nothing is accepted, the row lets its slots
    go once its steps have lost a plain step's worth on balance, then decodes plainly without them (a failed
    probe: the next ones come rarer)."""
    ctl = controller(slot_model(RISING))
    plain_price = ctl.table.verify(1, 1) + ctl._overhead(False)
    engaged = 0
    while True:
        slot_step(ctl, accepted=0)
        engaged += 1
        if "d" not in ctl.rows[0].looking:
            break
        assert engaged < 12
    # each engaged step lost at least what its root slot costs: the loss allowed is spent within that many steps
    least_loss = ctl.table.verify(1, 2) - ctl.table.verify(1, 1)
    assert engaged <= SLOT_LOOK_LOSS * plain_price / least_loss + 1
    assert ctl.streaks["d"] == 1
    plan, draft = slot_step(ctl, accepted=0)
    assert plan.budget == [0] and draft.extra is None  # plain, its slots dropped


def test_an_engaged_row_keeps_its_root_slots_when_its_candidates_are_cut():
    """While engaged, a candidate that does not pay for its inputs is cut but the root slots stay (the next
    step's predictions); a row not engaged that keeps no node drops them."""
    ctl = controller(synthetic(curve=RISING))
    plan = ctl.plan([0], [100], 64)
    row = ctl.rows[0]
    for _ in range(10):
        row.estimates["d"].observe([-1], [False])
    row.looking["d"] = _SlotLook()
    plan.choice, plan.budget = ["d"], [16]
    cut_draft, cut = ctl.cut(slot_draft(), plan, 0.0)
    assert cut_draft.width == 0 and cut_draft.extra.num_slots.tolist() == [1] and cut.engaged == [True]
    assert cut.widths == [2]
    del row.looking["d"]
    cut_draft, cut = ctl.cut(slot_draft(), plan, 0.0)
    assert cut_draft.width == 0 and cut_draft.extra.num_slots.tolist() == [0] and cut.engaged == [False]


def test_rows_in_a_live_batch_and_auto_members_are_not_held_engaged():
    """Engaged rows are priced alone; a live batch (priced jointly) and drafter="auto" (which weighs its members
    by position) keep the pricing they had."""
    model = slot_model(FLAT)
    assert controller(model)._slot_look(1)
    assert not controller(model)._slot_look(2)
    assert controller(model, live=False)._slot_look(4)  # frozen rows are priced alone
    assert not controller(model, members=(Member("d", False), Member("e", False)))._slot_look(1)


def test_auto_members_share_a_rows_probe_budget_by_how_often_each_may_probe():
    """drafter="auto": a row's probe budget is split among the members whose probes cost something, by 1 /
    their probe discount; a free drafter (a lookup) takes none of it. Split evenly among all four members,
    layer_skip probed a quarter as often as alone and RAG rows ran on anpd's poor drafts for 121 steps."""
    model = synthetic()
    for name, per_token in (("a", 0.004), ("b", 0.006)):  # two costly drafters; "free" has no cost: cheap
        fit = LinearFit(DRAFT_FEATURES)
        for nodes in (1, 2, 3, 5, 8) * 4:
            fit.update(draft_features(nodes, nodes), per_token * nodes)
        model.live.drafters[name] = fit
    members = [Member("free", False), Member("a", False), Member("b", False)]
    ctl = controller(model, members=members)
    assert ctl._cheap_drafters() == {"free"}
    assert ctl._probe_weight("a") == pytest.approx(0.5) and ctl._probe_weight("b") == pytest.approx(0.5)
    assert ctl._probe_weight("free") == pytest.approx(1 / 3)  # counted as one more member, for its own looks
    ctl.streaks["b"] = 6 * PROBE_STREAK  # b's probes keep failing: 8x rarer, and its part goes to a
    assert ctl._probe_discount("b") == 8.0
    assert ctl._probe_weight("a") == pytest.approx(1 / (1 + 1 / 8))
    assert ctl._probe_weight("a") + ctl._probe_weight("b") == pytest.approx(1.0)
    # the probe wait follows: a's probes come sooner than under an even split of the budget (1/3 each)
    row = ctl._row(0, None)
    items = ctl._position_items(row, "a", 8, None, explore=True)
    shared = ctl._probe_wait((items, 2, 0.0, 2))
    assert shared > 0
    ctl._probe_weight = lambda name: 1 / 3  # type: ignore[method-assign]
    assert ctl._probe_wait((items, 2, 0.0, 2)) == pytest.approx(shared * (1 / (1 + 1 / 8)) * 3)
    assert controller(model)._probe_weight("d") == 1.0  # one drafter: the whole budget


def _first_probe_of(ctl: GoodputController, name: str, depth: int, steps: int, right: str) -> int | None:
    """Steps a lone row takes before it probes `name`, where drafts of `right` are always accepted."""
    for index in range(steps):
        plan = ctl.plan([0], [depth], 64)
        if plan.choice[0] == name and plan.probe[0]:
            return index
        draft, cut = ctl.cut(chain([list(range(1, 9))[: plan.budget[0]]]), plan, 0.0)
        kept = int(draft.num_nodes[0])
        ctl.observe(plan, cut, verdict([kept if plan.choice[0] == right else 0], draft.width), {})
    return None


def test_auto_probes_a_costly_drafter_early_beside_another_when_the_probe_risks_little():
    """drafter="auto": a costly member never verified in the row probes within FIRST_PROBE_STEPS although another
    member drafts there, when its probe is expected to lose little of the request's remaining time. Held to the
    usual wait (priced against the other member's rate), layer_skip waited 72 steps of the first summarization
    request, where it commits ~7 tokens a step and anpd ~1.6. A short request keeps the usual wait, and so does a
    member that catches up first (a draft model, whose first probe prefills its cache with the whole prompt)."""
    model = synthetic()
    for name in ("a", "b"):
        _measured(model, name, 0.002, 0.001)
    options = {"probe_after": 4, "max_probe_interval": 1024, "max_probe_discount": 1.0}

    def first_probe(depth: int, catches_up: bool) -> int | None:
        members = [Member("a", False), Member("b", False, catches_up=catches_up)]
        return _first_probe_of(controller(model, members=members, **options), "b", depth, 200, right="a")

    long_request = first_probe(4000, catches_up=False)
    assert long_request is not None and long_request <= FIRST_PROBE_STEPS + 1
    short_request = first_probe(60, catches_up=False)
    assert short_request is None or short_request > FIRST_PROBE_STEPS + 1
    catching_up = first_probe(4000, catches_up=True)
    assert catching_up is None or catching_up > FIRST_PROBE_STEPS + 1


def test_auto_prices_a_probe_with_prompt_slots_against_the_rows_other_drafter():
    """drafter="auto": a free member whose probe needs prompt slots (PPD's) takes the row's step from the member it
    would draft with instead, so it is priced against that member's rate: beside a member whose chains are all
    accepted it probes more rarely than beside one whose chains all fail."""
    def slot_probes(good_is_right: bool) -> int:
        model = synthetic()
        _measured(model, "good", 0.002, 0.001)
        _measured(model, "slots", 0.00001, 0.0)
        model.live.extras["slots"] = (1.0, 1.0)
        ctl = controller(model, members=[Member("good", False), Member("slots", False)], probe_after=2,
                         max_probe_interval=16, max_probe_discount=1.0)
        probes = 0
        for _ in range(1000):
            plan = ctl.plan([0], [2000], 64)
            name = plan.choice[0]
            if name == "slots":
                probes += plan.probe[0]
                proposal = slot_draft() if plan.budget[0] else Draft.empty(1)
            else:
                proposal = chain([list(range(1, 9))[: plan.budget[0]]])
            draft, cut = ctl.cut(proposal, plan, 0.0)
            kept = int(draft.num_nodes[0])
            right = name == "good" and good_is_right
            ctl.observe(plan, cut, verdict([kept if right else 0], draft.width), {})
        return probes

    beside_failing = slot_probes(good_is_right=False)
    assert beside_failing >= 6 and slot_probes(good_is_right=True) <= 0.5 * beside_failing
