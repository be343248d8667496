"""Property-based fuzzing of the engine (hypothesis): random models, prompts, drafts, budgets, stops
and batch sizes. Greedy output must always equal plain greedy decoding of each row alone."""

from __future__ import annotations

import functools

import pytest
import torch
from conftest import tiny_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import specdec
from specdec import DecodeState, Draft, Drafter

VOCAB = 40
ARCHS = ("llama", "qwen2", "gpt2")


@functools.cache
def _model(arch: str, context: int):
    return tiny_model(arch, vocab=VOCAB, seed=11, max_position_embeddings=context)


@functools.cache
def _reference(arch: str, context: int, prompt: tuple[int, ...], new_tokens: int, eos: int | None) -> tuple[int, ...]:
    model = _model(arch, context)
    ids = torch.tensor([prompt])
    budget = min(new_tokens, context - len(prompt))
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=budget,
                         eos_token_id=eos, pad_token_id=0)
    return tuple(out[0, len(prompt):].tolist())


class FuzzDrafter(Drafter):
    """Random trees from a seeded generator: empty drafts, long chains past the budget, wide trees,
    the eos token, and sometimes the true continuation (so deep acceptance paths get exercised)."""

    name = "fuzz"

    def __init__(self, seed: int, truth: dict[int, tuple[int, ...]], eos: int | None) -> None:
        super().__init__()
        self.rng = torch.Generator().manual_seed(seed)
        self.truth, self.eos, self.prompt_len = truth, eos, {}

    def setup(self, context) -> None:
        self.prompt_len = {row: len(p) for row, p in enumerate(context.prompts)}

    def _randint(self, low: int, high: int) -> int:
        return int(torch.randint(low, high, (1,), generator=self.rng))

    def propose(self, state: DecodeState) -> Draft:
        rows = []
        for row, sequence in zip(state.row_ids, state.sequences):
            shape = self._randint(0, 4)
            done = len(sequence) - self.prompt_len[row]
            if shape == 0:
                tokens, parents = [], []
            elif shape == 1:  # the truth (possibly running past the budget), then noise
                n = self._randint(1, 12)
                tokens = list(self.truth[row][done : done + n]) + [self._randint(0, VOCAB)]
                parents = list(range(-1, len(tokens) - 1))
            else:  # a random tree, eos sprinkled in
                n = self._randint(1, 16)
                tokens = [self._randint(0, VOCAB) for _ in range(n)]
                if self.eos is not None and n > 2:
                    tokens[self._randint(0, n)] = self.eos
                parents = [self._randint(-1, i) if i else -1 for i in range(n)]
            rows.append((tokens, parents))
        return Draft.from_rows(rows)


case = st.fixed_dictionaries({
    "arch": st.sampled_from(ARCHS),
    "context": st.sampled_from([32, 256]),
    "prompts": st.lists(st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=20), min_size=1, max_size=4),
    "new_tokens": st.integers(1, 24),
    "use_eos": st.booleans(),
    "seed": st.integers(0, 10_000),
    "batch_mode": st.sampled_from(["unpadded", "padded"]),
    "verifier": st.sampled_from(["exact", "rejection", "typical"]),  # all must be greedy at temperature 0
})


def _check(params: dict) -> None:
    arch, context, new_tokens = params["arch"], params["context"], params["new_tokens"]
    prompts = [tuple(p) for p in params["prompts"]]
    eos = 7 if params["use_eos"] else None
    truth = {row: _reference(arch, context, p, 40, None) for row, p in enumerate(prompts)}
    drafter = FuzzDrafter(params["seed"], truth, eos)
    out = specdec.generate(_model(arch, context), [list(p) for p in prompts], drafter=drafter,
                           verifier=params["verifier"],
                           max_new_tokens=new_tokens, eos_token_id=eos, batch_mode=params["batch_mode"])
    for prompt, sequence, reason in zip(prompts, out.sequences, out.finish_reasons):
        expected = _reference(arch, context, prompt, new_tokens, eos)
        assert tuple(sequence) == expected
        assert len(sequence) <= new_tokens and len(prompt) + len(sequence) <= context
        if eos is not None and eos in sequence:
            assert sequence.index(eos) == len(sequence) - 1 and reason == "eos"
    stats = out.stats
    assert stats.new_tokens == sum(len(s) for s in out.sequences)
    assert stats.accepted_tokens + stats.steps >= stats.new_tokens  # a stop can only drop committed tokens
    assert len(stats.accepted_per_step) == len(stats.drafted_per_step) == stats.batch_steps


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case)
def test_fuzz_greedy_equals_plain_greedy(params: dict) -> None:
    _check(params)


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case)
def test_fuzz_greedy_equals_plain_greedy_long(params: dict) -> None:
    _check(params)
