"""Skip sets: which attention and MLP blocks to bypass, tied to the model they were searched for.

A skip set is only meaningful for the weights it was searched on, so files carry a fingerprint of
the model (architecture numbers + a hash of a few weight tensors) and loading one for another model
is refused. Weights are hashed after rounding to bfloat16 so a checkpoint stored in bf16 and upcast to
fp32 (the bundled default model) fingerprints the same either way.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator

FORMAT = "specdec.layer_skip/1"
SKIP_FILE_NAME = "layer_skip.json"

_CONFIG_KEYS = ("model_type", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "intermediate_size", "max_position_embeddings", "n_positions")


class SkipSetMismatchError(ValueError):
    """A skip set was made for a different model than the one it is applied to."""


class SkipSet(BaseModel):
    """Indices (0-based) of the decoder layers whose attention / MLP block is bypassed while drafting."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    attention: tuple[int, ...] = Field(default=(), description="layers whose self-attention is skipped")
    mlp: tuple[int, ...] = Field(default=(), description="layers whose MLP is skipped")

    @field_validator("attention", "mlp")
    @classmethod
    def _sorted_unique(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if any(i < 0 for i in value):
            raise ValueError(f"layer indices must be >= 0, got {list(value)}")
        if len(set(value)) != len(value):
            raise ValueError(f"duplicate layer indices in {list(value)}")
        return tuple(sorted(value))

    @property
    def size(self) -> int:
        return len(self.attention) + len(self.mlp)

    def check_layers(self, num_layers: int) -> None:
        """Refuse indices the model does not have, naming them."""
        for kind, indices in (("attention", self.attention), ("mlp", self.mlp)):
            bad = [i for i in indices if i >= num_layers]
            if bad:
                raise ValueError(f"skip set names {kind} layer(s) {bad} that do not exist: the model has "
                                 f"{num_layers} layers (valid indices 0..{num_layers - 1})")

    def to_mask(self, num_layers: int) -> tuple[int, ...]:
        """Binary vector of length 2L: attention switches, then MLP switches (the search's encoding)."""
        self.check_layers(num_layers)
        attention, mlp = set(self.attention), set(self.mlp)
        return tuple(int(i in attention) for i in range(num_layers)) + tuple(int(i in mlp) for i in range(num_layers))

    @classmethod
    def from_mask(cls, mask: tuple[int, ...] | list[int]) -> SkipSet:
        if len(mask) % 2:
            raise ValueError(f"a skip mask has 2 x num_layers entries, got {len(mask)}")
        half = len(mask) // 2
        return cls(attention=tuple(i for i in range(half) if mask[i]),
                   mlp=tuple(i for i in range(half) if mask[half + i]))

    def describe(self) -> str:
        return f"attention {list(self.attention)}, mlp {list(self.mlp)}"


def _config_value(config: Any, key: str) -> Any:
    value = getattr(config, key, None)
    return value if isinstance(value, (int, float, str, bool)) or value is None else str(value)


@torch.no_grad()
def model_fingerprint(model: Any) -> str:
    """A stable id of the architecture and weights: config numbers + hash of three weight tensors."""
    cached = getattr(model, "_specdec_fingerprint", None)
    if cached is not None:
        return cached
    digest = hashlib.sha256()
    config = {key: _config_value(model.config, key) for key in _CONFIG_KEYS}
    digest.update(json.dumps(config, sort_keys=True).encode())
    params = list(model.named_parameters())
    for index in sorted({0, len(params) // 2, len(params) - 1}):
        name, tensor = params[index]
        flat = tensor.detach().reshape(-1)[:65536].to(torch.bfloat16).float().cpu()
        digest.update(name.encode())
        digest.update(str(tuple(tensor.shape)).encode())
        digest.update(flat.numpy().tobytes())
    fingerprint = "sha256:" + digest.hexdigest()[:32]
    try:
        model._specdec_fingerprint = fingerprint  # weights of a served model do not change
    except AttributeError:
        pass
    return fingerprint


def save_skip_set(path: str | Path, skip: SkipSet, model: Any, metadata: dict | None = None,
                  token_ranking: list[int] | None = None, draft_vocab: int | None = None) -> Path:
    """Write a skip-set file for `model` (fingerprinted); `metadata` records how it was found.

    `token_ranking` (token ids, most frequent in training/calibration text first) and `draft_vocab`
    (how many of them the draft should score, measured on calibration data) are the drafter's
    reduced-vocabulary defaults for this model."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "format": FORMAT,
        "model_fingerprint": model_fingerprint(model),
        "model_type": getattr(model.config, "model_type", None),
        "num_layers": int(model.config.num_hidden_layers),
        "attention": list(skip.attention),
        "mlp": list(skip.mlp),
        "metadata": metadata or {},
    }
    if token_ranking is not None:
        data["draft_vocab"] = int(draft_vocab or 0)
        data["token_ranking"] = "@RANKING@"
    text = json.dumps(data, indent=2)
    if token_ranking is not None:  # one line, not one line per token id
        text = text.replace('"@RANKING@"', json.dumps([int(t) for t in token_ranking]))
    path.write_text(text + "\n")
    return path


def read_skip_file(path: str | Path) -> dict:
    """Parse and check the format of a skip-set file (without a model)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"skip-set file {str(path)!r} does not exist")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"skip-set file {str(path)!r} is not valid JSON: {error}") from error
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{str(path)!r} is not a specdec skip-set file (expected format {FORMAT!r})")
    return data


def load_skip_set(path: str | Path, model: Any) -> SkipSet:
    """Load a skip set for `model`, refusing files made for another model or naming missing layers."""
    data = read_skip_file(path)
    expected = model_fingerprint(model)
    if data.get("model_fingerprint") != expected:
        raise SkipSetMismatchError(
            f"skip-set file {str(path)!r} was made for another model (fingerprint {data.get('model_fingerprint')}, "
            f"{data.get('model_type')} with {data.get('num_layers')} layers); this model is {expected} "
            f"({getattr(model.config, 'model_type', '?')} with {model.config.num_hidden_layers} layers). "
            "Run `specdec search-layers` for this model.")
    skip = SkipSet(attention=tuple(data.get("attention", ())), mlp=tuple(data.get("mlp", ())))
    skip.check_layers(int(model.config.num_hidden_layers))
    return skip


def find_shipped_skip_set(model: Any) -> Path | None:
    """A skip-set file shipped with `model`: beside its weights, or the bundled default model's."""
    candidates = []
    source = getattr(model, "name_or_path", None) or getattr(model.config, "_name_or_path", None)
    if source:
        folder = Path(str(source))
        candidates += [folder / SKIP_FILE_NAME, folder.parent / SKIP_FILE_NAME]
    try:
        from specdec.zoo import default_model_dir

        candidates.append(default_model_dir() / SKIP_FILE_NAME)
    except ImportError:
        pass
    fingerprint = None
    for candidate in candidates:
        if not candidate.is_file():
            continue
        try:
            data = read_skip_file(candidate)
        except ValueError:
            continue
        fingerprint = fingerprint or model_fingerprint(model)
        if data.get("model_fingerprint") == fingerprint:
            return candidate
    return None
