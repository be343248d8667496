"""A third-party drafter: guess that each token is followed by what followed it last time."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from specdec import DecodeState, Draft, Drafter, GenerationContext


class BigramOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    k: int = Field(4, ge=1, le=32, description="maximum draft length")


class BigramDrafter(Drafter):
    name = "bigram"
    description = "Chains 'what followed this token last time' lookups over the row's own text."
    Options = BigramOptions

    def setup(self, context: GenerationContext) -> None:
        self.follower: dict[int, dict[int, int]] = {}  # row id -> token -> the token that last followed it
        self.indexed: dict[int, int] = {}  # row id -> how many tokens of the row are indexed

    def propose(self, state: DecodeState) -> Draft:
        rows = []
        for row, sequence in zip(state.row_ids, state.sequences):
            table = self.follower.setdefault(row, {})
            for i in range(max(self.indexed.get(row, 0) - 1, 0), len(sequence) - 1):
                table[sequence[i]] = sequence[i + 1]
            self.indexed[row] = len(sequence)
            guess, current = [], sequence[-1]
            while len(guess) < self.options.k and current in table:
                current = table[current]
                guess.append(current)
            rows.append((guess, list(range(-1, len(guess) - 1))))  # a chain: parent of node i is i - 1
        return Draft.from_rows(rows)
