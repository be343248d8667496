"""Exceptions raised by specdec. Each names the component at fault so users can act on it."""

from __future__ import annotations


class SpecDecError(Exception):
    """Base class of every error specdec raises on purpose."""


class PluginNotFoundError(SpecDecError, KeyError):
    """An unknown drafter or verifier name."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class PluginLoadError(SpecDecError):
    """A plugin exists but could not be imported or is not a Drafter/Verifier."""


class PluginOptionsError(SpecDecError, ValueError):
    """Options given to a plugin failed its pydantic validation."""


class DrafterError(SpecDecError):
    """A drafter returned an invalid draft or raised while drafting."""


class VerifierError(SpecDecError):
    """A verifier returned an invalid verdict or raised while verifying."""


class UnsupportedModelError(SpecDecError):
    """The engine cannot serve this model (no causal LM head, recurrent cache, failed tree check...).

    `feature`: the short name of what is missing (for tables and programs); the message says it in full."""

    def __init__(self, message: str, feature: str | None = None) -> None:
        super().__init__(message)
        self.feature = feature
