"""`specdec.generate`: the public entry point. Normalises inputs, validates everything that can be
validated before model work, then hands one batch to the engine."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel

from . import registry
from .controller import ControllerOptions
from .costs import CostModel
from .engine import EngineConfig, SpeculativeEngine
from .model_support import check_model_supported
from .plugins import Drafter, Verifier
from .rng import row_seeds
from .sampling import SamplingParams
from .stats import GenerationStats
from .target import check_packed_inputs, context_length
from .validation import check_prompt_ids

PromptLike = str | Sequence[str] | Sequence[int] | Sequence[Sequence[int]] | torch.Tensor


@dataclass
class GenerationOutput:
    sequences: list[list[int]]  # new token ids only, one list per row
    text: list[str] | None
    stats: GenerationStats
    verifier_lossless: bool
    finish_reasons: list[str] = field(default_factory=list)
    drafter: str = ""
    verifier: str = ""


#: dtypes a model loaded from a path may be given by name.
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def parse_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    """A torch dtype from its name ("bfloat16", ...) or itself; None stays None."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)} (or a torch.dtype), got {dtype!r}")
    return DTYPES[dtype]


def load_model(model: Any, tokenizer: Any | None = None, device: str | torch.device | None = None,
               dtype: str | torch.dtype | None = None) -> tuple[Any, Any | None]:
    """Accept a model instance, a local directory, or "default" (the bundled model pair). A model loaded here
    goes to `device` (default: the CPU) in `dtype` (default: the checkpoint's; the bundled pair's is
    float32); a model passed in is used as it is (specdec never moves or casts the user's model)."""
    dtype = parse_dtype(dtype)
    if isinstance(model, (str, os.PathLike)):
        if str(model) == "default":
            from .zoo import load_default

            pair = load_default(device=device, dtype=dtype)
            return pair.target, tokenizer if tokenizer is not None else pair.tokenizer
        path = Path(model)
        if not path.is_dir():
            raise FileNotFoundError(f"model path {str(path)!r} is not a local directory (specdec never downloads)")
        from transformers import AutoModelForCausalLM, AutoTokenizer

        loaded = AutoModelForCausalLM.from_pretrained(path, local_files_only=True,
                                                      **({"dtype": dtype} if dtype is not None else {}))
        if device is not None:
            loaded = loaded.to(device)
        loaded.eval()
        if tokenizer is None and any(path.glob("tokenizer*")):
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        return loaded, tokenizer
    if not isinstance(model, torch.nn.Module) or not hasattr(model, "config"):
        raise TypeError(f"model must be a transformers causal LM or a local path, got {type(model).__name__}")
    if device is not None or dtype is not None:
        raise ValueError("device and dtype apply to a model loaded from a path or \"default\"; a model passed in "
                         "runs where it is (move or cast it yourself: specdec never modifies the user's model)")
    return model, tokenizer


def normalize_prompts(prompt: PromptLike, tokenizer: Any | None) -> list[list[int]]:
    """Turn every accepted prompt form into a list of token-id lists (one per row)."""
    if isinstance(prompt, torch.Tensor):
        if prompt.dtype not in (torch.long, torch.int, torch.int32, torch.int16):
            raise TypeError(f"a tensor prompt must hold integer token ids, got {prompt.dtype}")
        rows = [prompt.tolist()] if prompt.dim() == 1 else prompt.tolist()
    elif isinstance(prompt, str):
        rows = [_encode(prompt, tokenizer)]
    elif isinstance(prompt, Sequence) and len(prompt) > 0 and all(isinstance(p, str) for p in prompt):
        rows = [_encode(p, tokenizer) for p in prompt]
    elif isinstance(prompt, Sequence) and len(prompt) > 0 and all(isinstance(p, int) for p in prompt):
        rows = [list(prompt)]
    elif isinstance(prompt, Sequence) and len(prompt) > 0 and all(isinstance(p, (list, tuple)) for p in prompt):
        rows = [list(p) for p in prompt]
    elif isinstance(prompt, Sequence) and len(prompt) == 0:
        raise ValueError("the prompt is empty")
    else:
        raise TypeError("prompt must be a string, a list of strings, a list of token ids, a list of lists of "
                        f"token ids or a LongTensor [B, T]; got {type(prompt).__name__}")
    for index, row in enumerate(rows):
        if len(row) == 0:
            raise ValueError(f"prompt row {index} is empty: give at least one token")
        if not all(isinstance(t, int) for t in row):
            raise TypeError(f"prompt row {index} must contain integer token ids")
    return rows


