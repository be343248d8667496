"""specdec: speculative decoding for Hugging Face transformers models, any drafter with any verifier."""

from .api import GenerationOutput, generate
from .draft import Draft, ExtraHost, ExtraSlots, Verdict
from .errors import (
    DrafterError,
    PluginLoadError,
    PluginNotFoundError,
    PluginOptionsError,
    SpecDecError,
    UnsupportedModelError,
    VerifierError,
)
from .plugins import DecodeState, Drafter, GenerationContext, NominalCost, NoOptions, Verifier
from .registry import list_plugins, register_drafter, register_verifier
from .rng import RowGenerators
from .sampling import SamplingParams, process_logits, sample
from .stats import GenerationStats

__version__ = "0.1.0"


def load_default():
    """The bundled default model pair: (target, draft, tokenizer). Trained by specdec.zoo."""
    from .zoo import load_default as _load_default

    return _load_default()


__all__ = [
    "Draft",
    "DecodeState",
    "Drafter",
    "DrafterError",
    "ExtraHost",
    "ExtraSlots",
    "GenerationContext",
    "GenerationOutput",
    "GenerationStats",
    "NominalCost",
    "NoOptions",
    "PluginLoadError",
    "PluginNotFoundError",
    "PluginOptionsError",
    "RowGenerators",
    "SamplingParams",
    "SpecDecError",
    "UnsupportedModelError",
    "Verdict",
    "Verifier",
    "VerifierError",
    "generate",
    "list_plugins",
    "load_default",
    "process_logits",
    "register_drafter",
    "register_verifier",
    "sample",
]
