"""Sampled (temperature > 0) outputs are a function of (prompt, seed) alone, for every drafter and verifier.

Every batch row owns a random generator and draws only the numbers it uses (specdec.rng), so a row's
sample does not depend on its batch neighbours, its position, the batch size or the batch mode.
Greedy outputs are position-independent by construction and covered by the equality tests.

The models here run in float64. What these tests pin is the runtime's part (each row's random stream and
the controller's frozen decisions); the model's kernels are not ours: on some CPUs (and most GPUs) a
float32 forward rounds a row's logits differently at 1 row than at 3 (here with MKL limited to SSE4.2:
~1e-7), and a draw whose uniform lands that close to a boundary of the inverse CDF flips (a CI run on
another machine saw token 7 for 8 once). In float64 such a flip needs a uniform within ~1e-16 of a
boundary, so an output that differs here is the runtime's doing. Drafts run in float64 too: on a CPU the lean
forward's default int8 weight copies take bfloat16 activations, and a row's draft distribution rounds differently
in a padded batch than alone (this test's row: up to 4e-5 apart at its first draft, equal with float64 weights): a
layer_skip row drew token 45 instead of 44 once in a CI run (stop 60).
"""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_model

import specdec
from specdec.acceptance import RowAcceptance
from specdec.costs import DRAFT_FEATURES, CostModel, LinearFit, VerifyCurve, cost_model_for, draft_features
from specdec.registry import known_names, load_class
from specdec.target import model_device

PROMPT = [5, 6, 7, 5, 6, 7, 5, 6]
OTHERS = [[1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3], [9, 8], [40, 41, 42, 40, 41]]
NEW_TOKENS = 16
SAMPLING = {"temperature": 0.9, "top_p": 0.95}


@pytest.fixture(scope="module")
def target():
    return tiny_model("llama").to(torch.float64)


def float64_options(drafter: str, target) -> dict | None:
    """The test options of `drafter`, with a draft model in float64 like the target, and drafts through the model's own
    (float64) weights where the drafter has the option (`draft_weights`)."""
    from test_composition import DRAFTER_OPTIONS_FOR_TINY_MODEL

    options = DRAFTER_OPTIONS_FOR_TINY_MODEL.get(drafter, lambda _: None)(target)
    if options is not None and "model" in options:
        options = {**options, "model": options["model"].to(torch.float64)}
    if "draft_weights" in load_class("drafter", drafter).Options.model_fields:
        options = {**(options or {}), "draft_weights": "model"}
    return options


@pytest.fixture(scope="module")
def drafter_options(target):
    """Per drafter its float64 options, made once for the module: a user keeps one draft model, and a draft model
    built anew is measured anew (ppd_draft_model settles its inner loop's size once per draft model and device,
    from its measured costs)."""
    from test_composition import DRAFTER_OPTIONS_FOR_TINY_MODEL

    return {drafter: float64_options(drafter, target) for drafter in DRAFTER_OPTIONS_FOR_TINY_MODEL}


def _run(target, drafter, verifier, prompts, seed, options=None, batch_mode="unpadded"):
    options = (options or {}).get(drafter)
    out = specdec.generate(target, prompts, drafter=drafter, drafter_options=options, verifier=verifier,
                           max_new_tokens=NEW_TOKENS, seed=seed, batch_mode=batch_mode, **SAMPLING)
    return out.sequences


# Every drafter with the stochastic verifier, and every verifier with a stochastic drafter.
PAIRS = [(d, "rejection") for d in known_names("drafter")] + [
    ("draft_model", v) for v in known_names("verifier") if v != "rejection"]


@pytest.mark.parametrize("drafter, verifier", PAIRS)
def test_sample_is_independent_of_batch_position_and_neighbours(target, drafter, verifier, drafter_options):
    def run(prompts, seed, batch_mode="unpadded"):
        return _run(target, drafter, verifier, prompts, seed, drafter_options, batch_mode)

    alone = run([PROMPT], seed=[11])[0]
    assert run([PROMPT], seed=[11])[0] == alone, "same seed, different output"
    # The same prompt and seed at another position, among other prompts, in both batch modes.
    middle = run([OTHERS[0], PROMPT, OTHERS[1]], seed=[3, 11, 4])
    assert middle[1] == alone
    last = run(OTHERS + [PROMPT], seed=[7, 8, 9, 11], batch_mode="padded")
    assert last[3] == alone
    # An int seed: row r's stream comes from (seed, r), whatever the other rows are.
    first = run([PROMPT, OTHERS[0]], seed=5)[0]
    assert run([PROMPT, OTHERS[2], OTHERS[1]], seed=5)[0] == first


