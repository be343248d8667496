"""When a chain drafter should stop drafting a row: the goodput controller's exit (`DecodeState.draft_exit`).

The controller sets each row's budget before drafting, from its acceptance estimates by position. A drafter
that scores its tokens (a self-draft's confidence) learns more while it drafts: a token it is unsure of makes
every deeper node less likely. Drafting those anyway and letting the cut drop them wastes draft forwards
(layer_skip drafting to its budget, then cut: 13% of its draft forwards on summarization and RAG prompts, where
a self-draft forward costs a third of a step). After each drafted depth the exit prices, for the row alone and
with the costs and estimates the controller plans by, stopping now (the best prefix of what is drafted, the
draft already paid) against drafting on (a deeper node's chance: the path's so far times the position's
conditional estimates), and says go on only where that promises more tokens per second.

Lossless under sampling too: whether node d + 1 is drafted depends on nodes 1..d only, never on itself (the
chain's length is a stopping time of the draft), and every drafted node stays for the verifier.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .acceptance import scaled_conditional


@dataclass
class ExitRow:
    """One row's prices, read from the controller's estimates and cost table when the row is planned."""

    conditionals: list[float]  # P(node at position i accepted | its parent was), before this step's scores
    score_means: list[float]  # the drafter's mean conditional score by position (what a score is read against)
    factors: list[float]  # the row's score calibration (`RowAcceptance.factors`)
    draft: list[float]  # seconds of drafting a chain of k nodes, k = 0..len(conditionals)
    verify: list[float]  # seconds of verifying the root and k nodes, k = 0..len(conditionals)
    overheads: tuple[float, float]  # the engine's seconds of a plain step and of one that verifies a draft
    forced: int = 0  # nodes the row must draft (a probe)
    paths: list[float] = field(default_factory=list)  # P(accepted) of the nodes drafted so far

    def keep_drafting(self, depth: int, score: float) -> bool:
        """After `depth` nodes drafted (the last one scored `score`): whether drafting deeper may pay."""
        del self.paths[depth - 1:]
        position = depth - 1
        conditional = self.conditionals[position] if position < len(self.conditionals) else 0.0
        mean = self.score_means[position] if position < len(self.score_means) else 0.0
        self.paths.append(scaled_conditional(conditional, score, mean, self.factors) * (self.paths[-1] if self.paths else 1.0))
        if depth < self.forced:
            return True
        if depth >= len(self.conditionals):
            return False
        plain, drafted = self.overheads
        paid = self.draft[depth]
        tokens = 1.0
        stop = tokens / max(paid + self.verify[0] + plain, 1e-12)
        for k, p in enumerate(self.paths, start=1):
            tokens += p
            stop = max(stop, tokens / max(paid + self.verify[k] + drafted, 1e-12))
        chance = self.paths[-1]
        for k in range(depth + 1, len(self.conditionals) + 1):
            chance *= self.conditionals[k - 1]
            tokens += chance
            if tokens / max(self.draft[k] + self.verify[k] + drafted, 1e-12) > stop:
                return True
        return False


class ChainExit:
    """The step's exit for every row of the batch; a row's prices are read when the drafter first asks."""

    def __init__(self, batch: int, build: Callable[[int], ExitRow | None]) -> None:
        self._build = build
        self._rows: list[ExitRow | None | bool] = [False] * batch  # False: not built yet

    def _row(self, b: int) -> ExitRow | None:
        row = self._rows[b]
        if row is False:
            row = self._rows[b] = self._build(b)
        return row  # type: ignore[return-value]

    def keep_drafting(self, depth: int, scores: Sequence[float], rows: Sequence[bool] | None = None) -> list[bool]:
        """After the drafter drafted `depth` nodes of each row's chain (1: the first), `scores[b]` row b's last
        node's conditional score (its confidence given its parent, the drafter's `Draft.scores` ratio): whether
        row b should draft deeper. `rows`: the rows still drafting (the others are not priced). A row the
        controller did not plan a costly chain for always goes on (its budget bounds it)."""
        out = []
        for b, score in enumerate(scores):
            row = self._row(b) if rows is None or rows[b] else None
            out.append(True if row is None else row.keep_drafting(depth, float(score)))
        return out
