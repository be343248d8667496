"""Tiny random-init causal LMs of many transformers (5.x) model families, for tests and probes.

A helper module, not a test file: `FAMILIES[name].build()` gives a small model (vocab 96, hidden 64,
2 layers, 4 query heads over 2 KV heads where the family allows) with every sliding window and attention
chunk at 16 tokens or fewer, so a ~20-token prompt plus 24 new tokens runs past them, and hybrid families
have both of their layer kinds. `build_draft()` gives a 1-layer model of the same family and vocabulary.

Each `Family` also records, as data read from the installed transformers' configuration_*.py and
modeling_*.py, what specdec needs to know about the family's attention: layer types after config init,
window / chunk sizes, soft-capping, attention sinks, whether the base model's forward takes a dict
{layer type: 4-D mask} as `attention_mask` (`causal_mask_mapping`), and whether a single 4-D float
additive mask is used as given. `scripts/families_probe.py` checks these records against built models.

Findings from the transformers 5.23 source (the same for every family below unless its notes say more):
- Every family builds its masks through masking_utils.create_causal_mask / create_sliding_window_causal_mask
  / create_chunked_causal_mask, whose _preprocess_mask_arguments returns a 4-D `attention_mask` as is. So a
  4-D float mask is always used as given, and for a model with windowed or chunked layers that one mask goes
  to every layer: the window / chunk is then only applied if the caller put it in the mask (the flash
  kernels alone also get a `sliding_window` argument). Families that take a dict can get one mask per
  layer type instead; families without a dict have a single layer kind (all windowed or all full).
- eager attention adds the mask (`attn_weights + attention_mask`): a 4-D mask for an eager model must be
  float additive, a bool mask would be added as 0/1.
- The attention implementation lives in `config._attn_implementation` (a plain property, no checks):
  `model.config._attn_implementation = "flash_attention_2"` after building on sdpa gives a model whose
  config says flash_attention_2 without flash-attn installed (the decoder layers share that config object).
  Asking for it at build time (`Config(attn_implementation="flash_attention_2")` then `Model(config)`, or
  `model.set_attn_implementation("flash_attention_2")`) raises ImportError without the package; a forward
  of the relabelled model raises ImportError too (transformers then looks for the `kernels` package).
  Gemma 2 and GPT-OSS declare `_supports_sdpa = False`, so "sdpa" must also be set that way; then Gemma 2's
  forward raises ValueError (sdpa refuses `softcap`) and GPT-OSS runs without its attention sinks.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
import transformers

VOCAB = 96
LLAMA3_VOCAB = 128256
HIDDEN = 64
HEADS = 4
KV_HEADS = 2
HEAD_DIM = HIDDEN // HEADS
LAYERS = 2
INTERMEDIATE = 128
POSITIONS = 256
WINDOW = 16
CHUNK = 16

# Shared by the Llama-style configs (the names every family below except GPT-2 / GPT-NeoX / Falcon accepts).
_LLAMA_LIKE = {"hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE, "num_attention_heads": HEADS,
               "num_key_value_heads": KV_HEADS, "max_position_embeddings": POSITIONS}
_GEMMA_LIKE = {**_LLAMA_LIKE, "head_dim": HEAD_DIM, "query_pre_attn_scalar": HEAD_DIM}


@dataclass(frozen=True)
class Family:
    """One model family: how to build it, and what its config and modeling code do with attention."""

    name: str
    model_class: str  # transformers class name
    config_class: str
    config_kwargs: dict[str, Any]  # tiny-size kwargs; num_hidden_layers is added by build()
    attn_implementation: str  # what build() uses by default ("sdpa" unless the family needs eager)
    layer_types: tuple[str, ...] | None  # config.layer_types after init (LAYERS layers); None = no attribute
    sliding_window: int | None  # config.sliding_window after init (note Qwen2-MoE's 0 when off)
    attention_chunk_size: int | None = None  # Llama 4 chunked attention
    attn_logit_softcapping: float | None = None
    final_logit_softcapping: float | None = None
    attention_sinks: bool = False  # per-head learned sink logits (GPT-OSS)
    dict_mask: bool = False  # base forward takes {layer type: 4-D mask} as attention_mask
    mask_4d_as_is: bool = True  # a single 4-D float additive mask is used as given (window not re-applied)
    moe: bool = False
    vocab_size: int = VOCAB
    initializer_range: float = 0.2  # see INIT_NOTE
    notes: str = ""

    def config(self, layers: int = LAYERS, attn_implementation: str | None = None) -> Any:
        cls = getattr(transformers, self.config_class)
        kwargs = copy.deepcopy(self.config_kwargs)  # configs edit rope_parameters in place
        kwargs[_layers_key(self.config_class)] = layers
        for key, value in _TOKEN_IDS.items():  # inside the tiny vocabulary (defaults: real ids like 128000)
            kwargs.setdefault(key, value)
        kwargs.setdefault("initializer_range", self.initializer_range)
        return cls(attn_implementation=attn_implementation or self.attn_implementation, **kwargs)

    def build(self, seed: int = 0, attn_implementation: str | None = None, layers: int = LAYERS) -> Any:
        """A random-init model in eval mode, eos disabled (runs go to max length), pad 0.

        `attn_implementation` other than the family's default: built on the default, then set on the config
        (`config._attn_implementation`), which is how a flash-attention config exists without the package
        and how Gemma 2 / GPT-OSS get "sdpa" (Gemma 2's forward then raises ValueError on its softcap;
        GPT-OSS runs without its sinks).
        """
        wanted = attn_implementation or self.attn_implementation
        torch.manual_seed(seed)
        model = getattr(transformers, self.model_class)(self.config(layers))
        if wanted != model.config._attn_implementation:
            set_attn_implementation(model, wanted)
        model.eval()
        model.generation_config.eos_token_id = None
        model.generation_config.pad_token_id = 0
        return model

    def build_draft(self, seed: int = 1, attn_implementation: str | None = None) -> Any:
        """A 1-layer model of the same family and vocabulary (a different seed than the target)."""
        return self.build(seed=seed, attn_implementation=attn_implementation, layers=1)


def set_attn_implementation(model: Any, attn_implementation: str) -> Any:
    """Label `model` with an attention implementation without transformers' availability checks.

    `config._attn_implementation` is read at every forward by the attention modules (ALL_ATTENTION_FUNCTIONS)
    and by masking_utils, and the decoder layers share the model's config object, so this switches the
    implementation for real: "sdpa" on GPT-OSS runs SDPA without the sinks; "flash_attention_2" without
    flash-attn installed gives a model that fails at its first forward (ImportError) but whose config can be
    inspected and refused.
    """
    model.config._attn_implementation = attn_implementation
    return model


_TOKEN_IDS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}


def _layers_key(config_class: str) -> str:
    return "n_layer" if config_class == "GPT2Config" else "num_hidden_layers"


def gemma2_sdpa(seed: int = 0) -> Any:
    """Gemma 2 labelled sdpa (transformers refuses to build it so); a forward raises ValueError."""
    return FAMILIES["gemma2"].build(seed=seed, attn_implementation="sdpa")


def llama_flash_attention_2(seed: int = 0) -> Any:
    """A Llama whose config says flash_attention_2, without flash-attn installed (a forward: ImportError)."""
    return FAMILIES["llama"].build(seed=seed, attn_implementation="flash_attention_2")


INIT_NOTE = """\
Weights are drawn with initializer_range 0.2 instead of the configs' 0.02. At 0.02 Gemma, Cohere 2,
Starcoder2, SmolLM3 and GPT-2 repeat one token for all 24 greedy steps (Falcon, Gemma 2 / 3 two to seven
distinct tokens), and on Cohere 2 / Starcoder2 dropping the window changes no greedy token, so a test on
them would catch little. At 0.2 (three prompts each) the families give 5-24 distinct tokens in 24, mostly
13 or more; dropping a window / chunk flips 7-24 of the 24 greedy tokens (teacher-forced); the smallest
top-1/top-2 logit gap seen (2e-4) stays far above float32 noise. Exceptions: Gemma (tied head) 0.3;
Gemma 2 / 3 untie the head (tied, they repeat one token at every range tried); Falcon 0.6."""

# Llama 3.1 RoPE scaled down: original context 128 (real 8192) so the llama3 frequency split falls inside a
# 16-wide head (wavelengths above 128 are scaled by 1/8, below 32 kept, smoothed between).
_LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 128}
# GPT-OSS's default YaRN (factor 32 over 4096) scaled down to factor 8 over 32 = the 256 positions.
_GPT_OSS_ROPE = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 8.0, "beta_fast": 32.0,
                 "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 32}

_FULL = "full_attention"
_SLIDING = "sliding_attention"
_CHUNKED = "chunked_attention"

_ALL = [
    Family(
        "llama", "LlamaForCausalLM", "LlamaConfig", {**_LLAMA_LIKE, "vocab_size": VOCAB},
        "sdpa", None, None,
        notes="plain Llama; no layer_types, no window; one mask for all layers"),
    Family(
        "llama3_128k", "LlamaForCausalLM", "LlamaConfig",
        {**_LLAMA_LIKE, "vocab_size": LLAMA3_VOCAB, "max_position_embeddings": 1024,
         "rope_parameters": dict(_LLAMA3_ROPE)},
        "sdpa", None, None, vocab_size=LLAMA3_VOCAB,
        notes="Llama 3 style: vocab 128256 (untied head, ~16.5M params, all in embedding + head), "
              "max positions 1024; rope_parameters (transformers 5's name for rope_scaling, which is still "
              "accepted and moved there) rope_type llama3 over an original 128 positions"),
    Family(
        "mistral", "MistralForCausalLM", "MistralConfig",
        {**_LLAMA_LIKE, "vocab_size": VOCAB, "sliding_window": WINDOW},
        "sdpa", None, WINDOW,
        notes="sliding_window on every layer (no layer_types; the config warns if given one); the model "
              "builds one mask with create_sliding_window_causal_mask when config.sliding_window is set"),
    Family(
        "mixtral", "MixtralForCausalLM", "MixtralConfig",
        {**_LLAMA_LIKE, "vocab_size": VOCAB, "intermediate_size": 64, "sliding_window": WINDOW,
         "num_local_experts": 4, "num_experts_per_tok": 2},
        "sdpa", None, WINDOW, moe=True,
        notes="MoE (4 experts, top 2); sliding_window on every layer like Mistral; one mask"),
    Family(
        "qwen2", "Qwen2ForCausalLM", "Qwen2Config", {**_LLAMA_LIKE, "vocab_size": VOCAB},
        "sdpa", (_FULL, _FULL), None, dict_mask=True,
        notes="use_sliding_window=False: config sets sliding_window=None, all layers full"),
    Family(
        "qwen2_windows", "Qwen2ForCausalLM", "Qwen2Config",
        {**_LLAMA_LIKE, "vocab_size": VOCAB, "use_sliding_window": True, "sliding_window": WINDOW,
         "max_window_layers": 1},
        "sdpa", (_FULL, _SLIDING), WINDOW, dict_mask=True,
        notes="use_sliding_window=True, max_window_layers=1: layers i >= max_window_layers slide (the "
              "opposite of what the name suggests), so layer 0 full, layer 1 window 16"),
    Family(
        "qwen2_moe", "Qwen2MoeForCausalLM", "Qwen2MoeConfig",
        {**_LLAMA_LIKE, "vocab_size": VOCAB, "num_experts": 4, "num_experts_per_tok": 2,
         "moe_intermediate_size": 32, "shared_expert_intermediate_size": 64},
        "sdpa", (_FULL, _FULL), 0, dict_mask=True, moe=True,
        notes="MoE with shared expert; use_sliding_window=False makes config.sliding_window 0 (not None!); "
              "if enabled, windows go on even layers i < max_window_layers"),
    Family(
        "qwen3", "Qwen3ForCausalLM", "Qwen3Config",
        {**_LLAMA_LIKE, "vocab_size": VOCAB, "head_dim": HEAD_DIM},
        "sdpa", (_FULL, _FULL), None, dict_mask=True,
        notes="q/k RMSNorm; layer_types rule as Qwen2; windows off (as in released checkpoints)"),
    Family(
        "qwen3_moe", "Qwen3MoeForCausalLM", "Qwen3MoeConfig",
        {**_LLAMA_LIKE, "vocab_size": VOCAB, "head_dim": HEAD_DIM, "num_experts": 4, "num_experts_per_tok": 2,
         "moe_intermediate_size": 32},
        "sdpa", None, None, moe=True,
        notes="MoE; no layer_types attribute, one mask (sliding on every layer if use_sliding_window)"),
    Family(
        "gemma", "GemmaForCausalLM", "GemmaConfig", {**_GEMMA_LIKE, "vocab_size": VOCAB},
        "sdpa", None, None, initializer_range=0.3,
        notes="embeddings scaled by sqrt(hidden); tied head; no window"),
    Family(
        "gemma2", "Gemma2ForCausalLM", "Gemma2Config",
        {**_GEMMA_LIKE, "vocab_size": VOCAB, "sliding_window": WINDOW, "tie_word_embeddings": False},
        "eager", (_SLIDING, _FULL), WINDOW, attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
        dict_mask=True,
        notes="_supports_sdpa=False; relabelled to sdpa (build(attn_implementation='sdpa')) its forward "
              "raises ValueError: transformers 5.23's sdpa_attention_forward refuses a softcap kwarg "
              "instead of dropping it; default layer_types alternate sliding (even i) / full; head untied"),
    Family(
        "gemma3", "Gemma3ForCausalLM", "Gemma3TextConfig",
        {**_GEMMA_LIKE, "vocab_size": VOCAB, "sliding_window": WINDOW, "sliding_window_pattern": 2,
         "tie_word_embeddings": False},
        "sdpa", (_SLIDING, _FULL), WINDOW, dict_mask=True,
        notes="Gemma3TextConfig: sliding_window_pattern=2 -> every 2nd layer full; separate RoPE per layer "
              "type (local theta 1e4, global 1e6); softcaps None; q/k norm; head untied"),
    Family(
        "llama4", "Llama4ForCausalLM", "Llama4TextConfig",
        {**_LLAMA_LIKE, "vocab_size": VOCAB, "head_dim": HEAD_DIM, "intermediate_size": 64,
         "intermediate_size_mlp": INTERMEDIATE, "num_local_experts": 4, "num_experts_per_tok": 1,
         "interleave_moe_layer_step": 2, "attention_chunk_size": CHUNK, "no_rope_layer_interval": 2,
         "floor_scale": 8},
        "sdpa", (_CHUNKED, _FULL), None, attention_chunk_size=CHUNK, dict_mask=True, moe=True,
        notes="no_rope_layers=[1, 0] (1 = uses RoPE): RoPE layers are chunked_attention, every "
              "no_rope_layer_interval-th layer is NoPE + full_attention; layer 1 MoE (interleave step 2), "
              "layer 0 dense; _supports_flash_attn=False; NoPE layers scale queries by "
              "log1p(floor((pos+1)/floor_scale))*attn_scale+1 with pos from "
              "past_key_values.get_seq_length(), not position_ids: floor_scale=8 (real 8192) makes that "
              "active within the test's lengths"),
    Family(
        "phi", "PhiForCausalLM", "PhiConfig", {**_LLAMA_LIKE, "vocab_size": VOCAB},
        "sdpa", None, None,
        notes="partial rotary (0.5), parallel attention+MLP, LayerNorm; no window"),
    Family(
        "phi3", "Phi3ForCausalLM", "Phi3Config",
        {**_LLAMA_LIKE, "vocab_size": VOCAB, "sliding_window": WINDOW},
        "sdpa", None, WINDOW,
        notes="config has sliding_window (default None; Phi-3-mini sets 2047) on every layer; one mask"),
    Family(
        "cohere2", "Cohere2ForCausalLM", "Cohere2Config",
        {**_LLAMA_LIKE, "vocab_size": VOCAB, "sliding_window": WINDOW, "sliding_window_pattern": 2},
        "sdpa", (_SLIDING, _FULL), WINDOW, dict_mask=True,
        notes="sliding_window_pattern=2 (popped from kwargs) -> every 2nd layer full; logit_scale; "
              "head_dim forced to hidden/heads"),
    Family(
        "starcoder2", "Starcoder2ForCausalLM", "Starcoder2Config",
        {**_LLAMA_LIKE, "vocab_size": VOCAB, "sliding_window": WINDOW},
        "sdpa", None, WINDOW,
        notes="sliding_window on every layer; one mask"),
    Family(
        "olmo2", "Olmo2ForCausalLM", "Olmo2Config", {**_LLAMA_LIKE, "vocab_size": VOCAB},
        "sdpa", None, None,
        notes="post-norm with q/k RMSNorm; no window"),
    Family(
        "smollm3", "SmolLM3ForCausalLM", "SmolLM3Config",
        {**_LLAMA_LIKE, "vocab_size": VOCAB, "no_rope_layer_interval": 2},
        "sdpa", (_FULL, _FULL), None, dict_mask=True,
        notes="no_rope_layers=[1, 0] (1 = uses RoPE): layer 1 is NoPE; layer_types all full unless "
              "use_sliding_window (then the NoPE layers slide); released SmolLM3 has no windows"),
    Family(
        "gpt2", "GPT2LMHeadModel", "GPT2Config",
        {"vocab_size": VOCAB, "n_embd": HIDDEN, "n_head": HEADS, "n_positions": POSITIONS},
        "sdpa", None, None,
        notes="learned absolute positions (wpe); no GQA option; Conv1D projections"),
    Family(
        "gpt_neox", "GPTNeoXForCausalLM", "GPTNeoXConfig",
        {"vocab_size": VOCAB, "hidden_size": HIDDEN, "num_attention_heads": HEADS,
         "intermediate_size": INTERMEDIATE, "max_position_embeddings": POSITIONS},
        "sdpa", None, None,
        notes="no GQA option; partial rotary (0.25); parallel residual"),
    Family(
        "falcon", "FalconForCausalLM", "FalconConfig",
        {"vocab_size": VOCAB, "hidden_size": HIDDEN, "num_attention_heads": HEADS, "num_kv_heads": KV_HEADS,
         "new_decoder_architecture": True, "max_position_embeddings": POSITIONS},
        "sdpa", None, None, initializer_range=0.6,
        notes="new_decoder_architecture (Falcon-40B/180B style, GQA 2 KV heads), RoPE (alibi=False: with "
              "alibi the model builds alibi from the 2-D attention_mask, a 4-D mask would break it)"),
    Family(
        "gpt_oss", "GptOssForCausalLM", "GptOssConfig",
        {**_LLAMA_LIKE, "vocab_size": VOCAB, "head_dim": HEAD_DIM, "intermediate_size": 64,
         "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": WINDOW,
         "rope_parameters": dict(_GPT_OSS_ROPE)},
        "eager", (_SLIDING, _FULL), WINDOW, attention_sinks=True, dict_mask=True, moe=True,
        notes="_supports_sdpa=False: eager adds learned per-head sink logits before softmax (relabelled to "
              "sdpa it runs WITHOUT the sinks, silently: sdpa_attention_forward ignores s_aux); default "
              "layer_types alternate sliding (even i) / full; YaRN RoPE (scaled down: factor 8 over 32 "
              "positions); MoE 4 experts top 2"),
]

FAMILIES: dict[str, Family] = {family.name: family for family in _ALL}


def build(name: str, seed: int = 0, attn_implementation: str | None = None) -> Any:
    return FAMILIES[name].build(seed=seed, attn_implementation=attn_implementation)


def build_draft(name: str, seed: int = 1) -> Any:
    return FAMILIES[name].build_draft(seed=seed)


def observed(model: Any) -> dict[str, Any]:
    """What a built model's config says about attention (to compare with the Family record)."""
    config = model.config
    layer_types = getattr(config, "layer_types", None)
    return {
        "attn_implementation": config._attn_implementation,
        "layer_types": tuple(layer_types) if layer_types is not None else None,
        "sliding_window": getattr(config, "sliding_window", None),
        "attention_chunk_size": getattr(config, "attention_chunk_size", None),
        "attn_logit_softcapping": getattr(config, "attn_logit_softcapping", None),
        "final_logit_softcapping": getattr(config, "final_logit_softcapping", None),
        "attention_sinks": any(name.endswith(".sinks") for name, _ in model.named_parameters()),
    }


def random_prompt(length: int = 20, vocab: int = VOCAB, seed: int = 0) -> list[int]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(1, vocab, (length,), generator=generator).tolist()


