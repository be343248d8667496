"""The sweep configuration: what to run (models x drafters x verifiers x datasets x batch sizes) and how.

Read from YAML/JSON, built from CLI flags, or taken from a preset. `check_plugins` resolves every
drafter and verifier name and validates their options before any model is loaded, so a typo costs a
second, not a model load. A drafter that exists but fails to import is not an error here: the sweep
reports it as a failed cell (never silently dropped).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from specdec import registry
from specdec.errors import PluginLoadError, SpecDecError

from .datasets import dataset_file
from .oracle import NAME as ORACLE
from .oracle import register_oracle

DRAFT_PLACEHOLDER = "@draft"  # an option value replaced by the model entry's draft model
BASELINES = ("hf_generate", "hf_prompt_lookup", "hf_assisted")
BaselineName = Literal["hf_generate", "hf_prompt_lookup", "hf_assisted"]


class ConfigError(SpecDecError, ValueError):
    """The sweep configuration is invalid."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSpec(_Strict):
    """A target model ("default" = the bundled pair, else a local directory) and its optional draft."""

    path: str
    draft: str | None = Field(None, description='draft model directory; "default" pairs the bundled draft')
    label: str | None = None
    device: str | None = Field(None, description='where to load the target and its draft, e.g. "cuda" (None: the CPU)')
    dtype: Literal["float32", "bfloat16", "float16"] | None = Field(
        None, description="the models' dtype (None: the checkpoint's; the bundled pair's is float32)")

    @property
    def name(self) -> str:
        return self.label or ("default" if self.path == "default" else Path(self.path).name)

    @property
    def draft_path(self) -> str | None:
        """Where the draft lives: given explicitly, or the bundled draft for the default model."""
        if self.draft not in (None, "default"):
            return self.draft
        if self.draft == "default" or self.path == "default":
            from specdec.zoo import default_model_dir

            return str(default_model_dir() / "draft")
        return None


class DrafterSpec(_Strict):
    name: str
    options: dict[str, Any] = Field(default_factory=dict)
    label: str | None = None

    @property
    def display(self) -> str:
        if self.label:
            return self.label
        shown = {k: v for k, v in self.options.items() if v != DRAFT_PLACEHOLDER}
        return self.name + (f"({','.join(f'{k}={v}' for k, v in shown.items())})" if shown else "")

    @property
    def is_plain_none(self) -> bool:
        """specdec's own plain decoding as the sweep's baseline: `none` with no options and no label. A labelled
        `none` is a second cell of the same work (an A/A cell: what two identical cells read apart in one run)."""
        return self.name == "none" and not self.options and self.label is None


class DatasetSpec(_Strict):
    kind: Literal["spec_bench", "humaneval", "gsm8k", "text"] = "spec_bench"
    path: str | None = Field(None, description="None = the file shipped with specdec (specdec.data)")
    categories: list[str] | None = None
    per_category: int | None = Field(None, ge=1, description="first N prompts of each category")

    @property
    def name(self) -> str:
        return self.kind if self.path is None else f"{self.kind}:{Path(self.path).name}"


class SweepConfig(_Strict):
    models: list[ModelSpec] = Field(min_length=1)
    drafters: list[DrafterSpec] = Field(min_length=1)
    verifiers: list[str] = Field(default_factory=lambda: ["exact"], min_length=1)
    datasets: list[DatasetSpec] = Field(default_factory=lambda: [DatasetSpec()], min_length=1)
    baselines: list[BaselineName] = Field(default_factory=lambda: list(BASELINES))
    max_new_tokens: int = Field(128, ge=1)
    temperature: float = Field(0.0, ge=0.0)
    batch_sizes: list[int] = Field(default_factory=lambda: [1], min_length=1)
    repeats: int = Field(1, ge=1, description="timed passes over every prompt; speedup is their mean")
    warmup: int = Field(1, ge=0, description="untimed generations on the first prompt of each cell")
    seed: int = 0
    prompt_lookup_num_tokens: int = Field(10, ge=1, description="transformers' prompt lookup baseline")
    threads: int | None = Field(None, ge=1, description="torch intra-op threads of a local run (None: torch's "
                                "default, one per core); Ray workers use this many each (default 1)")
    note: str = ""

    @field_validator("models", mode="before")
    @classmethod
    def _models(cls, value: Any) -> Any:
        return [{"path": v} if isinstance(v, str) else v for v in value] if isinstance(value, list) else value

    @field_validator("drafters", mode="before")
    @classmethod
    def _drafters(cls, value: Any) -> Any:
        return [{"name": v} if isinstance(v, str) else v for v in value] if isinstance(value, list) else value

    @field_validator("datasets", mode="before")
    @classmethod
    def _datasets(cls, value: Any) -> Any:
        return [{"kind": v} if isinstance(v, str) else v for v in value] if isinstance(value, list) else value

    @field_validator("batch_sizes")
    @classmethod
    def _batches(cls, value: list[int]) -> list[int]:
        if any(b < 1 for b in value):
            raise ValueError("batch sizes must be >= 1")
        return value

    @model_validator(mode="after")
    def _unique_labels(self) -> SweepConfig:
        labels = [d.display for d in self.drafters]
        duplicates = sorted({x for x in labels if labels.count(x) > 1})
        if duplicates:
            raise ValueError(f"drafter entries must differ (give each a label): {', '.join(duplicates)}")
        return self

    def with_none(self) -> SweepConfig:
        """specdec's own autoregressive decoding (drafter `none`) is always measured."""
        if any(d.is_plain_none for d in self.drafters):
            return self
        return self.model_copy(update={"drafters": [DrafterSpec(name="none"), *self.drafters]})

    def fingerprint(self) -> str:
        return hashlib.sha1(self.model_dump_json().encode()).hexdigest()[:12]


