"""Model support is measured: models the engine cannot serve get a clear UnsupportedModelError."""

from __future__ import annotations

import inspect

import pytest
import torch
from conftest import tiny_model
from transformers import LlamaConfig, LlamaForCausalLM, LlamaModel, T5Config, T5ForConditionalGeneration

import specdec
from specdec import UnsupportedModelError
from specdec.forward_arguments import CACHE_KEYWORDS, cache_keyword
from specdec.model_support import check_model_supported


class MaskIgnoringLlama(LlamaForCausalLM):
    """Stands in for an architecture that builds its own causal mask and ignores ours."""

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None, **kwargs):
        return super().forward(input_ids=input_ids, attention_mask=None, position_ids=position_ids,
                               past_key_values=past_key_values, **kwargs)


def test_tree_check_refuses_a_model_that_ignores_the_tree_mask() -> None:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    model = MaskIgnoringLlama(config).eval()
    with pytest.raises(UnsupportedModelError, match="MaskIgnoringLlama.*tree-attention check"):
        specdec.generate(model, [1, 2, 3], drafter="none", max_new_tokens=4)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "mistral", "gpt2"])
def test_supported_architectures_pass_the_check(arch: str) -> None:
    check_model_supported(tiny_model(arch))


def test_model_without_lm_head_is_refused() -> None:
    config = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2)
    with pytest.raises(UnsupportedModelError, match="no language-model head"):
        check_model_supported(LlamaModel(config))


def test_encoder_decoder_is_refused() -> None:
    config = T5Config(vocab_size=96, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=2)
    with pytest.raises(UnsupportedModelError, match="encoder-decoder"):
        check_model_supported(T5ForConditionalGeneration(config))


def test_recurrent_models_are_refused() -> None:
    from transformers import MambaConfig, MambaForCausalLM

    model = MambaForCausalLM(MambaConfig(vocab_size=96, hidden_size=32, state_size=4, num_hidden_layers=1))
    with pytest.raises(UnsupportedModelError, match="MambaForCausalLM.forward does not take "):
        specdec.generate(model, [1, 2, 3], drafter="none", max_new_tokens=2)


@pytest.mark.parametrize("keyword", ["cache", "past_key_values"])
def test_a_forward_taking_its_cache_under_either_name_is_served(keyword: str) -> None:
    """transformers 5.24 renamed `past_key_values` to `cache`; a model written against either release (or
    remote code) is served, its cache passed under the name its own forward takes."""
    installed = cache_keyword(LlamaForCausalLM)
    seen: list[object] = []

    class Renamed(LlamaForCausalLM):
        def forward(self, input_ids=None, attention_mask=None, position_ids=None, **kwargs):
            cache = kwargs.pop(keyword, None)
            assert not set(CACHE_KEYWORDS) & set(kwargs), "the cache came under a name this forward does not take"
            if kwargs.get("use_cache"):  # the runtime's forwards (the support probe's plain ones take none)
                seen.append(cache)
            return super().forward(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                                   **{installed: cache}, **kwargs)

    # The signature names the cache keyword, as a model's own forward does.
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)] + [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None)
        for name in ("input_ids", "attention_mask", "position_ids", keyword)]
    Renamed.forward.__signature__ = inspect.Signature(parameters)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    model = Renamed(config).eval()
    assert cache_keyword(model) == keyword
    prompt = [5, 17, 3, 44, 9, 17, 3]
    reference = LlamaForCausalLM(config).eval()
    reference.load_state_dict(model.state_dict())
    expected = reference.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False)[0, len(prompt):]
    seen.clear()
    out = specdec.generate(model, prompt, drafter="anpd", max_new_tokens=12)
    assert out.sequences[0] == expected.tolist()
    assert seen and all(cache is not None for cache in seen)
