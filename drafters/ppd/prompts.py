"""The PPD prompt-embedding checkpoint: a small safetensors file that records which model it belongs to.

Prompt embeddings are only meaningful for the exact model they were trained on, so the file carries
a fingerprint of that model; loading it on any other model is a clear error, never a silent slowdown.
Layout: tensor ``prompt_embeddings`` [m, n_ept, hidden] plus string metadata ``specdec_ppd`` (JSON:
format version, config, fingerprint, measured per-rank accuracies).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from specdec.errors import DrafterError

FORMAT_VERSION = 1
_SAMPLE = 4096  # elements hashed per parameter: enough to tell models apart, cheap for 7B models


class PPDCheckpointError(DrafterError):
    """A prompt checkpoint that is missing, malformed, or belongs to a different model."""


def model_fingerprint(model: torch.nn.Module) -> str:
    """A short hash of the model's architecture and a strided sample of every parameter.

    Hashing every byte of a multi-billion-parameter model would take minutes, and a sample of each
    tensor (head and strided body) already differs between any two trained or random models.
    """
    digest = hashlib.sha256()
    config = model.config
    for key in ("model_type", "vocab_size", "hidden_size", "num_hidden_layers", "n_embd", "n_layer"):
        digest.update(f"{key}={getattr(config, key, None)};".encode())
    for name, param in sorted(model.state_dict().items()):
        flat = param.detach().reshape(-1)
        stride = max(1, flat.numel() // _SAMPLE)
        sample = torch.cat([flat[:_SAMPLE], flat[::stride][:_SAMPLE]]).to("cpu", torch.float32).contiguous()
        digest.update(f"{name}:{tuple(param.shape)};".encode())
        digest.update(sample.numpy().tobytes())
    return digest.hexdigest()[:32]


@dataclass
class PromptCheckpoint:
    """Trained (or random) prompt embeddings and what they belong to."""

    embeddings: torch.Tensor  # [m, n_ept, hidden] float32
    fingerprint: str
    #: per-rank top-k accuracies a[j][k]: P(truth at distance j+1 is exactly rank k); None = unmeasured
    accuracies: list[list[float]] | None = None
    info: dict[str, Any] = field(default_factory=dict)  # training provenance (steps, data, loss)

    @property
    def num_prompts(self) -> int:
        return int(self.embeddings.shape[0])

    @property
    def num_ept(self) -> int:
        return int(self.embeddings.shape[1])

    @property
    def hidden_size(self) -> int:
        return int(self.embeddings.shape[2])

    def check_model(self, model: torch.nn.Module, source: str = "the prompt checkpoint") -> None:
        """Raise PPDCheckpointError unless this checkpoint was made for `model`."""
        hidden = model.get_input_embeddings().weight.shape[1]
        if hidden != self.hidden_size:
            raise PPDCheckpointError(
                f"{source} has prompt embeddings of width {self.hidden_size} but the model's hidden size is "
                f"{hidden}: it was trained for a different model. Train prompts for this model with "
                "`specdec train-ppd --model PATH --data FILES`.")
        actual = model_fingerprint(model)
        if actual != self.fingerprint:
            raise PPDCheckpointError(
                f"{source} was trained for a different model (fingerprint {self.fingerprint}, this model "
                f"{actual}); prompt tokens only work on the exact model they were trained on. Train prompts "
                "for this model with `specdec train-ppd --model PATH --data FILES`.")

    def save(self, path: str | Path) -> None:
        meta = {
            "format_version": FORMAT_VERSION,
            "num_prompts": self.num_prompts,
            "num_ept": self.num_ept,
            "hidden_size": self.hidden_size,
            "fingerprint": self.fingerprint,
            "accuracies": self.accuracies,
            "info": self.info,
        }
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        tensor = self.embeddings.detach().to("cpu", torch.float32).contiguous()
        save_file({"prompt_embeddings": tensor}, str(path), metadata={"specdec_ppd": json.dumps(meta)})

    @classmethod
    def load(cls, path: str | Path) -> PromptCheckpoint:
        path = Path(path)
        if not path.is_file():
            raise PPDCheckpointError(f"PPD prompt checkpoint {str(path)!r} does not exist")
        try:
            with safe_open(str(path), framework="pt") as handle:
                raw = (handle.metadata() or {}).get("specdec_ppd")
            tensors = load_file(str(path))
        except Exception as error:  # safetensors raises several types for corrupt files
            raise PPDCheckpointError(f"{str(path)!r} is not a safetensors file: {error}") from error
        if raw is None or "prompt_embeddings" not in tensors:
            raise PPDCheckpointError(f"{str(path)!r} is not a specdec PPD prompt checkpoint (no specdec_ppd metadata)")
        meta = json.loads(raw)
        if meta.get("format_version") != FORMAT_VERSION:
            raise PPDCheckpointError(f"{str(path)!r} has format version {meta.get('format_version')}; this "
                                     f"specdec reads version {FORMAT_VERSION}")
        embeddings = tensors["prompt_embeddings"]
        if embeddings.dim() != 3:
            raise PPDCheckpointError(f"{str(path)!r}: prompt_embeddings must be [m, n_ept, hidden], got "
                                     f"{tuple(embeddings.shape)}")
        return cls(embeddings, meta["fingerprint"], meta.get("accuracies"), meta.get("info") or {})


def init_from_vocab(model: torch.nn.Module, num_prompts: int, num_ept: int, seed: int = 0) -> torch.Tensor:
    """Initial prompt embeddings copied from real token embeddings (prompt tuning's text init beats random
    init, T §2.5.4). Random distinct rows are used so no tokenizer is needed."""
    weight = model.get_input_embeddings().weight.detach()
    generator = torch.Generator().manual_seed(seed)
    rows = torch.randperm(weight.shape[0], generator=generator)[: num_prompts * num_ept]
    if rows.numel() < num_prompts * num_ept:  # tiny vocabularies: repeat rows
        rows = rows.repeat((num_prompts * num_ept + rows.numel() - 1) // rows.numel())[: num_prompts * num_ept]
    return weight[rows.to(weight.device)].to("cpu", torch.float32).reshape(num_prompts, num_ept, -1).clone()


def init_prompts(model: torch.nn.Module, num_prompts: int, num_ept: int, kind: str = "vocab", seed: int = 0
                 ) -> torch.Tensor:
    """Initial prompt embeddings [m, n_ept, hidden]: "vocab" = real token rows (`init_from_vocab`);
    "random" = Gaussian with the token embeddings' per-element standard deviation."""
    if kind == "vocab":
        return init_from_vocab(model, num_prompts, num_ept, seed)
    if kind == "random":
        weight = model.get_input_embeddings().weight.detach().float()
        generator = torch.Generator().manual_seed(seed)
        return torch.randn(num_prompts, num_ept, weight.shape[1], generator=generator) * weight.std().item()
    raise ValueError(f"unknown prompt init {kind!r}")


def random_checkpoint(model: torch.nn.Module, num_prompts: int = 3, num_ept: int = 1, seed: int = 0
                      ) -> PromptCheckpoint:
    """An untrained checkpoint (token-embedding init) for tests and smoke runs: correct, but slow to accept."""
    return PromptCheckpoint(init_from_vocab(model, num_prompts, num_ept, seed), model_fingerprint(model),
                            None, {"trained": False})
