"""Stopping on eos ids and stop strings, applied to each step's committed tokens in order, so
output never contains a token past a stop even when a whole draft was accepted beyond it."""

from __future__ import annotations

from typing import Any


class StopChecker:
    """Per-row stop state. Keeps the token that completes a stop (eos id or stop string), like HF."""

    def __init__(self, eos_token_ids: frozenset[int], stop_strings: tuple[str, ...], tokenizer: Any | None) -> None:
        if stop_strings and tokenizer is None:
            raise ValueError("stop strings need a tokenizer to decode the generated text")
        self.eos = eos_token_ids
        self.stops = stop_strings
        self.tokenizer = tokenizer
        # Enough trailing tokens to contain any stop string (each token decodes to >= 0 chars, byte
        # fragments included, so look back generously).
        self.window = 4 * max((len(s) for s in stop_strings), default=0) + 4

    def _hits_stop(self, generated: list[int]) -> bool:
        text = self.tokenizer.decode(generated[-self.window :], skip_special_tokens=False)
        return any(stop in text for stop in self.stops)

    def scan(self, generated: list[int], new: list[int]) -> tuple[list[int], str | None]:
        """Return the prefix of `new` to keep and why the row stops ("eos", "stop") or None."""
        for index, token in enumerate(new):
            if token in self.eos:
                return new[: index + 1], "eos"
            if self.stops and self._hits_stop(generated[-self.window :] + new[: index + 1]):
                return new[: index + 1], "stop"
        return new, None
