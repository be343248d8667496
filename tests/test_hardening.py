"""Misbehaving plugins are reported by name with what was wrong, and never corrupt the next call;
long runs keep memory flat and free their caches."""

from __future__ import annotations

import gc
import re

import pytest
import torch
from conftest import VOCAB, hf_greedy, tiny_model

import specdec
from specdec import Draft, Drafter, DrafterError, Verdict, Verifier, VerifierError
from specdec.kv_cache import RaggedKVCache
from specdec.registry import known_names


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama")


class BadDrafter(Drafter):
    """Proposes a fixed (bad) draft from step `at_step` on; before that, nothing."""

    name = "bad-drafter"

    def __init__(self, make_draft, at_step: int = 0) -> None:
        super().__init__()
        self.make_draft, self.at_step = make_draft, at_step

    def propose(self, state):
        if state.step < self.at_step:
            return Draft.empty(state.batch_size)
        return self.make_draft(state)


def _chain(chain_tokens, **overrides):
    draft = Draft.chain(torch.tensor([chain_tokens]))
    for key, value in overrides.items():
        setattr(draft, key, value)
    return draft


CASES = {
    "float tokens": (lambda s: _chain([1, 2], tokens=torch.tensor([[1.0, 2.0]])), "tokens must be a torch.long"),
    "parent after node": (lambda s: _chain([1, 2], parents=torch.tensor([[-1, 1]])), "earlier node"),
    "parent out of range": (lambda s: _chain([1, 2], parents=torch.tensor([[-1, -5]])), "earlier node"),
    "token outside vocabulary": (lambda s: _chain([1, VOCAB + 3]), "outside the vocabulary"),
    "negative token": (lambda s: _chain([-1]), "outside the vocabulary"),
    "q wrong shape": (lambda s: _chain([1, 2], q=torch.full((1, 2, 5), 0.2)), "q must have shape"),
    "q not a distribution": (lambda s: _chain([1, 2], q=torch.full((1, 2, VOCAB), 0.5)), "not a probability"),
    "q not finite": (lambda s: _chain([1, 2], q=torch.full((1, 2, VOCAB), float("nan"))), "not a probability"),
    "too many nodes": (lambda s: _chain(list(range(10))), "exceed the budget of 4"),
    "wrong batch size": (lambda s: Draft.chain(torch.tensor([[1], [2]])), r"expected tokens/parents \[B=1"),
    "wrong device": (lambda s: _chain([1, 2], tokens=torch.tensor([[1, 2]], device="meta")), "device meta"),
    "not a Draft": (lambda s: [1, 2, 3], "expected a specdec.Draft"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_invalid_drafts_are_reported_by_name(model, case: str) -> None:
    make, message = CASES[case]
    with pytest.raises(DrafterError, match="bad-drafter") as info:
        specdec.generate(model, [1, 2, 3], drafter=BadDrafter(make, at_step=2), verifier="exact",
                         max_new_tokens=8, max_draft_nodes=4)
    assert re.search(message, str(info.value)), str(info.value)


@pytest.mark.parametrize("verifier", ["exact", "rejection", "typical"])
def test_sampling_from_nan_logits_is_refused_with_its_cause(verifier: str) -> None:
    """Sampled steps do not read the device to check the target's distribution (a GPU would stall): a distribution
    that is not finite draws a token outside the vocabulary, which the step's one read-back refuses, naming the
    likely cause, before anything is committed."""
    broken = tiny_model("llama", seed=4)
    with torch.no_grad():
        broken.lm_head.weight[3] = float("nan")  # every logit row gets a NaN: softmax is NaN everywhere
    with pytest.raises(VerifierError, match=r"bonus token .* outside the vocabulary .*NaN or inf logits"):
        specdec.generate(broken, [1, 2, 3], drafter="anpd", verifier=verifier, temperature=0.8, seed=0,
                         max_new_tokens=6)


def test_a_draft_models_nan_distribution_is_refused_by_name() -> None:
    """The draft model's sampled tokens are drawn without a device check too: a q that is not a distribution is
    refused by the step's read-back (its check of q, which NaN now fails), naming the drafter."""
    broken = tiny_model("llama", seed=5)
    with torch.no_grad():
        broken.lm_head.weight[3] = float("nan")
    with pytest.raises(DrafterError, match=r"draft_model.*q is not a probability distribution"):
        specdec.generate(tiny_model("llama", seed=4), [1, 2, 3], drafter="draft_model",
                         drafter_options={"model": broken}, verifier="rejection", temperature=0.8, seed=0,
                         max_new_tokens=6, controller=False)


def test_raising_drafter_is_named_and_next_call_is_clean(model) -> None:
    def explode(state):
        raise RuntimeError("boom at step 3")

    with pytest.raises(DrafterError, match=r"drafter 'bad-drafter' raised in propose: RuntimeError\('boom"):
        specdec.generate(model, [4, 5, 6], drafter=BadDrafter(explode, at_step=3), max_new_tokens=10)
    out = specdec.generate(model, [4, 5, 6], drafter="none", max_new_tokens=10)
    assert out.sequences[0] == hf_greedy(model, [4, 5, 6], 10)


class PathlessVerifier(Verifier):
    name = "pathless"

    def verify(self, draft, logits, sampling, generator):
        batch = draft.batch_size
        return Verdict(torch.tensor([[1, 0]] * batch), torch.full((batch,), 2), logits[:, 0].argmax(-1))


def test_verifier_returning_a_non_path_is_reported(model) -> None:
    drafter = BadDrafter(lambda s: Draft.from_rows([([1, 2], [-1, -1])]))
    with pytest.raises(VerifierError, match="verifier 'pathless'.*do not form a path"):
        specdec.generate(model, [1, 2], drafter=drafter, verifier=PathlessVerifier(), max_new_tokens=4,
                         controller=False)  # the two-node draft reaches the verifier uncut


def _rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * 4096


@pytest.mark.parametrize("drafter", known_names("drafter"))
def test_long_run_memory_is_flat_and_caches_are_freed(model, drafter: str) -> None:
    """200 consecutive generations per drafter: RSS stays flat and no KV cache outlives its call."""
    from test_composition import DRAFTER_OPTIONS_FOR_TINY_MODEL

    options = DRAFTER_OPTIONS_FOR_TINY_MODEL.get(drafter, lambda _: {})(model)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]

    def run() -> None:
        specdec.generate(model, prompt, drafter=drafter, drafter_options=options, max_new_tokens=8)

    for _ in range(20):  # warm-up: allocator pools, lazily built buffers
        run()
    gc.collect()
    before = _rss_bytes()
    for _ in range(200):
        run()
    gc.collect()
    growth = _rss_bytes() - before
    assert growth < 20 * 2**20, f"{drafter}: RSS grew by {growth / 2**20:.1f} MiB over 200 generations"
    live_caches = [o for o in gc.get_objects() if type(o) is RaggedKVCache and any(
        layer.is_initialized for layer in o.layers)]
    assert live_caches == []
