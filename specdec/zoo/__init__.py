"""The bundled default model pair: a small Llama target and draft trained by this project.

No model hub is reachable offline, so specdec trains and ships its own pair
(see ``specdec/zoo/default/MODEL_CARD.md`` and ``python -m specdec.tools.zoo.train``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

__all__ = ["DefaultModels", "default_model_dir", "load_default"]


@dataclass(frozen=True)
class DefaultModels:
    """Target and draft share ``tokenizer``; both are float32 and in eval mode."""

    target: Any
    draft: Any
    tokenizer: Any

    def __iter__(self) -> Iterator[Any]:
        """`target, draft, tokenizer = specdec.load_default()` unpacks, as the README shows."""
        return iter((self.target, self.draft, self.tokenizer))


def default_model_dir() -> Path:
    """Directory holding the shipped ``target/`` and ``draft/`` model folders."""
    return Path(str(files("specdec.zoo"))) / "default"


def load_default(device: Any = None, dtype: Any = None) -> DefaultModels:
    """Load the shipped pair from the package's own files (never the network), on `device` (default: the CPU).

    Weights are stored in bfloat16 to keep the package small and upcast to float32 here (the default
    `dtype`), since CPU inference in bf16 is slow and less exact; on a GPU pass dtype=torch.bfloat16.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = default_model_dir()
    missing = [d for d in ("target", "draft") if not (root / d / "model.safetensors").is_file()]
    if missing:
        raise FileNotFoundError(
            f"specdec's default model weights are missing ({', '.join(missing)} under {root}); "
            "reinstall specdec or rebuild them with `python -m specdec.tools.zoo.train` and "
            "`python -m specdec.tools.zoo.export`."
        )
    models = []
    for name in ("target", "draft"):
        model = AutoModelForCausalLM.from_pretrained(root / name, dtype=dtype or torch.float32, local_files_only=True)
        models.append((model.to(device) if device is not None else model).eval())
    tokenizer = AutoTokenizer.from_pretrained(root / "target", local_files_only=True)
    return DefaultModels(target=models[0], draft=models[1], tokenizer=tokenizer)
