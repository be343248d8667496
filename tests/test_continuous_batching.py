"""Continuous batching (`max_batch_size`): at most that many rows run at once and a finished row's place
goes to the next waiting prompt. Outputs must not change: every row equals its prompt run alone."""

from __future__ import annotations

import functools
from unittest import mock

import pytest
import torch
from conftest import VOCAB, OracleDrafter, RandomTreeDrafter, hf_greedy, tiny_model

import specdec
from specdec import DecodeState, Draft, GenerationContext
from specdec.controller import GoodputController
from specdec.registry import known_names

NEW_TOKENS = 12
LENGTHS = [3, 19, 7, 30, 5, 12, 1, 25]  # different prompt lengths; a one-token prompt has nothing to prefill


@functools.lru_cache(maxsize=1)
def _model():
    return tiny_model("llama", seed=4)


def _prompts() -> list[list[int]]:
    generator = torch.Generator().manual_seed(3)
    # Repetitive prompts give n-gram drafters something to find.
    return [(torch.randint(1, VOCAB, (5,), generator=generator).tolist() * 8)[:n] for n in LENGTHS]


@functools.cache
def _alone(prompt: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(hf_greedy(_model(), list(prompt), NEW_TOKENS))


def _expected(prompts: list[list[int]]) -> list[list[int]]:
    return [list(_alone(tuple(p))) for p in prompts]


class RecordingDrafter(RandomTreeDrafter):
    """Random trees, plus a record of the rows of every step and of every admission."""

    def __init__(self) -> None:
        super().__init__(VOCAB, seed=5, max_nodes=5)
        self.first_rows: list[int] = []
        self.steps: list[list[int]] = []
        self.admitted: list[list[int]] = []

    def setup(self, context: GenerationContext) -> None:
        super().setup(context)
        self.first_rows = context.first_rows

    def observe(self, state: DecodeState, draft, verdict, committed, extra_logits) -> None:
        # Every step (propose is skipped on steps the goodput controller decodes plainly for every row).
        self.steps.append(list(state.row_ids))

    def admit(self, rows: list[int]) -> None:
        self.admitted.append(list(rows))


@pytest.mark.parametrize("max_batch_size", [1, 3, 8])
def test_every_registered_drafter_refills_rows_losslessly(max_batch_size: int) -> None:
    from test_composition import DRAFTER_OPTIONS_FOR_TINY_MODEL

    prompts = _prompts()
    for name in known_names("drafter"):
        options_factory = DRAFTER_OPTIONS_FOR_TINY_MODEL.get(name)
        options = options_factory(_model()) if callable(options_factory) else options_factory
        out = specdec.generate(_model(), prompts, drafter=name, drafter_options=options, verifier="exact",
                               max_new_tokens=NEW_TOKENS, max_batch_size=max_batch_size)
        assert out.sequences == _expected(prompts), name
        assert out.stats.new_tokens == len(prompts) * NEW_TOKENS


@pytest.mark.parametrize("kind, options", [
    ("anpd", {"schedule": "heuristic", "min_match": 2}),
    ("anpd", {"branches": 3}),
    ("draft_model", {"schedule": "confidence", "k": 3}),
    ("draft_model", {"schedule": "heuristic", "k": 2, "branches": 2, "branch_depth": 1}),
])
def test_adaptive_and_tree_drafters_refill_rows_losslessly(kind: str, options: dict) -> None:
    if kind == "draft_model":
        options = {**options, "model": tiny_model("llama", seed=1)}
    prompts = _prompts()
    out = specdec.generate(_model(), prompts, drafter=kind, drafter_options=options, verifier="exact",
                           max_new_tokens=NEW_TOKENS, max_batch_size=3)
    assert out.sequences == _expected(prompts)


def test_finished_rows_are_replaced_in_prompt_order() -> None:
    """An oracle that is perfect on some rows and useless on others makes rows finish at different steps:
    each finished row's place goes to the next waiting prompt, never more than max_batch_size at once."""
    prompts = _prompts()
    expected = _expected(prompts)
    drafter = OracleDrafter({row: seq if row % 2 == 0 else [] for row, seq in enumerate(expected)}, k=4)
    seen: list[list[int]] = []
    propose = drafter.propose

    def recording_propose(state: DecodeState) -> Draft:
        seen.append(list(state.row_ids))
        return propose(state)

    drafter.propose = recording_propose
    out = specdec.generate(_model(), prompts, drafter=drafter, verifier="exact", max_new_tokens=NEW_TOKENS,
                           max_batch_size=3, controller=False)  # every draft verified: the step counts are known
    assert out.sequences == expected
    assert seen[0] == [0, 1, 2]
    assert max(len(rows) for rows in seen) == 3
    joined = [row for rows in seen for row in rows]
    assert sorted(set(joined), key=joined.index) == list(range(len(prompts)))  # rows join in prompt order
    for step, rows in enumerate(seen):  # the batch stays full while prompts wait
        if len({row for earlier in seen[: step + 1] for row in earlier}) < len(prompts):
            assert len(rows) == 3
    # Rows 0 and 2 speculate perfectly (4 drafts + bonus per step) and leave after 3 steps; row 1 does not.
    # Prompts 3 and 4 take their places (in place: row 1's cache is not moved).
    assert seen[2] == [0, 1, 2] and seen[3] == [3, 1, 4]
    static = specdec.generate(_model(), prompts, drafter=drafter, verifier="exact", max_new_tokens=NEW_TOKENS,
                              controller=False)
    assert out.stats.steps == static.stats.steps  # the same row-steps, regrouped
    assert out.stats.batch_steps > static.stats.batch_steps  # fewer rows at once take more steps


def test_the_controller_knows_the_waiting_prompts_budgets() -> None:
    """The goodput controller values tokens by when the batch ends (`specdec.controller.row_weights`): in the
    last wave that depends on the waiting prompts' sizes, which the engine hands it every step, in join order
    (as many as decide it: beyond one more than the batch has rows, tokens count alike)."""
    prompts = _prompts()
    seen: list[list[int]] = []
    plan = GoodputController.plan

    def recording_plan(self, row_ids, max_depth, max_nodes, waiting=True, contexts=None):
        seen.append(list(waiting))
        return plan(self, row_ids, max_depth, max_nodes, waiting, contexts)

    with mock.patch.object(GoodputController, "plan", recording_plan):
        out = specdec.generate(_model(), prompts, drafter="anpd", verifier="exact", max_new_tokens=NEW_TOKENS,
                               max_batch_size=2)
    assert out.sequences == _expected(prompts)
    assert seen[0] == [NEW_TOKENS] * 3  # six prompts wait: the first batch-size + 1 are read
    counts = [len(waiting) for waiting in seen]
    assert counts[-1] == 0 and all(a >= b for a, b in zip(counts, counts[1:]))  # they leave the queue as they join


def test_admit_hook_and_first_rows() -> None:
    prompts = _prompts()
    drafter = RecordingDrafter()
    out = specdec.generate(_model(), prompts, drafter=drafter, verifier="exact", max_new_tokens=NEW_TOKENS,
                           max_batch_size=4)
    assert out.sequences == _expected(prompts)
    assert drafter.first_rows == [0, 1, 2, 3]
    assert sorted(row for rows in drafter.admitted for row in rows) == [4, 5, 6, 7]
    for rows in drafter.admitted:  # admitted rows take the places of the rows that just finished
        index = next(i for i, step in enumerate(drafter.steps) if rows[0] in step)
        before, after = drafter.steps[index - 1], drafter.steps[index]
        assert len(after) == len(before) == 4
        replaced = [position for position, (old, new) in enumerate(zip(before, after)) if old != new]
        assert [after[position] for position in replaced] == rows
    alone = RecordingDrafter()
    specdec.generate(_model(), prompts, drafter=alone, verifier="exact", max_new_tokens=NEW_TOKENS)
    assert alone.first_rows == list(range(len(prompts))) and alone.admitted == []


def test_rows_stopped_by_eos_make_room() -> None:
    prompts = _prompts()
    eos = _alone(tuple(prompts[0]))[1]  # row 0 stops after 2 tokens
    out = specdec.generate(_model(), prompts, drafter="anpd", verifier="exact", max_new_tokens=NEW_TOKENS,
                           eos_token_id=eos, max_batch_size=2)
    static = specdec.generate(_model(), prompts, drafter="anpd", verifier="exact", max_new_tokens=NEW_TOKENS,
                              eos_token_id=eos)
    assert out.sequences == static.sequences
    assert out.finish_reasons == static.finish_reasons
    assert out.finish_reasons[0] == "eos" and len(out.sequences[0]) == 2


def test_row_at_the_context_limit_leaves_early() -> None:
    """A prompt with room for one token stops at the context limit and its place is refilled."""
    model = _model()
    context = model.config.max_position_embeddings
    prompts = _prompts()
    prompts[1] = [5] * (context - 1)
    out = specdec.generate(model, prompts, drafter="anpd", verifier="exact", max_new_tokens=NEW_TOKENS,
                           max_batch_size=2)
    static = specdec.generate(model, prompts, drafter="anpd", verifier="exact", max_new_tokens=NEW_TOKENS)
    assert out.sequences == static.sequences
    assert out.finish_reasons == static.finish_reasons
    assert out.finish_reasons[1] == "context_length" and len(out.sequences[1]) == 1


@pytest.mark.parametrize("verifier", ["rejection", "typical"])
def test_sampled_rows_do_not_depend_on_the_batch(verifier: str) -> None:
    """With a seed per row, a sampled row is the same alone, in one batch, or refilled into a batch
    (float64 models: see tests/test_determinism.py for why)."""
    from test_determinism import float64_options

    model = _model().to(torch.float64)
    prompts = _prompts()
    seeds = list(range(100, 100 + len(prompts)))
    options = float64_options("draft_model", model)
    kwargs = dict(drafter="draft_model", drafter_options=options, verifier=verifier, temperature=0.9,
                  max_new_tokens=NEW_TOKENS)
    refilled = specdec.generate(model, prompts, seed=seeds, max_batch_size=3, **kwargs)
    together = specdec.generate(model, prompts, seed=seeds, **kwargs)
    assert refilled.sequences == together.sequences
    for prompt, seed, sequence in zip(prompts[:3], seeds, refilled.sequences):
        assert specdec.generate(model, [prompt], seed=[seed], **kwargs).sequences[0] == sequence


def test_fewer_rows_at_once_hold_less_cache() -> None:
    prompts = _prompts()
    refilled = specdec.generate(_model(), prompts, drafter="anpd", max_new_tokens=NEW_TOKENS, max_batch_size=2)
    together = specdec.generate(_model(), prompts, drafter="anpd", max_new_tokens=NEW_TOKENS)
    assert refilled.stats.kv_used_bytes < together.stats.kv_used_bytes
    assert refilled.stats.kv_cache_bytes < together.stats.kv_cache_bytes


def test_invalid_max_batch_size_is_an_error() -> None:
    prompts = _prompts()
    for bad in (0, -1, 2.5, True, "4"):
        with pytest.raises(ValueError, match="max_batch_size must be a positive integer"):
            specdec.generate(_model(), prompts, drafter="anpd", max_batch_size=bad)
    with pytest.raises(ValueError, match="batch_mode='unpadded'"):
        specdec.generate(_model(), prompts, drafter="anpd", batch_mode="padded", max_batch_size=2)
