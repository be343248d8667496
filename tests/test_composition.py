"""The product is composition: every registered drafter runs with every registered verifier.

The matrix is built from the registry at collection time, so drafters and verifiers added later
join automatically. A plugin that fails to import, to validate its options or to run fails its
cells (never skipped). At temperature 0 every pair must reproduce plain greedy decoding exactly
(exact and rejection are lossless; typical equals greedy at temperature 0).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from conftest import VOCAB, hf_greedy, tiny_model

import specdec
from specdec.registry import known_names

# Options a drafter needs to run on the 2-layer, vocab-96 tiny Llama of conftest. Each value maps
# the target model to the drafter's options. Add your drafter here if its defaults need real weights.
DRAFTER_OPTIONS_FOR_TINY_MODEL: dict[str, Callable[[Any], dict[str, Any]]] = {
    "draft_model": lambda target: {"model": tiny_model("llama", seed=1), "k": 3},
    "layer_skip": lambda target: {"skip": {"attention": [1], "mlp": [1]}, "max_draft": 4},
    "ppd": lambda target: {"random_init": True, "tree_size": 12},
    "ppd_draft_model": lambda target: {"model": tiny_model("llama", seed=1), "random_init": True, "k": 3},
}

PROMPTS = [[1, 2, 3, 4, 1, 2, 3, 4, 1, 2], [7, 8, 9, 7, 8]]
NEW_TOKENS = 12
MATRIX = [(d, v) for d in known_names("drafter") for v in known_names("verifier")]


@pytest.fixture(scope="module")
def target():
    return tiny_model("llama")


@pytest.fixture(scope="module")
def greedy(target):
    return [hf_greedy(target, p, NEW_TOKENS) for p in PROMPTS]


def test_matrix_covers_the_built_ins():
    drafters, verifiers = known_names("drafter"), known_names("verifier")
    assert {"none", "anpd", "draft_model", "layer_skip", "ppd"} <= set(drafters)
    assert {"exact", "rejection", "typical"} <= set(verifiers)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
@pytest.mark.parametrize(("drafter", "verifier"), MATRIX)
def test_drafter_with_verifier(target, greedy, drafter, verifier, temperature):
    options = DRAFTER_OPTIONS_FOR_TINY_MODEL.get(drafter, lambda _: {})(target)
    out = specdec.generate(target, PROMPTS, drafter=drafter, drafter_options=options, verifier=verifier,
                           temperature=temperature, seed=3, max_new_tokens=NEW_TOKENS)
    assert (out.drafter, out.verifier) == (drafter, verifier)
    assert [len(s) for s in out.sequences] == [NEW_TOKENS] * len(PROMPTS)
    assert all(0 <= t < VOCAB for s in out.sequences for t in s)
    assert out.finish_reasons == ["length"] * len(PROMPTS)
    stats = out.stats
    assert stats.new_tokens == NEW_TOKENS * len(PROMPTS)
    assert stats.accepted_tokens + stats.steps == stats.new_tokens  # no stops: every step adds accepted + 1
    assert out.verifier_lossless is specdec.registry.load_class("verifier", verifier).lossless
    if temperature == 0.0:
        assert out.sequences == greedy


def test_unknown_names_fail_clearly(target):
    with pytest.raises(specdec.PluginNotFoundError, match="rejection"):
        specdec.generate(target, PROMPTS[0], drafter="none", verifier="rejectoin", max_new_tokens=2)
    with pytest.raises(specdec.PluginNotFoundError, match="Known drafters"):
        specdec.generate(target, PROMPTS[0], drafter="no-such-drafter", max_new_tokens=2)


def test_auto_verifier_picks_by_temperature(target):
    assert specdec.generate(target, PROMPTS[0], drafter="none", max_new_tokens=2).verifier == "exact"
    sampled = specdec.generate(target, PROMPTS[0], drafter="none", temperature=0.5, seed=0, max_new_tokens=2)
    assert sampled.verifier == "rejection"
