"""Model support is measured: models the engine cannot serve get a clear UnsupportedModelError."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_model
from transformers import LlamaConfig, LlamaForCausalLM, LlamaModel, T5Config, T5ForConditionalGeneration

import specdec
from specdec import UnsupportedModelError
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
    with pytest.raises(UnsupportedModelError, match="MambaForCausalLM.forward does not take .*past_key_values"):
        specdec.generate(model, [1, 2, 3], drafter="none", max_new_tokens=2)
