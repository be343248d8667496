"""ANPD's multi-level n-gram memory for one sequence (one request, one batch row).

One table per order n = 2..N maps the n-1 tokens before a position to the tokens seen right after
them, with counts. It is built from the prompt's token ids and grown with every committed token,
never with unverified drafts (ANPD paper, sections 3.1-3.2).

Ranking of continuations: higher count first; on a tie the most recently seen continuation wins
(the paper leaves ties open; recency is deterministic and favours the current passage). Each
context keeps its best `keep` continuations ranked at all times, so a lookup is at most N-1 dict
accesses and counting one token costs O(N * keep).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple


class Continuations(NamedTuple):
    """Tokens seen after one context: their counts, the best `keep` of them ranked, and the sum of counts.

    Only the token just counted can change rank, and it is the most recent of all, so it goes before
    every token whose count is <= its own. By induction `top` is always ordered by (count, most recent
    occurrence), and a token outside `top` is strictly less frequent than every token inside it. A
    view made on lookup (`NGramTable.entry`); the table itself keeps only int-valued dicts and tuples of
    ints (see `NGramTable`)."""

    counts: Mapping[int, int]
    top: tuple[int, ...]
    total: int  # sum of counts: a continuation's share of this context


class NGramTable:
    """Multi-level n-gram counts over token ids, for orders 2..`max_n` (context of 1..max_n-1 tokens).

    All levels share one key space: a context tuple's length tells its level, so tuples never collide.
    `keep` is how many ranked continuations each context maintains (1 for chains, the branch count for
    trees).

    Storage is three dicts keyed by the context tuple: counts (a dict of ints), the ranked top (a tuple
    of ints) and the total. None of these is a container the garbage collector keeps tracking (dicts of
    ints are never tracked, tuples of ints are untracked at their first collection), whereas an object
    per context stayed tracked: 16 tables of a few hundred tokens promoted ~70k objects a call, which set
    off full collections of the process's ~400k objects (0.18 s each on a 2 s batch-16 call) in the
    middle of decoding."""

    def __init__(self, max_n: int, keep: int = 1, tokens: Iterable[int] = ()) -> None:
        if max_n < 2:
            raise ValueError(f"max_n must be >= 2, got {max_n}")
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.max_n = max_n
        self.keep = keep
        self._counts: dict[tuple[int, ...], dict[int, int]] = {}
        self._top: dict[tuple[int, ...], tuple[int, ...]] = {}
        self._total: dict[tuple[int, ...], int] = {}
        self.length = 0  # tokens observed so far
        self._tail: list[int] = []  # the last max_n - 1 observed tokens
        self.extend(tokens)

    def __len__(self) -> int:
        """Contexts seen."""
        return len(self._counts)

    def entry(self, context: tuple[int, ...]) -> Continuations | None:
        """What followed exactly `context` (None: never seen)."""
        counts = self._counts.get(context)
        if counts is None:
            return None
        return Continuations(counts, self._top[context], self._total[context])

    def contexts(self) -> list[tuple[int, ...]]:
        """Every context seen, in first-seen order."""
        return list(self._counts)

    def extend(self, tokens: Iterable[int]) -> None:
        """Observe committed tokens in order: count each after each of its 1..N-1 preceding contexts.

        Works level by level with zip-built context tuples (the per-pair loop is the only Python
        loop), so building from a 1k-token prompt takes milliseconds."""
        new = [int(t) for t in tokens]
        if not new:
            return
        sequence = self._tail + new
        end = len(sequence)
        base = len(self._tail)
        for width in range(1, self.max_n):
            first = max(base, width)  # position of the first token counted at this level
            if first >= end:
                continue
            keys = zip(*(sequence[first - width + i : end - width + i] for i in range(width)))
            self._count(zip(keys, sequence[first:]))
        self._tail = sequence[-(self.max_n - 1) :]
        self.length += len(new)

    def append(self, token: int) -> None:
        self.extend((token,))

    def _count(self, pairs: Iterable[tuple[tuple[int, ...], int]]) -> None:
        all_counts, tops, totals = self._counts, self._top, self._total
        keep = self.keep
        for key, token in pairs:
            counts = all_counts.get(key)
            if counts is None:
                all_counts[key] = {token: 1}
                tops[key] = (token,)
                totals[key] = 1
                continue
            totals[key] += 1
            count = counts.get(token, 0) + 1
            counts[token] = count
            top = tops[key]
            if keep == 1:
                if count >= counts[top[0]]:
                    tops[key] = (token,)
                continue
            ranked = [t for t in top if t != token]
            index = 0
            while index < len(ranked) and counts[ranked[index]] > count:
                index += 1
            if index < keep:
                ranked.insert(index, token)
                tops[key] = tuple(ranked[:keep])

    @property
    def tail(self) -> list[int]:
        """The last N-1 observed tokens (a copy): the context the next draft starts from."""
        return list(self._tail)

    def lookup(self, context: Sequence[int], min_width: int = 1) -> Continuations | None:
        """Multi-level query: the longest suffix of `context` (N-1 tokens down to `min_width`) seen
        before, and its continuations; None when no suffix that long was ever followed by anything."""
        return self.lookup_width(context, min_width)[0]

    def lookup_width(self, context: Sequence[int], min_width: int = 1) -> tuple[Continuations | None, int]:
        """`lookup` and the width of the matched context (0 on a miss)."""
        size = len(context)
        for width in range(min(self.max_n - 1, size), max(min_width, 1) - 1, -1):
            entry = self.entry(tuple(context[size - width :]))
            if entry is not None:
                return entry, width
        return None, 0

    def predict(self, context: Sequence[int], min_width: int = 1) -> int | None:
        """The most frequent next token after the longest matching suffix, or None on a miss."""
        entry = self.lookup(context, min_width)
        return entry.top[0] if entry is not None else None
