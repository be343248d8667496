"""A benchmark-only drafter that knows the answer: it proposes the baseline's own greedy continuation.

With every guess right, the speedup it reaches for a draft length k is the most this engine can give
on this model and hardware at that k (the cost of verifying k+1 tokens per step is all that is left).
The harness registers it in-process (`register_oracle`); it is never an installed entry point.

With `accuracy` < 1 each guessed position is right with that probability (a fixed pseudo-random draw
per prompt and position, so every batch size and mode sees the same drafts) and the draft ends with
the first wrong token: a drafter of known quality, to find the acceptance a batch size needs to win.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from specdec import DecodeState, Draft, Drafter, GenerationContext, register_drafter

NAME = "oracle"


def prompt_key(prompt: Sequence[int]) -> str:
    """A short stable key for a prompt's token ids (what continuations are looked up by)."""
    return hashlib.sha1(",".join(map(str, prompt)).encode()).hexdigest()[:20]


class OracleOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    draft_length: int = Field(4, ge=1, le=255, description="tokens proposed per step (a chain)")
    continuations: dict[str, list[int]] = Field(
        default_factory=dict, description="prompt_key(prompt ids) -> the baseline's generated token ids")
    accuracy: float = Field(1.0, ge=0.0, le=1.0, description="chance that each guessed token is the right one")


class OracleDrafter(Drafter):
    name = NAME
    description = "benchmark only: proposes the baseline's own continuation (the engine's ceiling per draft length)"
    Options = OracleOptions

    def __init__(self, options: OracleOptions | None = None) -> None:
        super().__init__(options)
        self._rows: dict[int, tuple[int, list[int] | None, str]] = {}
        self._vocab_size = 0

    def controlled(self) -> bool:
        return False  # a fixed draft length: the engine's ceiling at that length, never cut

    def setup(self, context: GenerationContext) -> None:
        table = self.options.continuations
        self._vocab_size = context.vocab_size
        self._rows = {}
        for row, prompt in enumerate(context.prompts):
            key = prompt_key(prompt)
            self._rows[row] = (len(prompt), table.get(key), key)

    def propose(self, state: DecodeState) -> Draft:
        k = self.options.draft_length
        rows = []
        for row, sequence in zip(state.row_ids, state.sequences):
            prompt_length, reference, key = self._rows[row]
            done = len(sequence) - prompt_length
            # Once the output leaves the reference (sampling, a lossy verifier) there is nothing to propose.
            if reference is None or reference[:done] != sequence[prompt_length:]:
                guess: list[int] = []
            else:
                guess = self._corrupt(reference[done : done + k], key, done)
            rows.append((guess, list(range(-1, len(guess) - 1))))
        return Draft.from_rows(rows)

    def _corrupt(self, guess: list[int], key: str, done: int) -> list[int]:
        """Keep each position with probability `accuracy`; the first miss becomes a wrong token and ends the draft."""
        if self.options.accuracy >= 1.0:
            return guess
        for index, token in enumerate(guess):
            if random.Random(f"{key}:{done + index}").random() >= self.options.accuracy:
                return guess[:index] + [(token + 1) % self._vocab_size]
        return guess

    def finish(self) -> None:
        self._rows = {}


def register_oracle() -> None:
    """Make `oracle` resolvable by name in this process (the harness and each Ray worker call this)."""
    register_drafter(NAME, OracleDrafter)
