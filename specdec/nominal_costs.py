"""Step costs from the models' shapes alone, never timed: what the goodput controller prices with where its
decisions must not read timings.

A sampled call with a seed promises its output. The controller's decisions (how much of each draft to verify)
change which random numbers a row draws, so they must be a function of the prompt, the seed and the options.
A snapshot of the measured costs (`CostModel.snapshot`) is fixed within a call but measured anew by every
process: two runs of one script with one seed drew different text (stop 78: in three processes, for every drafter
under the controller; benchmarks/results/goodput/checks_s78/). The table here is the same in every process and on every machine with
the same kind of device. Its prices are coarse, in units of a plain step: a verify curve flat up to a few extra
inputs and linear beyond, a draft level's share of a plain step from what its forward reads and runs
(`nominal_forward_share`), a fed token's from its model's compute.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from .costs import (
    CONTEXT_UNIT,
    DRAFT_FEATURES,
    DRAFT_RIDGE,
    EXTRA_GRID,
    CostTable,
    LinearFit,
    VerifyCurve,
    draft_features,
)
from .layer_plan import LayerPlan, layout_for
from .lean_forward import supports as lean_forward_supports
from .plugins import NominalCost
from .target import model_device

#: A plain step's nominal seconds (the unit; only ratios decide).
NOMINAL_STEP = 0.01
#: Per device type: extra inputs (beyond one per row) that cost nothing more than a plain step, and what each one
#: past them adds, as a share of a plain step. On this CPU (AMD EPYC, the bundled 17M target in float32 through the
#: runtime's oneDNN layers) 1 to 4 extra inputs cost 0.93-1.04x a plain step, 8 1.10-1.18x, 16 1.35-1.50x, 32
#: 1.95-2.16x (four runs, benchmarks/results/goodput/checks_s78/). On a GPU a decode step is bound by reading the
#: weights far longer (not measured here: no GPU was lent).
NOMINAL_FLAT_INPUTS = {"cuda": 16}
NOMINAL_FLAT_INPUTS_OTHER = 4
NOMINAL_INPUT_COST = {"cuda": 0.005}
NOMINAL_INPUT_COST_OTHER = 0.04
#: Per device type, a decoder layer's fixed work (kernels launched, host dispatch) in bytes of weights read in the
#: same time (`nominal_forward_share`). Fitted on this CPU to its two drafts' measured costs (below); on a GPU a
#: kernel launch (~5-10 us) reads tens of MB at its bandwidth (not measured here).
NOMINAL_LAYER_BYTES = {"cuda": 50e6}
NOMINAL_LAYER_BYTES_OTHER = 2e6
#: Draft levels, catch-ups and prefills the nominal fits are drawn from.
_LEVELS = range(1, 9)
_LAGS = (0.0, 16.0)
_PREPARE_TOKENS = (0, 256, 1024, 4096)


@dataclass(frozen=True)
class NominalDrafter:
    """One drafter's nominal costs (`Drafter.nominal_cost`), and whether it does one-off work when first asked to
    draft a row (`Drafter.prepare`: a draft model's prefill of the row's prompt)."""

    cost: NominalCost
    prepares: bool = False


def nominal_model_cost(model: Any, target: Any, plan: LayerPlan | None = None) -> NominalCost:
    """What a drafter that runs `model` (under `plan`: a draft's scratch forwards) costs against `target`: a level
    is one forward (`nominal_forward_share`), a fed token `model`'s compute per token over the target's (their
    weights outside the input embeddings, which are looked up)."""
    return NominalCost(nominal_forward_share(model, target, plan), _forward_work(model)[1] / _forward_work(target)[1])


def nominal_forward_share(model: Any, target: Any, plan: LayerPlan | None = None) -> float:
    """One forward of `model` under `plan` (one token, short cache; None: the model as it is) as a share of a plain
    step of `target`, from what each reads and runs: per decoder layer a fixed part (NOMINAL_LAYER_BYTES) plus the
    bytes of the weights it reads, in the format the plan stores them where its lean forward runs
    (`LayerPlan.weights`) and only the head rows it scores. A layer whose attention or MLP is bypassed counts half.
    Neither part alone prices both of this CPU's drafts: the bundled 2-layer draft (int8 copies, a 2048-row head)
    measured 0.055-0.088 of the 8-layer float32 target's plain step a level and layer_skip over the target's 8 layers
    (int8, a 2048-row head) 0.32-0.40 (four runs), where this reads 0.067 and 0.363; by layers alone 0.25 and 1.0, by
    bytes 0.02 and 0.21 (benchmarks/results/goodput/checks_s78/)."""
    per_layer = NOMINAL_LAYER_BYTES.get(model_device(model).type, NOMINAL_LAYER_BYTES_OTHER)
    layers, weights = _forward_work(model, plan)
    target_layers, target_weights = _forward_work(target)
    return ((layers * per_layer + weights * _weight_bytes(model, plan))
            / (target_layers * per_layer + target_weights * _weight_bytes(target)))


def _forward_work(model: Any, plan: LayerPlan | None = None) -> tuple[float, float]:
    """(decoder layers a forward of `model` under `plan` runs, a bypassed block counting half; weights a token is
    multiplied with: the layers' kept blocks, the norms and the head rows it scores, not the input embeddings, which
    are looked up)."""
    embedding = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    body = sum(p.numel() for p in model.parameters()) - embedding.numel()
    if head is not embedding:
        body -= head.numel()
    layers = float(model.config.num_hidden_layers)
    if plan is not None and plan.skips:
        layout = layout_for(model)
        blocks = model.get_submodule(layout.layers)
        for indices, part in ((plan.skip_attention, layout.attention), (plan.skip_mlp, layout.mlp)):
            body -= sum(p.numel() for index in indices for p in blocks[index].get_submodule(part).parameters())
        layers -= (len(plan.skip_attention) + len(plan.skip_mlp)) / 2
    rows = head.shape[0] if plan is None or plan.head_tokens is None else len(plan.head_tokens)
    return layers, float(body + rows * head.shape[1])


def _weight_bytes(model: Any, plan: LayerPlan | None = None) -> int:
    """Bytes per weight a forward of `model` under `plan` reads: the plan's format where its lean forward runs."""
    element = model.get_input_embeddings().weight.element_size()
    if plan is not None and plan.lean and lean_forward_supports(model):
        return {"int8": 1, "float16": 2}.get(plan.weights, element)
    return element


def nominal_width_share(device: torch.device | str, inputs: int) -> float:
    """A forward of `inputs` inputs on one row over a one-input forward, on this kind of device: flat over the first
    NOMINAL_FLAT_INPUTS extra inputs, NOMINAL_INPUT_COST of one more each beyond."""
    device_type = torch.device(device).type
    flat = NOMINAL_FLAT_INPUTS.get(device_type, NOMINAL_FLAT_INPUTS_OTHER)
    slope = NOMINAL_INPUT_COST.get(device_type, NOMINAL_INPUT_COST_OTHER)
    return 1.0 + slope * max(0, inputs - 1 - flat)


def nominal_table(device: torch.device | str, drafters: Mapping[str, NominalDrafter]) -> CostTable:
    """A cost table for rows priced alone (batch 1) from `drafters`' nominal costs and the device's type: a plain
    step of NOMINAL_STEP seconds, flat over the first extra inputs and linear beyond; a drafter's chain of L levels
    that catches up on `lag` tokens L levels plus `lag` fed tokens, a prepare of N tokens a level plus N fed tokens,
    a fed token its compute share of what one more verified input adds to the target's step. No overheads, no
    pooled acceptance (every row starts from the estimates' own prior), no history."""
    slope = NOMINAL_INPUT_COST.get(torch.device(device).type, NOMINAL_INPUT_COST_OTHER)
    table = CostTable()
    table.curves[(True, 1)] = VerifyCurve(1, EXTRA_GRID, tuple(
        NOMINAL_STEP * nominal_width_share(device, 1 + extra) for extra in EXTRA_GRID))
    for name, drafter in drafters.items():
        if not isinstance(drafter.cost, NominalCost):
            raise TypeError(f"drafter {name!r}: nominal_cost() must return a specdec.plugins.NominalCost, got "
                            f"{type(drafter.cost).__name__}")
        level, compute = drafter.cost
        if level < 0 or compute < 0:
            raise ValueError(f"drafter {name!r}: a nominal cost below zero ({drafter.cost})")
        if level == 0 and compute == 0:
            continue  # priced as nothing, as an unmeasured drafter is
        per_level, per_token = level * NOMINAL_STEP, compute * slope * NOMINAL_STEP
        fit = table.drafters[name] = LinearFit(DRAFT_FEATURES, ridge=DRAFT_RIDGE)
        for levels in _LEVELS:
            for lag in _LAGS:
                fit.update(draft_features(levels, levels, lag), per_level * levels + per_token * lag)
        if drafter.prepares:
            prepare = table.prepares[name] = LinearFit(2)
            for tokens in _PREPARE_TOKENS:
                prepare.update([1.0, tokens / CONTEXT_UNIT], per_level + per_token * tokens)
    return table
