"""Model support is measured, not assumed: before tree verification on a model class we check once
that tree-masked logits on our cache equal plain causal logits, and refuse clearly otherwise."""

from __future__ import annotations

from typing import Any

import torch

from .errors import UnsupportedModelError
from .target import TargetRunner, model_device

_checked: dict[tuple[str, str], str | None] = {}


def _key(model: Any) -> tuple[str, str]:
    return type(model).__name__, str(getattr(model.config, "_attn_implementation", None))


def check_model_supported(model: Any) -> None:
    """Raise `UnsupportedModelError` when specdec cannot serve `model`; cached per model class."""
    if getattr(model.config, "is_encoder_decoder", False):
        raise UnsupportedModelError(f"{type(model).__name__} is an encoder-decoder model; specdec needs a causal LM")
    if model.get_output_embeddings() is None:
        raise UnsupportedModelError(f"{type(model).__name__} has no language-model head (get_output_embeddings() "
                                    "is None); load it with AutoModelForCausalLM")
    import inspect

    accepted = inspect.signature(model.forward).parameters
    missing = [name for name in ("attention_mask", "position_ids", "past_key_values") if name not in accepted]
    if missing:
        raise UnsupportedModelError(
            f"{type(model).__name__}.forward does not take {', '.join(missing)}: specdec needs a KV-cache causal LM "
            "it can feed explicit masks and positions (recurrent or stateful models cannot roll back rejected drafts)")
    key = _key(model)
    if key not in _checked:
        _checked[key] = _tree_attention_problem(model)
    problem = _checked[key]
    if problem is not None:
        raise UnsupportedModelError(f"{key[0]} (attention {key[1]}) failed specdec's tree-attention check: {problem}")


@torch.no_grad()
def _tree_attention_problem(model: Any) -> str | None:
    """Compare logits of a 2-branch tree over our cache with one causal forward of the same text."""
    from .engine import tree_layout  # local: engine imports this module's users

    vocab = int(model.config.vocab_size)
    generator = torch.Generator().manual_seed(0)
    sequence = torch.randint(0, vocab, (1, 10), generator=generator)
    device = model_device(model)
    try:
        reference = model(input_ids=sequence.to(device), use_cache=False).logits.float().cpu()
        runner = TargetRunner(model, 1, 32)
        runner.prefill(sequence[:, :5], torch.tensor([5]))
        # Inputs: root = token 5, a wrong branch (2 nodes), then the true continuation tokens 6..9.
        wrong = (sequence[0, 6:8] + 1) % vocab
        tokens = torch.cat([sequence[0, 5:6], wrong, sequence[0, 6:10]])[None, :]
        parents = torch.tensor([[0, 0, 1, 0, 3, 4, 5]])
        depths, visible = tree_layout(parents)
        logits = runner.verify_forward(tokens, depths, visible).float().cpu()
        runner.release()
    except Exception as error:  # any failure inside the model's forward means unsupported
        return f"{type(error).__name__}: {error}"
    got = torch.cat([logits[:, :1], logits[:, 3:]], dim=1)
    expected = reference[:, 5:10]
    scale = expected.abs().max().clamp(min=1.0)
    error = float((got - expected).abs().max() / scale)
    tolerance = 1e-3 if model.dtype == torch.float32 else 3e-2
    if error > tolerance:
        return f"tree-masked logits differ from causal logits (relative error {error:.2e} > {tolerance:.0e})"
    return None
