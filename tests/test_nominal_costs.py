"""Nominal costs (`specdec.nominal_costs`): what seeded sampled calls are priced with, from shapes alone."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_model

import specdec
from specdec.costs import cost_model_for
from specdec.layer_plan import LayerPlan
from specdec.nominal_costs import (
    NOMINAL_STEP,
    NominalDrafter,
    nominal_forward_share,
    nominal_model_cost,
    nominal_table,
)
from specdec.plugins import NominalCost
from specdec.registry import create
from specdec.target import model_device


def test_the_table_is_flat_over_the_first_extra_inputs_then_linear_and_the_same_every_time():
    cpu, gpu = nominal_table("cpu", {}), nominal_table("cuda", {})
    assert cpu.verify(1, 1) == pytest.approx(NOMINAL_STEP)
    assert cpu.verify(1, 5) == pytest.approx(NOMINAL_STEP)  # 4 extra inputs: as a plain step on a CPU
    assert cpu.verify(1, 9) > cpu.verify(1, 5)
    assert cpu.verify(1, 33) - cpu.verify(1, 17) == pytest.approx(2 * (cpu.verify(1, 17) - cpu.verify(1, 9)))
    assert gpu.verify(1, 17) == pytest.approx(NOMINAL_STEP) and gpu.verify(1, 33) < cpu.verify(1, 33)
    again = nominal_table("cpu", {})
    assert [again.verify(1, n) for n in range(1, 40)] == [cpu.verify(1, n) for n in range(1, 40)]


def test_drafters_are_priced_by_their_nominal_costs():
    table = nominal_table("cpu", {"free": NominalDrafter(NominalCost()),
                                  "model": NominalDrafter(NominalCost(0.25, 0.2), prepares=True),
                                  "self": NominalDrafter(NominalCost(0.5, 0.0))})
    assert "free" not in table.drafters and table.draft("free", 3, 3) == 0.0  # priced as nothing
    assert table.draft("model", 4, 4) == pytest.approx(4 * 0.25 * NOMINAL_STEP, rel=0.02)
    assert table.draft("self", 4, 4) == pytest.approx(2 * table.draft("model", 4, 4), rel=0.02)
    assert table.draft("model", 2, 2, lag=16) > table.draft("model", 2, 2)  # a catch-up is fed
    assert table.draft("self", 2, 2, lag=16) == pytest.approx(table.draft("self", 2, 2), rel=0.02)
    assert table.prepare("model", 1000) > table.prepare("model", 100) > 0 and "self" not in table.prepares
    with pytest.raises(ValueError, match="below zero"):
        nominal_table("cpu", {"bad": NominalDrafter(NominalCost(-0.1, 0.0))})
    with pytest.raises(TypeError, match="must return a specdec.plugins.NominalCost"):
        nominal_table("cpu", {"old": NominalDrafter(0.5)})  # a plugin returning a bare number


def test_a_forward_is_priced_by_the_layers_it_runs_and_the_weights_it_reads():
    target = tiny_model("llama", layers=4)
    draft = tiny_model("llama", layers=1, seed=1)
    assert nominal_forward_share(target, target) == pytest.approx(1.0)
    share = nominal_forward_share(draft, target)
    assert 0.0 < share < 1.0
    skipping = LayerPlan.build(target, skip_attention=[1, 2], skip_mlp=[1, 2])
    assert nominal_forward_share(target, target, skipping) == pytest.approx(0.5, abs=0.1)
    small_head = LayerPlan.build(draft, head_tokens=list(range(16)))
    assert nominal_forward_share(draft, target, small_head) < share
    cost = nominal_model_cost(draft, target)
    assert cost.level == pytest.approx(share) and 0.0 < cost.compute < 0.5


def test_a_seeded_call_measures_nothing():
    """Frozen decisions read no timing: a seeded call without a cost model of the caller's leaves the model's own
    (`cost_model_for`) unmeasured."""
    target = tiny_model("llama").to(torch.float64)
    specdec.generate(target, [[1, 2, 3, 1, 2, 3]], drafter="anpd", max_new_tokens=8, temperature=0.8, seed=3)
    costs = cost_model_for(target, model_device(target))
    assert costs.live.curves == {} and costs.measure_seconds == 0.0


def test_ppd_draft_models_inner_loop_is_sized_without_timings_where_the_output_is_reproduced():
    """ppd_draft_model sizes its inner loop from its draft's costs; in a seeded sampled call from nominal ones
    (`GenerationContext.reproducible`), so nothing is measured or settled there, and a greedy call measures them."""
    target, draft = tiny_model("llama"), tiny_model("llama", seed=1)
    drafter = create("drafter", "ppd_draft_model", {"model": draft, "random_init": True, "k": 3})
    specdec.generate(target, [[1, 2, 3, 1, 2, 3]], drafter=drafter, max_new_tokens=4, temperature=0.8, seed=3)
    costs = cost_model_for(draft, model_device(draft))
    assert drafter.sizing is not None and costs.live.curves == {} and costs.settled == {}
    specdec.generate(target, [[1, 2, 3, 1, 2, 3]], drafter=drafter, max_new_tokens=4)
    assert costs.live.curves and costs.settled
