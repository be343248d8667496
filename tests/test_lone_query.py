"""A one-row query in bfloat16 on a CPU runs through SDPA as two rows (`specdec.attention.lone_query`):
torch's CPU flash-attention kernel is ~4x slower for one query row than for two in bfloat16, the bundled model's
dtype. The pair must attend exactly as the lone row (every key, no causal cut), and every attention path of the
runtime that meets one row (plain steps, per-row attention of ragged batches, layer_skip's lean forward) uses it."""

from __future__ import annotations

import types

import pytest
import torch
from conftest import CPU_ONLY, tiny_model
from transformers import LlamaConfig, LlamaForCausalLM

import specdec
import specdec.target as target_module
from specdec.attention import grouped_sdpa, lone_query

pytestmark = CPU_ONLY  # (what it works around is a CPU kernel's)


def test_lone_query_is_only_for_one_row_in_bfloat16():
    row = torch.randn(2, 4, 1, 8)
    assert lone_query(row, None) is None  # float32 and float16: one row is not the slower there
    assert lone_query(row.to(torch.float16), None) is None
    assert lone_query(torch.randn(2, 4, 3, 8, dtype=torch.bfloat16), None) is None
    mask = torch.rand(2, 1, 1, 5) > 0.5
    query, doubled_mask = lone_query(row.to(torch.bfloat16), mask)
    assert query.shape == (2, 4, 2, 8) and query.is_contiguous()
    assert torch.equal(query[:, :, 0], row.to(torch.bfloat16)[:, :, 0]) and torch.equal(query[:, :, 1], query[:, :, 0])
    assert doubled_mask.shape == (2, 1, 2, 5) and torch.equal(doubled_mask[:, :, 1], mask[:, :, 0])


@pytest.mark.parametrize("kv_heads", [4, 2], ids=["mha", "gqa"])
@pytest.mark.parametrize("masked", [False, True])
def test_a_doubled_lone_query_attends_to_every_key(kv_heads, masked):
    """Against attention computed in float64 from the same bfloat16 numbers. The last key dominates, so a causal
    cut (a two-row query with no mask would be causal in transformers' SDPA path unless told otherwise) or a
    wrong row would miss it by far more than bfloat16's rounding."""
    torch.manual_seed(0)
    heads, length, dim = 4, 300, 16
    query = torch.randn(1, heads, 1, dim).to(torch.bfloat16)
    key = torch.randn(1, kv_heads, length, dim).to(torch.bfloat16)
    value = torch.randn(1, kv_heads, length, dim).to(torch.bfloat16)
    key[:, :, -1] = (query[0, : kv_heads, 0] * 4).to(torch.bfloat16)  # (each KV head's first query head)
    value[:, :, -1] = 5.0
    mask = torch.ones(1, 1, 1, length, dtype=torch.bool) if masked else None
    module = types.SimpleNamespace(num_key_value_groups=heads // kv_heads, is_causal=True, training=False)
    out = grouped_sdpa(module, query, key, value, mask, scaling=dim**-0.5)  # [B, T, H, D]
    expanded_key = key.double().repeat_interleave(heads // kv_heads, dim=1)
    expanded_value = value.double().repeat_interleave(heads // kv_heads, dim=1)
    weights = torch.softmax(query.double() @ expanded_key.transpose(2, 3) * dim**-0.5, dim=-1)
    reference = (weights @ expanded_value).transpose(1, 2)
    assert out.shape == (1, 1, heads, dim)
    assert torch.allclose(out.double(), reference, atol=0.03, rtol=0.02)
    assert (reference[0, 0, :, 0].abs() > 0.5).any()  # the dominant key matters: a causal cut would not see it


def _half_llama(kv_heads: int) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=kv_heads, max_position_embeddings=256)
    model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


@pytest.mark.parametrize("path", ["plain", "per-row", "lean self-draft"])
def test_no_attention_call_of_the_runtime_takes_a_lone_half_precision_row(monkeypatch, path):
    """Every SDPA call made while decoding in bfloat16 has at least two query rows (folded grouped heads count)."""
    model = _half_llama(4) if path != "lean self-draft" else tiny_model().to(torch.bfloat16)
    rows: list[int] = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(query, key, value, *args, **kwargs):
        rows.append(query.shape[2])
        return sdpa(query, key, value, *args, **kwargs)

    prompts = [[5, 6, 7, 5, 6, 7, 5, 6], [1, 2, 3], [9, 8, 9, 8, 9], [40, 41, 42, 40]]
    kwargs: dict = {"drafter": "none"}
    if path == "per-row":
        monkeypatch.setattr(target_module, "ROW_ATTENTION_MIN_WASTE", -1)
        kwargs = {"drafter": "anpd", "controller": False}
    elif path == "lean self-draft":
        from specdec.drafters.layerskip.drafter import LayerSkipDrafter, LayerSkipOptions

        kwargs = {"drafter": LayerSkipDrafter(LayerSkipOptions(skip={"mlp": [0]}, max_draft=3, schedule="own")),
                  "controller": False}
        prompts = prompts[:1]
    specdec.generate(model, [1, 2], max_new_tokens=1)  # the support check runs transformers' forward: not counted
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    out = specdec.generate(model, prompts if path == "per-row" else prompts[:1], max_new_tokens=12, **kwargs)
    assert all(len(seq) == 12 for seq in out.sequences)
    assert rows and min(rows) >= 2