def _encode(text: str, tokenizer: Any | None) -> list[int]:
    if tokenizer is None:
        raise ValueError("a text prompt needs a tokenizer: pass tokenizer=..., or a model path with a tokenizer "
                         "beside it, or token ids")
    return list(tokenizer(text)["input_ids"])


def _eos_ids(model: Any, eos_token_id: int | Sequence[int] | None) -> frozenset[int]:
    if eos_token_id is None:  # same default as transformers' generate: the generation config's eos
        config = getattr(model, "generation_config", None) or model.config
        eos_token_id = getattr(config, "eos_token_id", None)
    if eos_token_id is None:
        return frozenset()
    if isinstance(eos_token_id, int):
        return frozenset([eos_token_id])
    return frozenset(int(t) for t in eos_token_id)


def _controller_options(controller: bool | dict | ControllerOptions | None) -> ControllerOptions | None:
    if controller is None or controller is False:
        return None
    if controller is True:
        return ControllerOptions()
    if isinstance(controller, ControllerOptions):
        return controller
    if isinstance(controller, dict):
        return ControllerOptions(**controller)
    raise TypeError(f"controller must be True, False, a dict of options or ControllerOptions, got "
                    f"{type(controller).__name__}")


def resolve_drafter(drafter: str | Drafter | None, options: dict | BaseModel | None) -> Drafter:
    if drafter is None:
        drafter = "none"
    if isinstance(drafter, Drafter):
        if options:
            raise ValueError("drafter_options are only used with a drafter name; configure the instance instead")
        return drafter
    if not isinstance(drafter, str):
        raise TypeError(f"drafter must be a registered name or a specdec.Drafter, got {type(drafter).__name__}")
    return registry.create("drafter", drafter, options)


def resolve_verifier(verifier: str | Verifier, options: dict | BaseModel | None, sampling: SamplingParams) -> Verifier:
    if isinstance(verifier, Verifier):
        if options:
            raise ValueError("verifier_options are only used with a verifier name; configure the instance instead")
        return verifier
    if not isinstance(verifier, str):
        raise TypeError(f"verifier must be a registered name or a specdec.Verifier, got {type(verifier).__name__}")
    if verifier == "auto":
        verifier = "exact" if sampling.greedy else "rejection"
    return registry.create("verifier", verifier, options)


