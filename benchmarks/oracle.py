"""A benchmark-only drafter that knows the answer: it proposes the baseline's own greedy continuation.

With every guess right, the speedup it reaches for a draft length k is the most this engine can give
on this model and hardware at that k (the cost of verifying k+1 tokens per step is all that is left).
The harness registers it in-process (`register_oracle`); it is never an installed entry point.
"""

from __future__ import annotations

import hashlib
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


class OracleDrafter(Drafter):
    name = NAME
    description = "benchmark only: proposes the baseline's own continuation (the engine's ceiling per draft length)"
    Options = OracleOptions

    def __init__(self, options: OracleOptions | None = None) -> None:
        super().__init__(options)
        self._rows: dict[int, tuple[int, list[int] | None]] = {}

    def setup(self, context: GenerationContext) -> None:
        table = self.options.continuations
        self._rows = {row: (len(prompt), table.get(prompt_key(prompt))) for row, prompt in enumerate(context.prompts)}

    def propose(self, state: DecodeState) -> Draft:
        k = self.options.draft_length
        rows = []
        for row, sequence in zip(state.row_ids, state.sequences):
            prompt_length, reference = self._rows[row]
            done = len(sequence) - prompt_length
            # Once the output leaves the reference (sampling, a lossy verifier) there is nothing to propose.
            if reference is None or reference[:done] != sequence[prompt_length:]:
                guess: list[int] = []
            else:
                guess = reference[done : done + k]
            rows.append((guess, list(range(-1, len(guess) - 1))))
        return Draft.from_rows(rows)

    def finish(self) -> None:
        self._rows = {}


def register_oracle() -> None:
    """Make `oracle` resolvable by name in this process (the harness and each Ray worker call this)."""
    register_drafter(NAME, OracleDrafter)
