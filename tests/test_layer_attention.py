"""Per-layer attention: layer types read from configs, masks per type, and a support check that refuses what
the runtime cannot serve exactly (from the config, before any forward) and cannot be fooled by a cached verdict.

Windows here (4-8 tokens) are shorter than the prompts and outputs, so any mask that ignores them shows.
"""

from __future__ import annotations

import pytest
import torch
from conftest import ForwardCounter, RandomTreeDrafter, hf_greedy
from sampling_drafters import ContextLM, SampledChainDrafter, exact_joint, perturbed_copy
from specdec.drafters.layerskip.drafter import LayerSkipDrafter, LayerSkipOptions
from test_distribution import P_VALUE_THRESHOLD, chi_square_p_value
from transformers import (
    Gemma2Config,
    Gemma2ForCausalLM,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    Llama4TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

import specdec
from specdec import UnsupportedModelError
from specdec.layer_attention import CHUNKED, FULL, SLIDING, LayerKind, layer_attention
from specdec.model_support import check_model_supported
from specdec.sampling import SamplingParams
from specdec.target import TargetRunner

VOCAB = 96
COMMON = {"vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
          "num_key_value_heads": 2, "max_position_embeddings": 256}


def _ready(model):
    model.eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def gemma3(window: int = 8, attn: str = "sdpa", seed: int = 0, **overrides):
    torch.manual_seed(seed)
    config = Gemma3TextConfig(num_hidden_layers=4, head_dim=16, sliding_window=window, sliding_window_pattern=2,
                              attn_implementation=attn, **COMMON, **overrides)
    return _ready(Gemma3ForCausalLM(config))


def gemma2(attn: str = "eager", window: int = 8):
    """transformers 5 builds Gemma 2 only on eager (its SDPA path cannot soft-cap); another
    implementation is set on the config afterwards, as a model loaded with it would carry."""
    torch.manual_seed(0)
    config = Gemma2Config(num_hidden_layers=4, head_dim=16, sliding_window=window, attn_implementation="eager",
                          **COMMON)
    model = _ready(Gemma2ForCausalLM(config))
    model.config._attn_implementation = attn
    return model


def qwen2_mixed(window: int = 8, layers: int = 4, **overrides):
    torch.manual_seed(0)
    settings = {**COMMON, "use_sliding_window": True, **overrides}
    config = Qwen2Config(num_hidden_layers=layers, sliding_window=window, max_window_layers=layers // 2, **settings)
    return _ready(Qwen2ForCausalLM(config))


def mistral(window: int = 8):
    torch.manual_seed(0)
    return _ready(MistralForCausalLM(MistralConfig(num_hidden_layers=2, sliding_window=window, **COMMON)))


PROMPTS = [list(range(3, 23)), list(range(40, 49)), [7] * 5 + list(range(60, 90))]


# -- layer types from configs ----------------------------------------------------------------------
def test_layer_types_from_configs() -> None:
    qwen = layer_attention(Qwen2Config(num_hidden_layers=4, use_sliding_window=True, sliding_window=8,
                                       max_window_layers=2))
    assert qwen.layer_types == (FULL, FULL, SLIDING, SLIDING)
    assert qwen.kinds == (LayerKind(FULL), LayerKind(SLIDING, window=8)) and qwen.mapping
    assert not layer_attention(Qwen2Config(num_hidden_layers=4)).mapping  # no window: all full
    one_window = layer_attention(MistralConfig(num_hidden_layers=3, sliding_window=16))
    assert one_window.kinds == (LayerKind(SLIDING, window=16),) and not one_window.mapping
    assert layer_attention(LlamaConfig(num_hidden_layers=2)).all_full
    gemma = layer_attention(Gemma3TextConfig(num_hidden_layers=4, sliding_window=8, sliding_window_pattern=2))
    assert set(gemma.layer_types) == {FULL, SLIDING} and gemma.longest_span == 8
    llama4 = layer_attention(Llama4TextConfig(num_hidden_layers=4, attention_chunk_size=16))
    assert LayerKind(CHUNKED, chunk=16) in llama4.kinds and llama4.longest_span == 16


def test_unknown_layer_type_is_refused() -> None:
    config = Qwen2Config(num_hidden_layers=2, layer_types=["full_attention", "linear_attention"])
    with pytest.raises(UnsupportedModelError, match="linear_attention"):
        layer_attention(config)


def test_tree_node_attends_to_the_window_ending_at_its_own_position() -> None:
    """Row of 10 committed tokens, window 4; inputs: root (position 10) and a chain of 3 nodes (11-13).
    The node at depth 3 must see keys at positions 10..13 on sliding layers and 0..13 on full ones."""
    model = qwen2_mixed(window=4)
    runner = TargetRunner(model, 1, 32)
    runner.lengths = torch.tensor([10])
    runner.write_start = torch.tensor([10])
    positions = torch.tensor([[10, 11, 12, 13]])
    visible = torch.ones(4, 4, dtype=torch.bool).tril()[None]
    masks = runner._mask(runner.write_start, positions, visible)
    assert set(masks) == {FULL, SLIDING}
    seen_sliding = (masks[SLIDING][0, 0] == 0).nonzero()
    seen_full = (masks[FULL][0, 0] == 0).nonzero()
    deepest_sliding = seen_sliding[seen_sliding[:, 0] == 3, 1].tolist()
    assert deepest_sliding == [10, 11, 12, 13]
    assert seen_full[seen_full[:, 0] == 3, 1].tolist() == list(range(14))
    assert seen_sliding[seen_sliding[:, 0] == 0, 1].tolist() == [7, 8, 9, 10]  # the root: window ends at 10


# -- greedy identity past the windows ----------------------------------------------------------------
@pytest.mark.parametrize("build", [gemma3, gemma2, qwen2_mixed, mistral], ids=["gemma3", "gemma2", "qwen2", "mistral"])
def test_random_trees_past_the_window_equal_generate(build) -> None:
    model = build()
    expected = [hf_greedy(model, prompt, 24) for prompt in PROMPTS]
    for mode in ({}, {"max_batch_size": 2}, {"batch_mode": "padded"}):
        # controller=False: every random tree is verified as drafted (the controller would cut most of them)
        out = specdec.generate(model, PROMPTS, drafter=RandomTreeDrafter(VOCAB, seed=3), verifier="exact",
                               max_new_tokens=24, controller=False, **mode)
        assert out.sequences == expected, mode
        assert out.stats.drafted_tokens > 0


def test_packed_ragged_batch_with_per_row_attention_on_mixed_windows() -> None:
    """Qwen2 takes packed inputs; a row far longer than the others switches to per-row attention, which must
    cut each layer's own (sliding or full) mask."""
    model = qwen2_mixed(window=6)
    prompts = [list(range(1, 9)), [5] * 3 + list(range(10, 95)) + list(range(10, 95)), list(range(20, 32))]
    expected = [hf_greedy(model, prompt, 16) for prompt in prompts]
    out = specdec.generate(model, prompts, drafter=RandomTreeDrafter(VOCAB, seed=1), max_new_tokens=16,
                           packed_inputs=True, controller=False)  # every tree verified as drafted
    assert out.sequences == expected
    assert out.stats.drafted_tokens > 0


def test_layer_skip_skipping_nothing_is_perfect_past_the_window() -> None:
    """The unskipped model drafting on scratch slots must be the target exactly: a wrong scratch mask past
    the window would show as rejected drafts (Qwen2 with windows on its upper layers: layer skipping knows
    the pre-norm layouts, not Gemma's sandwich norms). Every chain is verified as drafted (controller=False): a
    draft that skips nothing costs a target forward a token, and the controller rightly keeps it plain."""
    model = qwen2_mixed(window=6)
    drafter = LayerSkipDrafter(LayerSkipOptions(skip={}, max_draft=4, adaptive=False, draft_weights="model"))
    out = specdec.generate(model, PROMPTS, drafter=drafter, verifier="exact", max_new_tokens=24, controller=False)
    assert out.stats.drafted_tokens > 0
    assert out.stats.acceptance_rate == 1.0
    assert out.sequences == [hf_greedy(model, prompt, 24) for prompt in PROMPTS]


def test_ppd_random_prompts_are_lossless_past_the_window() -> None:
    model = qwen2_mixed(window=6)
    out = specdec.generate(model, PROMPTS, drafter="ppd", max_new_tokens=24,
                           drafter_options={"random_init": True, "tree_size": 16})
    assert out.sequences == [hf_greedy(model, prompt, 24) for prompt in PROMPTS]


# -- rejection sampling keeps the distribution past the window ------------------------------------------
def test_rejection_sampling_keeps_the_distribution_past_the_window() -> None:
    """Chi-square of 3 sampled tokens (20,000 rows, one batch) against the exact joint of a model whose
    window (4) is shorter than the prompt (8), on hybrid layers (one sliding, one full). The same counts are
    tested against the joint of the same weights without a window, which they must fail: the test sees
    a window that is ignored."""
    vocab, steps, rows, prompt = 16, 3, 20_000, [3, 9, 1, 14, 7, 2, 11, 5]
    target = qwen2_mixed(window=4, layers=2, vocab_size=vocab, hidden_size=16, intermediate_size=32,
                         num_attention_heads=2, num_key_value_heads=1, initializer_range=0.5)
    draft = ContextLM(perturbed_copy(target, scale=0.3, seed=1))
    params = SamplingParams(temperature=1.0)
    out = specdec.generate(target, [prompt] * rows, drafter=SampledChainDrafter(draft), verifier="rejection",
                           max_new_tokens=steps, temperature=1.0, seed=0, max_draft_nodes=8)
    tokens = torch.tensor(out.sequences)
    counts = torch.bincount((tokens[:, 0] * vocab + tokens[:, 1]) * vocab + tokens[:, 2], minlength=vocab**steps)
    assert out.stats.acceptance_rate > 0.1  # drafts are accepted and rejected
    assert chi_square_p_value(counts, exact_joint(ContextLM(target), prompt, vocab, steps, params)) > P_VALUE_THRESHOLD
    unwindowed = qwen2_mixed(window=4, layers=2, vocab_size=vocab, hidden_size=16, intermediate_size=32,
                             num_attention_heads=2, num_key_value_heads=1, initializer_range=0.5,
                             use_sliding_window=False)
    assert layer_attention(unwindowed.config).all_full
    wrong_joint = exact_joint(ContextLM(unwindowed), prompt, vocab, steps, params)
    assert chi_square_p_value(counts, wrong_joint) < P_VALUE_THRESHOLD


# -- the support check ----------------------------------------------------------------------------------

def _flash_llama():
    torch.manual_seed(0)
    config = LlamaConfig(num_hidden_layers=2, **COMMON)
    model = _ready(LlamaForCausalLM(config))
    model.config._attn_implementation = "flash_attention_2"  # as loaded with it; no flash-attn package here
    return model


def test_flash_attention_is_refused_from_the_config_without_a_forward() -> None:
    model = _flash_llama()
    counter = ForwardCounter(model)
    with pytest.raises(UnsupportedModelError, match=r"flash_attention_2.*attn_implementation=\"sdpa\""):
        specdec.generate(model, [1, 2, 3], drafter="none", max_new_tokens=4)
    assert counter.calls == 0


@pytest.mark.parametrize("build", [lambda: gemma2(attn="sdpa"), lambda: gemma3(attn_logit_softcapping=30.0)],
                         ids=["gemma2", "gemma3-softcapped"])
def test_sdpa_with_attention_soft_capping_is_refused_without_a_forward(build) -> None:
    model = build()
    counter = ForwardCounter(model)
    with pytest.raises(UnsupportedModelError, match=r"soft-capping.*attn_implementation=\"eager\""):
        specdec.generate(model, [1, 2, 3], drafter="none", max_new_tokens=4)
    assert counter.calls == 0


def test_soft_capping_under_eager_is_served() -> None:
    model = gemma3(attn="eager", attn_logit_softcapping=30.0)
    out = specdec.generate(model, PROMPTS[:2], drafter=RandomTreeDrafter(VOCAB, seed=2), max_new_tokens=16,
                           controller=False)  # every tree verified as drafted
    assert out.sequences == [hf_greedy(model, prompt, 16) for prompt in PROMPTS[:2]]
    assert out.stats.drafted_tokens > 0


@pytest.mark.parametrize("order", ["served_first", "refused_first"])
def test_a_verdict_is_never_inherited_by_another_config_of_the_same_class(order: str) -> None:
    served, refused = gemma2(attn="eager"), gemma2(attn="sdpa")
    flash = _flash_llama()
    plain_llama = _ready(LlamaForCausalLM(LlamaConfig(num_hidden_layers=2, **COMMON)))
    pairs = [(served, True), (refused, False), (plain_llama, True), (flash, False)]
    if order == "refused_first":
        pairs = [(refused, False), (served, True), (flash, False), (plain_llama, True)]
    for model, ok in pairs:
        if ok:
            check_model_supported(model)
        else:
            with pytest.raises(UnsupportedModelError):
                check_model_supported(model)


class _WindowIgnoringQwen2(Qwen2ForCausalLM):
    """Stands in for a model that honours a 4-D mask but builds its own masks when given a mapping
    (it drops our per-layer masks): the probe must see it past the window."""

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None, **kwargs):
        if isinstance(attention_mask, dict):
            attention_mask = attention_mask["full_attention"]
        return super().forward(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                               past_key_values=past_key_values, **kwargs)


def test_the_probe_runs_past_the_window_and_names_what_failed() -> None:
    torch.manual_seed(0)
    config = Qwen2Config(num_hidden_layers=4, use_sliding_window=True, sliding_window=20, max_window_layers=2,
                         **COMMON)
    model = _ready(_WindowIgnoringQwen2(config))
    with pytest.raises(UnsupportedModelError, match=r"_WindowIgnoringQwen2.*sliding_attention window 20.*"
                                                    r"past the longest window/chunk \(20\).*differ.*by \d"):
        check_model_supported(model)


def test_out_of_vocabulary_prompt_ids_are_refused_before_any_forward() -> None:
    model = mistral()
    counter = ForwardCounter(model)
    with pytest.raises(ValueError, match=r"prompt row 1 holds token id 96 at position 2.*96 rows"):
        specdec.generate(model, [[1, 2, 3], [4, 5, 96]], drafter="none", max_new_tokens=4)
    with pytest.raises(ValueError, match=r"prompt row 0 holds token id -3 at position 0"):
        specdec.generate(model, [-3, 5], drafter="none", max_new_tokens=4)
    assert counter.calls == 0


def test_the_probe_fits_a_short_context() -> None:
    """A model whose context is shorter than the probe's usual rows (GPT-2 style learned positions fail
    outside it) is probed within its context and served."""
    torch.manual_seed(0)
    model = _ready(MistralForCausalLM(MistralConfig(num_hidden_layers=2, sliding_window=8,
                                                    **{**COMMON, "max_position_embeddings": 24})))
    check_model_supported(model)
    prompt = list(range(3, 15))
    out = specdec.generate(model, prompt, drafter=RandomTreeDrafter(VOCAB), max_new_tokens=10, controller=False)
    assert out.sequences[0] == hf_greedy(model, prompt, 10)
    assert out.stats.drafted_tokens > 0
