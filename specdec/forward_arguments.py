"""The name under which a causal LM's forward takes its KV cache.

transformers 5.24 renamed the argument `past_key_values` to `cache` (the old name is deprecated, with a
warning, until 5.40); models written against either release, and remote code, may take either. We read the
name from the model's own signature once per runner, so one code path serves both releases.
"""

from __future__ import annotations

import inspect
from typing import Any

#: The names a forward may take its KV cache under, newest first.
CACHE_KEYWORDS = ("cache", "past_key_values")


def cache_keyword(model: Any) -> str | None:
    """The keyword `model.forward` takes its cache under, or None when it takes none."""
    accepted = inspect.signature(model.forward).parameters
    return next((name for name in CACHE_KEYWORDS if name in accepted), None)
