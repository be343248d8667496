"""ANPD's multi-level n-gram memory for one sequence (one request, one batch row).

One table per order n = 2..N maps the n-1 tokens before a position to the tokens seen right after
them, with counts. It is built from the prompt's token ids and grown with every committed token,
never with unverified drafts (ANPD paper, sections 3.1-3.2).

Ranking of continuations: higher count first; on a tie the most recently seen continuation wins
(the paper leaves ties open; recency is deterministic and favours the current passage). Each
context keeps its best `keep` continuations ranked at all times, so a lookup is one dict access and
an update of one token costs O(N * keep).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


class Continuations:
    """Tokens seen after one context: count and last position per token, plus the ranked top few."""

    __slots__ = ("counts", "last", "top")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.last: dict[int, int] = {}
        self.top: list[int] = []  # best first by (count, last position); at most `keep` tokens

    def add(self, token: int, position: int, keep: int) -> None:
        """Count one more occurrence of `token`. Only this token's rank can change, and it can only
        rise: it now has the newest position, so it outranks every token with a count <= its own."""
        count = self.counts.get(token, 0) + 1
        self.counts[token] = count
        self.last[token] = position
        top = self.top
        if token in top:
            top.remove(token)
        counts = self.counts
        index = 0
        while index < len(top) and counts[top[index]] > count:
            index += 1
        if index < keep:
            top.insert(index, token)
            if len(top) > keep:
                top.pop()

    def ranked(self) -> list[tuple[int, int, int]]:
        """Every continuation as (token, count, last position), best first (for tests and debugging)."""
        order = sorted(self.counts, key=lambda t: (self.counts[t], self.last[t]), reverse=True)
        return [(t, self.counts[t], self.last[t]) for t in order]


class NGramTable:
    """Multi-level n-gram counts over token ids, for orders 2..`max_n` (context of 1..max_n-1 tokens).

    All levels share one dict: a context tuple's length tells its level, so tuples never collide.
    `keep` is how many ranked continuations each context maintains (1 for chains, the branch
    count for trees).
    """

    def __init__(self, max_n: int, keep: int = 1, tokens: Iterable[int] = ()) -> None:
        if max_n < 2:
            raise ValueError(f"max_n must be >= 2, got {max_n}")
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.max_n = max_n
        self.keep = keep
        self.contexts: dict[tuple[int, ...], Continuations] = {}
        self.length = 0  # tokens observed so far
        self._tail: list[int] = []  # the last max_n - 1 observed tokens
        self.extend(tokens)

    def append(self, token: int) -> None:
        """Observe one committed token: count it after each of its 1..N-1 preceding contexts."""
        token = int(token)
        tail = self._tail
        contexts = self.contexts
        size = len(tail)
        for width in range(1, size + 1):
            key = tuple(tail[size - width :])
            entry = contexts.get(key)
            if entry is None:
                entry = contexts[key] = Continuations()
            entry.add(token, self.length, self.keep)
        tail.append(token)
        if len(tail) > self.max_n - 1:
            del tail[0]
        self.length += 1

    def extend(self, tokens: Iterable[int]) -> None:
        for token in tokens:
            self.append(token)

    @property
    def tail(self) -> list[int]:
        """The last N-1 observed tokens (a copy): the context the next draft starts from."""
        return list(self._tail)

    def lookup(self, context: Sequence[int]) -> Continuations | None:
        """Multi-level query: the longest suffix of `context` (N-1 tokens down to 1) seen before,
        and its continuations; None when even the last token was never followed by anything."""
        size = len(context)
        contexts = self.contexts
        for width in range(min(self.max_n - 1, size), 0, -1):
            entry = contexts.get(tuple(context[size - width :]))
            if entry is not None:
                return entry
        return None

    def predict(self, context: Sequence[int]) -> int | None:
        """The most frequent next token after the longest matching suffix, or None on a miss."""
        entry = self.lookup(context)
        return entry.top[0] if entry is not None else None