def test_seeds_are_really_used(target):
    """Different seeds give different samples (else the tests above would pass vacuously), and rows of
    one int seed are different streams (identical prompts do not sample alike)."""
    runs = {tuple(_run(target, "none", "rejection", [PROMPT], seed=[s])[0]) for s in range(4)}
    assert len(runs) > 1
    twins = _run(target, "none", "rejection", [PROMPT] * 3, seed=0)
    assert len({tuple(t) for t in twins}) > 1


@pytest.mark.parametrize("seed, message", [(-1, "non-negative"), ([1, 2], "one int per prompt row"),
                                           ("7", "seed must be"), (True, "seed must be"), ([1.5], "one int")])
def test_bad_seed_is_a_clear_error(target, seed, message):
    with pytest.raises(ValueError, match=message):
        specdec.generate(target, [PROMPT], max_new_tokens=2, seed=seed, temperature=1.0)


def _poison(model: CostModel) -> None:
    """Make every price of `model` absurd: extra inputs 50x a plain step, every drafter's level 10 plain steps,
    pessimistic pooled acceptance, large overheads. A decision that read it would differ."""
    grid = (0, 1, 2, 4, 8, 16, 32, 64)
    for packed in (True, False):
        model.live.curves[(packed, 1)] = VerifyCurve(1, grid, tuple(0.01 * (1 + 50 * e) for e in grid))
    model.live.changed()
    for name in known_names("drafter"):
        fit = model.live.drafters[name] = LinearFit(DRAFT_FEATURES)
        for levels in (1, 2, 4) * 3:
            fit.update(draft_features(levels, levels), 0.1 * levels)
        model.live.acceptance[name] = RowAcceptance(prior=[0.01, 0.01], weight=50.0)
        model.live.overheads[(name, True)] = model.live.overheads[(name, False)] = 0.05
        model.live.probe_streaks[name] = 10


@pytest.mark.parametrize("drafter", ["anpd", "draft_model", "layer_skip", "ppd", "auto"])
def test_a_seeded_output_does_not_depend_on_the_measured_costs(drafter, drafter_options):
    """A seeded sampled call's decisions read nominal costs (`specdec.nominal_costs`), never what the process
    measured: with the model's cost model (`cost_model_for`) measuring something else entirely (another process,
    another load), the output and the decisions stay the same. Before stop 78 they read a snapshot of it, and the
    same script with the same seed drew different text in every process."""
    model = tiny_model("llama").to(torch.float64)  # its own: its cost model is poisoned below
    options = dict(drafter_options.get(drafter) or {})
    draft = tiny_model("llama", layers=1, seed=1).to(torch.float64)  # half the target's layers: drafting can pay
    if drafter == "draft_model":
        options["model"] = draft
    if drafter == "auto":
        options = {"draft": draft, "options": {
            name: {k: v for k, v in (drafter_options.get(name) or {}).items() if k != "model"}
            for name in ("layer_skip", "ppd") if drafter_options.get(name)}}
    runs = []
    for poisoned in (False, True):
        if poisoned:
            _poison(cost_model_for(model, model_device(model)))
        out = specdec.generate(model, [PROMPT, OTHERS[0]], drafter=drafter, drafter_options=options,
                               max_new_tokens=24, seed=[11, 12], **SAMPLING)
        counts = {key: out.stats.controller[key] for key in ("drafter_row_steps", "plain_row_steps", "probes")}
        runs.append((out.sequences, counts))
    assert runs[0] == runs[1]
    assert runs[0][1]["plain_row_steps"] < sum(out.stats.row_steps), "never drafted: the test would say nothing"


def test_a_seeded_call_reads_the_cost_model_it_is_given(target):
    """A caller who passes a cost model pins the costs themselves: a seeded call prices with it (here: drafting
    priced so dear that no draft pays, so no row-step verifies one)."""
    costs = CostModel("given")
    _poison(costs)
    out = specdec.generate(target, [PROMPT], drafter="anpd", max_new_tokens=16, seed=[11], cost_model=costs,
                           **SAMPLING)
    free = specdec.generate(target, [PROMPT], drafter="anpd", max_new_tokens=16, seed=[11], **SAMPLING)
    assert out.stats.controller["plain_row_steps"] == 16 > free.stats.controller["plain_row_steps"]