def load_config(path: str | Path) -> SweepConfig:
    """A sweep from a .yaml/.yml or .json file."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"config file {str(file)!r} does not exist")
    text = file.read_text(encoding="utf-8")
    try:
        if file.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except Exception as error:  # yaml and json raise different types; both mean "cannot parse"
        raise ConfigError(f"{file}: cannot parse: {error}") from error
    return parse_config(data, source=str(file))


def parse_config(data: Any, source: str = "config") -> SweepConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the sweep config must be a mapping, got {type(data).__name__}")
    try:
        return SweepConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(f"{source}: invalid sweep config:\n{error}") from None


def check_plugins(config: SweepConfig) -> dict[str, str]:
    """Resolve every plugin name, validate options and check the model and prompt files exist, before any
    model work.

    Unknown names and invalid options raise (listing the known names); a drafter that exists but fails
    to import is returned as {display label: error} so the sweep can report it as a failed cell.
    """
    register_oracle()
    load_failures: dict[str, str] = {}
    for name in config.verifiers:
        if name != "auto":
            registry.load_class("verifier", name)
    for spec in config.drafters:
        if spec.name not in registry.known_names("drafter"):
            registry.load_class("drafter", spec.name)  # raises with the known names and a close match
    for model in config.models:
        _check_model_files(model)
    for dataset in config.datasets:
        dataset_file(dataset.kind, dataset.path)  # a missing prompt file fails here, not in every cell
    for spec in config.drafters:
        try:
            cls = registry.load_class("drafter", spec.name)
        except PluginLoadError as error:
            load_failures[spec.display] = str(error)
            continue
        for model in config.models:
            registry.validate_options("drafter", spec.name, cls, resolve_placeholders(spec.options, model.draft_path))
    if any(spec.name == ORACLE for spec in config.drafters) and config.temperature > 0:
        raise ConfigError("the oracle drafter replays the greedy baseline; use it with temperature 0")
    return load_failures


def _check_model_files(model: ModelSpec) -> None:
    """Cheap existence checks, so a wrong path fails before any plugin or model work."""
    if model.path == "default":
        from specdec.zoo import default_model_dir

        root = default_model_dir()
        missing = [d for d in ("target", "draft") if not (root / d / "model.safetensors").is_file()]
        if missing:
            raise ConfigError(f"specdec's default model is missing ({', '.join(missing)} under {root}); "
                              "build it with `specdec train-default` or give --model PATH")
        return
    for path in (model.path, model.draft):
        if path not in (None, "default") and not Path(path).is_dir():
            raise ConfigError(f"model path {path!r} is not a local directory (specdec never downloads)")


def resolve_placeholders(options: dict[str, Any], draft: Any) -> dict[str, Any]:
    """Replace "@draft" option values with the model entry's draft (a path or a loaded model)."""
    if any(v == DRAFT_PLACEHOLDER for v in options.values()) and draft is None:
        raise ConfigError(f"an option says {DRAFT_PLACEHOLDER!r} but the model has no draft model (set models[].draft)")
    return {k: (draft if v == DRAFT_PLACEHOLDER else v) for k, v in options.items()}


def builtin_drafters() -> list[DrafterSpec]:
    """Every installed drafter (entry points), each with the options that fit the default model."""
    specs = []
    for name in sorted(registry.known_names("drafter"), key=lambda n: (n != "none", n)):
        if name == ORACLE:
            continue
        options = {"model": DRAFT_PLACEHOLDER} if name == "draft_model" else {}
        specs.append(DrafterSpec(name=name, options=options))
    return specs


#: The bundled default model is small (17M parameters): its decoding is bound by memory traffic and per-op
#: dispatch, not arithmetic, so a second intra-op thread gains little on an idle CPU (about 10% on this
#: project's 2-core machine) and loses several-fold as soon as another process holds a core (OpenMP
#: threads wait for a descheduled peer at every op). Every result this project publishes uses one.
DEFAULT_MODEL_THREADS = 1


def preset(name: str, model: str = "default") -> SweepConfig:
    """`quick`: every built-in drafter, 2 prompts per Spec-Bench category, short answers (about 2 min on
    2 CPU cores). `full`: all 480 Spec-Bench prompts with longer answers and three warm-ups. With the
    bundled model both run on one torch thread (DEFAULT_MODEL_THREADS); other models keep torch's default."""
    register_oracle()
    oracles = [DrafterSpec(name=ORACLE, options={"draft_length": k}) for k in (2, 4, 8)]
    common: dict[str, Any] = dict(models=[{"path": model}], drafters=[*builtin_drafters(), *oracles],
                                  verifiers=["exact"], baselines=list(BASELINES),
                                  threads=DEFAULT_MODEL_THREADS if model == "default" else None)
    if name == "quick":
        return SweepConfig(**common, datasets=[DatasetSpec(per_category=2)], max_new_tokens=64, warmup=1,
                           note="preset quick")
    if name == "full":
        return SweepConfig(**common, datasets=[DatasetSpec()], max_new_tokens=256, warmup=3, note="preset full")
    raise ConfigError(f"unknown preset {name!r}; known presets: quick, full")
