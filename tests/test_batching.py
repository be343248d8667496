"""Batches (EMS-SD): each row of a batch must equal the same prompt run alone, in both batch modes."""

from __future__ import annotations

import functools

import pytest
import torch
from conftest import CPU_ONLY, VOCAB, OracleDrafter, RandomTreeDrafter, hf_greedy, tiny_model
from hypothesis import given
from hypothesis import strategies as st

import specdec
from specdec.engine import compaction_order
from specdec.kv_cache import RaggedKVCache
from specdec.registry import known_names

NEW_TOKENS = 12


@functools.lru_cache(maxsize=1)
def _model():
    return tiny_model("llama", seed=4)


def _prompts(batch: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(batch)
    lengths = [3 + (7 * i) % 17 for i in range(batch)]  # all different-ish, 3..19 tokens
    # Repetitive prompts give n-gram drafters something to find.
    return [(torch.randint(1, VOCAB, (5,), generator=generator).tolist() * 4)[:n] for n in lengths]


@functools.cache
def _alone(prompt: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(hf_greedy(_model(), list(prompt), NEW_TOKENS))


def _drafter(kind: str, prompts: list[list[int]]):
    if kind == "random":
        return RandomTreeDrafter(VOCAB, seed=7, max_nodes=6)
    if kind == "oracle":
        return OracleDrafter({row: list(_alone(tuple(p))) for row, p in enumerate(prompts)}, k=4)
    return kind


@pytest.mark.parametrize("batch_mode", ["unpadded", "padded"])
@pytest.mark.parametrize("batch", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("kind", ["none", "random", "oracle", "anpd"])
def test_rows_equal_alone(kind: str, batch: int, batch_mode: str) -> None:
    prompts = _prompts(batch)
    # The test drafters' trees are verified as drafted (controller=False): the controller would cut random ones.
    planted = kind in ("random", "oracle")
    out = specdec.generate(_model(), prompts, drafter=_drafter(kind, prompts), verifier="exact",
                           max_new_tokens=NEW_TOKENS, batch_mode=batch_mode, controller=not planted)
    for prompt, sequence in zip(prompts, out.sequences):
        assert sequence == list(_alone(tuple(prompt)))
    assert out.stats.new_tokens == batch * NEW_TOKENS
    if planted:
        assert out.stats.drafted_tokens > 0


def test_padded_mode_leaves_holes_and_unpadded_none() -> None:
    prompts = _prompts(4)
    drafter = OracleDrafter({row: list(_alone(tuple(p)))[: 2 + 3 * row] for row, p in enumerate(prompts)}, k=4)
    stats = {}
    for mode in ("unpadded", "padded"):
        stats[mode] = specdec.generate(_model(), prompts, drafter=drafter, verifier="exact",
                                       max_new_tokens=NEW_TOKENS, batch_mode=mode).stats
    assert stats["unpadded"].kv_padding_slots == 0
    assert stats["padded"].kv_padding_slots > 0


def test_rows_finishing_early_leave_the_batch() -> None:
    prompts = _prompts(3)
    eos = _alone(tuple(prompts[1]))[2]  # row 1 stops after 3 tokens
    out = specdec.generate(_model(), prompts, drafter="none", max_new_tokens=NEW_TOKENS, eos_token_id=eos)
    lengths = [len(s) for s in out.sequences]
    # row-steps = tokens actually generated (one per step with drafter none): finished rows cost nothing
    assert out.stats.steps == sum(lengths)
    assert out.stats.batch_steps == max(lengths)


def test_rows_leaving_from_the_front_keep_their_caches() -> None:
    """Rows 0 and 1 know their whole continuation and leave first; the last rows take their places in
    the KV cache (`compaction_order`). Every row still equals its prompt alone."""
    prompts = _prompts(6)
    known = {row: list(_alone(tuple(p))) if row < 2 else [] for row, p in enumerate(prompts)}
    out = specdec.generate(_model(), prompts, drafter=OracleDrafter(known, k=4), verifier="exact",
                           max_new_tokens=NEW_TOKENS)
    for prompt, sequence in zip(prompts, out.sequences):
        assert sequence == list(_alone(tuple(prompt)))
    assert max(out.stats.row_steps[:2]) < min(out.stats.row_steps[2:]) == NEW_TOKENS


@given(st.integers(1, 12).flatmap(lambda size: st.tuples(st.just(size), st.sets(st.integers(0, size - 1)))))
def test_compaction_moves_only_rows_past_the_new_end(case: tuple[int, set[int]]) -> None:
    size, leaving = case
    order = compaction_order(size, leaving)
    count = size - len(leaving)
    assert sorted(order) == [place for place in range(size) if place not in leaving]
    moved = [place for place, source in enumerate(order) if source != place]
    assert all(order[place] >= count for place in moved)
    assert len(moved) == len([place for place in leaving if place < count])


def test_cache_keeps_rows_in_place() -> None:
    """select_rows keeps any order of rows (a drafter's own cache follows the engine's by row id), copies
    into the buffers it has instead of allocating new ones, and keeps reporting the bytes it holds."""
    cache = RaggedKVCache(num_layers=2, capacity=8)
    cache.set_plan(torch.zeros(5, dtype=torch.long), steps=3)
    keys, values = torch.randn(5, 2, 3, 4), torch.randn(5, 2, 3, 4)
    for index in range(2):
        cache.update(keys + index, values - index, index)
    held = cache.memory_bytes()
    pointer = cache.layers[0].keys.data_ptr()
    for order in ([0, 4, 2, 3], [3, 0, 1], [1, 2]):  # a place from the end; a permutation; the front leaves
        expected = [(layer.keys[order].clone(), layer.values[order].clone()) for layer in cache.layers]
        cache.select_rows(torch.tensor(order))
        for layer, (keys_now, values_now) in zip(cache.layers, expected):
            assert torch.equal(layer.keys, keys_now) and torch.equal(layer.values, values_now)
        assert cache.layers[0].keys.data_ptr() == pointer and cache.memory_bytes() == held


@pytest.mark.parametrize("batch", [1, 2, 4, 8, 16])
def test_every_registered_drafter_is_batch_safe(batch: int) -> None:
    """Every registered drafter (options for a plain tiny model from test_composition) runs batched,
    in both batch modes, and each row matches its prompt alone."""
    from test_composition import DRAFTER_OPTIONS_FOR_TINY_MODEL

    prompts = _prompts(batch)
    for name in known_names("drafter"):
        options_factory = DRAFTER_OPTIONS_FOR_TINY_MODEL.get(name)
        options = options_factory(_model()) if callable(options_factory) else options_factory
        for mode in ("unpadded", "padded"):
            out = specdec.generate(_model(), prompts, drafter=name, drafter_options=options, verifier="exact",
                                   max_new_tokens=NEW_TOKENS, batch_mode=mode)
            for prompt, sequence in zip(prompts, out.sequences):
                assert sequence == list(_alone(tuple(prompt))), (name, mode)


@pytest.fixture
def layouts():
    """Record the layout (packed?, per-row?) of every call of specdec's ragged attention function."""
    from transformers import AttentionInterface

    from specdec.attention import SPECDEC_ATTENTION, specdec_attention

    seen = []

    def spy(*args, **kwargs):
        layout = kwargs.get("specdec_layout")
        if layout is not None:  # a ragged forward
            seen.append((layout.flat is not None, layout.rows is not None))
        return specdec_attention(*args, **kwargs)

    AttentionInterface.register(SPECDEC_ATTENTION, spy)
    yield seen
    AttentionInterface.register(SPECDEC_ATTENTION, specdec_attention)


@pytest.mark.parametrize("per_row", [False, pytest.param(True, marks=CPU_ONLY)])
@pytest.mark.parametrize("kind", ["random", "anpd"])
def test_packed_inputs_are_used_and_token_identical(kind: str, per_row: bool, layouts: list,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Unpadded mode packs the rows' real verification inputs (no padding to the widest row) through
    the registered attention function, with dense or per-row attention; outputs equal both the
    padded-input run and each prompt alone."""
    import specdec.target as target_module

    monkeypatch.setattr(target_module, "ROW_ATTENTION_MIN_WASTE", -1 if per_row else 10**9)
    prompts = _prompts(5)
    # controller=False: both runs verify the same drafts, so their input padding compares.
    packed = specdec.generate(_model(), prompts, drafter=_drafter(kind, prompts), verifier="exact",
                              max_new_tokens=NEW_TOKENS, controller=False)
    assert (True, per_row) in layouts, "packed verification never ran"
    layouts.clear()
    plain = specdec.generate(_model(), prompts, drafter=_drafter(kind, prompts), verifier="exact",
                             max_new_tokens=NEW_TOKENS, packed_inputs=False, controller=False)
    assert not any(is_packed for is_packed, _ in layouts)
    assert packed.sequences == plain.sequences
    assert packed.stats.input_padding_ratio == plain.stats.input_padding_ratio > 0
    for prompt, sequence in zip(prompts, packed.sequences):
        assert sequence == list(_alone(tuple(prompt)))


@CPU_ONLY
def test_per_row_attention_for_plain_decoding(layouts: list, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows of very different cache lengths attend one SDPA call each over their own slots only."""
    import specdec.target as target_module

    monkeypatch.setattr(target_module, "ROW_ATTENTION_MIN_WASTE", 2)
    prompts = _prompts(4)
    out = specdec.generate(_model(), prompts, drafter="none", verifier="exact", max_new_tokens=NEW_TOKENS)
    assert (False, True) in layouts
    for prompt, sequence in zip(prompts, out.sequences):
        assert sequence == list(_alone(tuple(prompt)))


def test_padded_mode_pays_in_memory_and_holes() -> None:
    """EMS-SD's claims as measured quantities: the padded mode adds holes while decoding (its padding
    ratio), so its exact-size KV need is at least the unpadded cache's."""
    prompts = _prompts(4)
    drafter = OracleDrafter({row: list(_alone(tuple(p)))[: 2 + 3 * row] for row, p in enumerate(prompts)}, k=4)
    stats = {mode: specdec.generate(_model(), prompts, drafter=drafter, verifier="exact", max_new_tokens=NEW_TOKENS,
                                    batch_mode=mode).stats for mode in ("unpadded", "padded")}
    assert stats["unpadded"].kv_holes_added == 0 < stats["padded"].kv_holes_added
    assert 0 < stats["unpadded"].kv_used_bytes <= stats["padded"].kv_used_bytes


@pytest.mark.parametrize("arch, overrides", [("qwen2", {}), ("mistral", {})])
def test_packed_inputs_other_families(arch: str, overrides: dict) -> None:
    """Packing covers the Llama family: Qwen2 and Mistral (GQA) stay token-identical."""
    import specdec.target as target_module

    model = tiny_model(arch, seed=5, **overrides)
    assert target_module.supports_packed_inputs(model)
    prompts = _prompts(4)
    # controller=False: every ragged draft is verified as proposed (the controller, pricing random drafts, may cut
    # them all to nothing, and then no step is ragged).
    out = specdec.generate(model, prompts, drafter=RandomTreeDrafter(VOCAB, seed=3, max_nodes=6), verifier="exact",
                           max_new_tokens=NEW_TOKENS, controller=False)
    assert out.stats.input_padding_ratio > 0
    for prompt, sequence in zip(prompts, out.sequences):
        assert sequence == hf_greedy(model, prompt, NEW_TOKENS)


@pytest.mark.parametrize("per_row", [False, True])
def test_prefill_computes_only_real_prompt_tokens(per_row: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Prompts of different lengths are prefilled packed: the model sees sum(lengths) tokens, not
    batch x longest, and the cache's prompt slots equal a right-padded prefill's."""
    import specdec.target as target_module

    monkeypatch.setattr(target_module, "ROW_ATTENTION_MIN_WASTE", -1 if per_row else 10**9)
    model = _model()
    prompts = _prompts(4)
    lengths = torch.tensor([len(p) - 1 for p in prompts])
    ids = torch.zeros(len(prompts), int(lengths.max()), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, : len(prompt) - 1] = torch.tensor(prompt[:-1])
    seen = []
    hook = model.get_input_embeddings().register_forward_hook(lambda _m, args, _o: seen.append(args[0].numel()))
    try:
        runners = {packed: target_module.TargetRunner(model, len(prompts), 64, packed_inputs=packed)
                   for packed in (True, False)}
        for runner in runners.values():
            runner.prefill(ids, lengths)
    finally:
        hook.remove()
    assert seen == [int(lengths.sum()), ids.numel()]
    for ours, reference in zip(runners[True].cache.layers, runners[False].cache.layers):
        for row, length in enumerate(lengths.tolist()):
            torch.testing.assert_close(ours.keys[row, :, :length], reference.keys[row, :, :length])
            torch.testing.assert_close(ours.values[row, :, :length], reference.values[row, :, :length])


def test_packed_inputs_switch_is_explicit() -> None:
    """packed_inputs=True is an error where it cannot happen (never a silent fallback to padding)."""
    prompts = _prompts(3)
    with pytest.raises(ValueError, match="batch_mode='unpadded'"):
        specdec.generate(_model(), prompts, drafter="anpd", batch_mode="padded", packed_inputs=True)
    with pytest.raises(ValueError, match="Llama-family"):
        specdec.generate(tiny_model("gpt2"), prompts, drafter="anpd", packed_inputs=True, max_new_tokens=2)
    with pytest.raises(ValueError, match="True, False or None"):
        specdec.generate(_model(), prompts, drafter="anpd", packed_inputs="yes")
    out = specdec.generate(_model(), prompts, drafter="anpd", max_new_tokens=NEW_TOKENS, packed_inputs=True)
    assert out.sequences == [list(_alone(tuple(p))) for p in prompts]


@pytest.mark.parametrize("batch_mode", ["unpadded", "padded"])
def test_drafts_wider_than_the_reserved_slots_grow_the_cache(batch_mode: str) -> None:
    """The engine reserves DRAFT_SLOTS_RESERVED draft slots per row, not max_draft_nodes: wider trees
    near the end of a run grow the buffers, and outputs stay identical."""
    from specdec.engine import DRAFT_SLOTS_RESERVED

    prompts = _prompts(3)
    wide = RandomTreeDrafter(VOCAB, seed=11, max_nodes=3 * DRAFT_SLOTS_RESERVED)
    out = specdec.generate(_model(), prompts, drafter=wide, verifier="exact", max_new_tokens=NEW_TOKENS,
                           batch_mode=batch_mode, controller=False)  # every wide tree verified, uncut
    narrow = specdec.generate(_model(), prompts, drafter="none", verifier="exact", max_new_tokens=NEW_TOKENS,
                              batch_mode=batch_mode)
    assert out.sequences == narrow.sequences == [list(_alone(tuple(p))) for p in prompts]
    assert out.stats.kv_cache_bytes > narrow.stats.kv_cache_bytes  # the wide run's buffers grew