def generate(
    model: Any,
    prompt: PromptLike,
    *,
    tokenizer: Any | None = None,
    drafter: str | Drafter | None = "anpd",
    verifier: str | Verifier = "auto",
    drafter_options: dict | BaseModel | None = None,
    verifier_options: dict | BaseModel | None = None,
    max_new_tokens: int = 128,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | Sequence[int] | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    stop: str | Sequence[str] | None = None,
    streamer: Any | None = None,
    max_draft_nodes: int = 256,
    batch_mode: str = "unpadded",
    packed_inputs: bool | None = None,
    max_batch_size: int | None = None,
    controller: bool | dict | ControllerOptions = True,
    cost_model: CostModel | None = None,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
    compile: bool = False,
) -> GenerationOutput:
    """Generate with speculative decoding. See the README for the accepted forms of each argument.

    `seed` (sampling only): an int gives every row its own stream mixed from (seed, row), so a row's
    output does not depend on the other rows; one int per row makes each prompt's output the same as
    running it alone with that seed, at any batch position (where the model's kernels round a row alike at
    every batch size: see specdec.rng); None draws fresh random seeds.

    `packed_inputs` (unpadded mode): feed only each row's real tokens, packed, to the prefill and every
    verification (None = whenever the model supports it; True on a model that cannot is an error;
    False pads rows to the widest, EMS-SD's unpadded-KV-only ablation).

    `max_batch_size` (unpadded mode): run at most this many prompts at once; when a row finishes, the
    next waiting prompt is prefilled and takes its place (continuous batching), so a row that speculates
    poorly no longer holds the others back. None runs every prompt in one batch. Outputs do not change.

    `controller`: the goodput controller (`specdec.controller`) decides each step how much of each row's
    draft to verify, possibly nothing, from this device's measured step costs and the row's acceptance
    (True, or its options as a dict / `ControllerOptions`). False leaves every drafter to its own
    schedule, verified in full, as do drafters configured with their own `schedule`. Losslessness never
    depends on it; with sampling and a seed its decisions are frozen per call (see the module).

    `cost_model`: the `specdec.costs.CostModel` to price steps with (None = the one kept for this model
    and device, measured at first use). Pass the same one to pin decisions across processes.

    `device`, `dtype` (a model given as a path or "default"): where and in what precision to load it, e.g.
    device="cuda", dtype="bfloat16"; a drafter's own assets (a draft model by path) follow the target's
    device and dtype unless its options say otherwise.

    `compile`: verify under `torch.compile` with static shapes (a fixed cache capacity read whole, widths
    padded to powers of two; `specdec.compiled`), greedy-identical to eager. Each new width compiles once
    per process (seconds to minutes), so it pays on long runs and on GPUs (CUDA graphs); unpadded mode,
    inputs padded.
    """
    if not isinstance(max_new_tokens, int) or max_new_tokens <= 0:
        raise ValueError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
    if batch_mode not in ("unpadded", "padded"):
        raise ValueError(f"batch_mode must be 'unpadded' (EMS-SD) or 'padded' (vanilla), got {batch_mode!r}")
    if max_batch_size is not None and (not isinstance(max_batch_size, int) or isinstance(max_batch_size, bool)
                                       or max_batch_size <= 0):
        raise ValueError(f"max_batch_size must be a positive integer or None, got {max_batch_size!r}")
    if max_batch_size is not None and batch_mode == "padded":
        raise ValueError("max_batch_size (continuous batching) needs batch_mode='unpadded': the padded mode's "
                         "shared write pointer cannot take rows that join mid-generation")
    if compile and (batch_mode == "padded" or packed_inputs):
        raise ValueError("compile=True runs the unpadded mode with padded inputs (static shapes): leave batch_mode "
                         "and packed_inputs at their defaults")
    if packed_inputs is not None and not isinstance(packed_inputs, bool):
        raise ValueError(f"packed_inputs must be True, False or None, got {packed_inputs!r}")
    controller_options = _controller_options(controller)
    if cost_model is not None and not isinstance(cost_model, CostModel):
        raise TypeError(f"cost_model must be a specdec.costs.CostModel or None, got {type(cost_model).__name__}")
    sampling = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
    # Plugins are resolved (and their options validated) before any model work.
    drafter_obj = resolve_drafter(drafter, drafter_options)
    verifier_obj = resolve_verifier(verifier, verifier_options, sampling)
    if controller_options is None and drafter_obj.name == "auto":
        raise ValueError('drafter="auto" is the goodput controller choosing drafters; it needs controller=True')
    model, tokenizer = load_model(model, tokenizer, device, dtype)
    prompts = normalize_prompts(prompt, tokenizer)
    ctx = context_length(model)
    for index, row in enumerate(prompts):
        if ctx is not None and len(row) >= ctx:
            raise ValueError(f"prompt row {index} has {len(row)} tokens; the model's context is {ctx}, "
                             "which leaves no room to generate")
    check_prompt_ids(prompts, int(model.get_input_embeddings().weight.shape[0]))
    if streamer is not None and len(prompts) != 1:
        raise ValueError("a streamer works with a single prompt (batch size 1), as in transformers")
    stop_strings = (stop,) if isinstance(stop, str) else tuple(stop or ())
    check_model_supported(model)
    check_packed_inputs(model, batch_mode == "padded", packed_inputs)
    row_seeds(seed, len(prompts))  # a bad seed fails here, before any model work
    config = EngineConfig(max_new_tokens=max_new_tokens, sampling=sampling, eos_token_ids=_eos_ids(model, eos_token_id),
                          stop_strings=stop_strings, max_draft_nodes=max_draft_nodes, batch_mode=batch_mode,
                          packed_inputs=packed_inputs, max_batch_size=max_batch_size,
                          controller=controller_options, cost_model=cost_model, compile=bool(compile))
    engine = SpeculativeEngine(model, drafter_obj, verifier_obj, config, tokenizer=tokenizer, streamer=streamer,
                               seed=seed)
    with torch.inference_mode():  # no autograd bookkeeping anywhere in the loop (faster than no_grad)
        results, stats = engine.generate(prompts)
    sequences = [r.tokens for r in results]
    text = [tokenizer.decode(s, skip_special_tokens=True) for s in sequences] if tokenizer is not None else None
    return GenerationOutput(sequences, text, stats, verifier_obj.lossless, [r.finish_reason for r in results],
                            drafter_obj.name, verifier_obj.name)
