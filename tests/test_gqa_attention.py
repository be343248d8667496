"""Keys and values of a grouped-query model enter attention with the KV head count on every path of the
runtime (chains, trees, ragged batches, packed or per-row): the cache is never expanded to one copy per
query head (`specdec.attention`; SDPA models, and eager ones: soft-capping, sinks), and outputs stay those of
plain greedy decoding."""

from __future__ import annotations

import pytest
import torch
from conftest import ARCHS, OracleDrafter, RandomTreeDrafter, hf_greedy, tiny_model

import specdec
import specdec.target as target_module
from specdec.attention import attention_view

PROMPTS = [[5, 6, 7, 5, 6, 7, 5, 6], [1, 2, 3], [9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9], [40, 41, 42, 40]]
NEW = 12


@pytest.fixture
def attention_calls(monkeypatch):
    """(query heads, key heads, value heads, masked?) of every SDPA call."""
    calls: list[tuple[int, int, int, bool]] = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(query, key, value, attn_mask=None, *args, **kwargs):
        calls.append((query.shape[1], key.shape[1], value.shape[1], attn_mask is not None))
        return sdpa(query, key, value, attn_mask, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    return calls


def _drafter(kind: str, model, prompts):
    if kind == "chain":
        return OracleDrafter({row: hf_greedy(model, p, NEW) for row, p in enumerate(prompts)}, k=4)
    if kind == "self-draft":  # layer_skip's scratch forwards through transformers' forward on a plan view
        from specdec.drafters.layerskip.drafter import LayerSkipDrafter, LayerSkipOptions

        return LayerSkipDrafter(LayerSkipOptions(skip={"mlp": [0]}, max_draft=3, schedule="own", fast_forward=False))
    return RandomTreeDrafter(model.config.vocab_size, seed=3, max_nodes=8)


@pytest.mark.parametrize("per_row", [False, True], ids=["dense", "per-row"])
@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("kind", ["chain", "tree", "self-draft"])
@pytest.mark.parametrize("arch", [a for a in ARCHS if a != "gpt2"])  # gpt2 has no grouped heads
def test_keys_and_values_enter_attention_with_the_kv_heads(attention_calls, monkeypatch, arch, kind, batch, per_row):
    model = tiny_model(arch)
    kv_heads = model.config.num_key_value_heads
    assert kv_heads < model.config.num_attention_heads
    monkeypatch.setattr(target_module, "ROW_ATTENTION_MIN_WASTE", -1 if per_row else 10**9)
    prompts = PROMPTS[:batch]
    expected = [hf_greedy(model, p, NEW) for p in prompts]  # transformers' own forwards expand: not counted
    drafter = _drafter(kind, model, prompts)
    specdec.generate(model, [1, 2], max_new_tokens=1)  # the support check compares with transformers' forward
    attention_calls.clear()
    out = specdec.generate(model, prompts, drafter=drafter, verifier="exact", max_new_tokens=NEW, controller=False)
    assert out.sequences == expected
    masked = [call for call in attention_calls if call[3]]
    assert masked, "no masked attention ran: the paths under test were not taken"
    assert all(k == kv_heads and v == kv_heads for _, k, v, _ in attention_calls), sorted(set(attention_calls))


def test_the_view_leaves_the_users_model_and_config_alone():
    model = tiny_model("qwen2")
    config_before = model.config.to_dict()
    view = attention_view(model)
    assert view is not model and view.config is not model.config
    assert model.config._attn_implementation == "sdpa" and model.config.to_dict() == config_before
    assert all(a is b for a, b in zip(view.parameters(), model.parameters()))  # shared, not copied
    assert attention_view(model) is view  # kept while the model lives


@pytest.fixture
def attention_matmuls(monkeypatch):
    """(heads of the left operand, heads of the right) of every 4-D matmul: eager attention's two products."""
    calls: list[tuple[int, int]] = []
    matmul = torch.matmul

    def spy(left, right, *args, **kwargs):
        if left.dim() == 4 and right.dim() == 4:
            calls.append((left.shape[1], right.shape[1]))
        return matmul(left, right, *args, **kwargs)

    monkeypatch.setattr(torch, "matmul", spy)
    return calls


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("kind", ["chain", "tree"])
@pytest.mark.parametrize("family", ["gemma2", "gpt_oss"])  # eager: soft-capping; attention sinks
def test_eager_attention_runs_over_the_kv_heads(attention_matmuls, family, kind, batch):
    """Models that need eager attention get transformers' eager computation over the stored KV heads
    (`specdec_eager_*`): both products of every attention call see the KV head count, outputs stay greedy."""
    from families import FAMILIES

    model = FAMILIES[family].build()
    kv_heads = model.config.num_key_value_heads
    assert kv_heads < model.config.num_attention_heads and model.config._attn_implementation == "eager"
    prompts = PROMPTS[:batch]
    expected = [hf_greedy(model, p, NEW) for p in prompts]  # transformers' eager expands: not counted
    drafter = _drafter(kind, model, prompts)
    specdec.generate(model, [1, 2], max_new_tokens=1)  # the support check compares with transformers' forward
    attention_matmuls.clear()
    out = specdec.generate(model, prompts, drafter=drafter, verifier="exact", max_new_tokens=NEW, controller=False)
    assert out.sequences == expected
    assert out.stats.drafted_tokens > 0 and attention_matmuls
    assert all(left == kv_heads and right == kv_heads for left, right in attention_matmuls), sorted(
        set(attention_matmuls))
