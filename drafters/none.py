"""The empty drafter: plain autoregressive decoding through the same engine."""

from __future__ import annotations

from specdec.draft import Draft
from specdec.plugins import DecodeState, Drafter


class NoDrafter(Drafter):
    name = "none"
    description = "No drafting: plain autoregressive decoding (one token per step)."

    def controlled(self) -> bool:
        return False  # nothing to cut: no controller overhead on plain decoding

    def propose(self, state: DecodeState) -> Draft:
        return Draft.empty(state.batch_size)
