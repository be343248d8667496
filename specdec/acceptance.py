"""Online acceptance estimates: how likely each node of a row's next draft is to be accepted.

Nodes are numbered by position in the drafter's order (a chain's depth i + 1; a tree's i-th node,
best-scored first or breadth-first). Per position the estimate is *conditional*: c[i] = P(node i is
accepted | its parent was, and it was verified). A node's chance is then c[i] times its parent's, so on
a chain P(depth d) = c[0] * ... * c[d-1]. Conditionals are what stays put while the text changes: when
a row starts copying a passage, the first positions' verdicts raise every deeper node's chance at once,
even for depths the controller has not verified lately (marginal estimates would stay where they were
left, and a cut never verifying them would never learn otherwise).

Drafters that score their nodes (`Draft.scores`: anpd's match quality, PPD's path probabilities, a
self-draft's confidence) tell the cut which of this step's proposals are better or worse than usual: a
node's conditional score (its score over its parent's) is read against the mean conditional score seen at
that position, and c[i] is scaled by a factor learnt per bin of that ratio: the verified nodes scored in
the bin, their acceptances over their estimates. It starts at the square root of the ratio (between 1/2
and 2 times), and learns how much the scores really tell: a layer-skip draft copying a RAG passage is
unsure of tokens it gets right (confidence 0.1-0.2, accepted), where the square-root rule halved their
chances. The level comes from the verdicts, never from the scores' own scale.

Counts decay each time a position is observed (recent text matters more). A prior enters as a few
pseudo-counts that decay with the rest, so it only speaks until a position has been seen a few times;
for a drafter that scores, the prior is the mean conditional score at that position.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field

#: Default prior: the first node is accepted 60% of the time, each next one 85% given its parent,
#: optimistic enough that a new row tries its drafter, weak enough to be overruled after a few verdicts.
PRIOR_FIRST = 0.6
PRIOR_NEXT = 0.85
PRIOR_WEIGHT = 2.0
DECAY = 0.85
#: Per step without a verdict, how much of a row's evidence on a drafter it plans before drafting (`explore`)
#: remains when the next verdict comes (`RowAcceptance.fade`): acceptance comes in bursts, so what failed
#: thirty steps ago says little about now. Faded to a trial or two, the evidence lets one verdict after a long
#: plain stretch decide; a draft model's probe accepted in a repeating answer left the row plain with its six
#: trials' worth of earlier failures (conditional 0.07 -> 0.22) where transformers' heuristic drafts again.
STEP_FADE = 0.92
#: Least weight (in trials) faded evidence keeps at a position: one verdict moves it, none erases it.
FADE_FLOOR = 1.0
#: Pseudo-count of the parent's estimate in an explored position's (`RowAcceptance.conditional`): what a
#: stale position's estimate returns to as its own counts age.
STALE_WEIGHT = 0.25


#: Bins of a node's conditional score over its position's mean score, by log2 of that ratio: the edges, and
#: the centre of each bin (the default calibration is the square-root rule there).
SCORE_BIN_EDGES = (-1.5, -0.75, -0.25, 0.25, 0.75, 1.5)
SCORE_BIN_CENTRES = (-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0)
#: Weight (in expected acceptances) of a bin's prior factor against what its verdicts say.
CALIBRATION_WEIGHT = 2.0
#: Bins of a node's conditional score itself (`RowAcceptance.by_score`): the upper edges, and each bin's
#: prior acceptance (the score taken as a probability, about the bin's middle).
ABSOLUTE_BIN_EDGES = (0.02, 0.05, 0.1, 0.2, 0.3, 0.45, 0.6, 0.75, 0.9)
ABSOLUTE_BIN_PRIORS = (0.01, 0.035, 0.075, 0.15, 0.25, 0.375, 0.525, 0.675, 0.825, 0.95)
#: Weight (in trials) of an absolute bin's prior; its counts decay with the estimate's (a row's, or the pooled).
ABSOLUTE_WEIGHT = 2.0


def _square_root_rule(log_ratio: float) -> float:
    """A score 2**log_ratio times the usual one makes acceptance that much likelier, square-rooted, between 1/2
    and 2 times (damped: twice the usual score is likelier, not twice as likely)."""
    return min(2.0, max(0.5, 2.0 ** (log_ratio / 2)))


def score_bin(score: float, mean: float) -> int | None:
    """The calibration bin of a conditional score read against its position's mean (None: no mean yet)."""
    if mean <= 0:
        return None
    return bisect_left(SCORE_BIN_EDGES, math.log2(max(score, 1e-9) / mean))  # the edges below the ratio


def absolute_bin(score: float) -> int:
    """The bin of a conditional score read as a probability (`RowAcceptance.by_score`)."""
    return bisect_right(ABSOLUTE_BIN_EDGES, score)  # the edges at or below the score (per node, every step)


def default_factors() -> list[float]:
    """The calibration before any verdict: the square-root rule at each bin's centre."""
    return [_square_root_rule(centre) for centre in SCORE_BIN_CENTRES]


def scaled_conditional(conditional: float, score: float, mean: float, factors: Sequence[float] | None) -> float:
    """A node's conditional estimate read against its conditional score (at most 1; unscaled without a mean):
    times the calibration factor of the score's bin (`RowAcceptance.factors`), or with `factors` None by the
    square-root rule of the score's ratio to the mean."""
    if mean <= 0:
        return conditional
    if factors is None:
        return min(1.0, conditional * _square_root_rule(math.log2(max(score, 1e-9) / mean)))
    return min(1.0, conditional * factors[score_bin(score, mean)])  # type: ignore[index]


def _prior(values: list[float], position: int) -> float:
    if position < len(values):
        return values[position]
    if values:
        return values[-1]
    return PRIOR_FIRST if position == 0 else PRIOR_NEXT


@dataclass
class RowAcceptance:
    """Decayed conditional acceptance counts and mean conditional scores by position, for one row and
    drafter."""

    prior: list[float] = field(default_factory=list)  # prior conditional acceptance by position
    weight: float = PRIOR_WEIGHT
    decay: float = DECAY
    hits: list[float] = field(default_factory=list)
    trials: list[float] = field(default_factory=list)
    score_mean: list[float] = field(default_factory=list)  # mean conditional score by position
    # Calibration of scores (`factors`): per score bin, the prior factor, and the decayed accepted count and
    # expected count (the unscaled conditional estimates) of the verified nodes whose score fell there.
    score_prior: list[float] = field(default_factory=default_factors)
    score_hits: list[float] = field(default_factory=lambda: [0.0] * (len(SCORE_BIN_EDGES) + 1))
    score_expected: list[float] = field(default_factory=lambda: [0.0] * (len(SCORE_BIN_EDGES) + 1))
    # Acceptance by the conditional score's own value (`by_score`): per absolute bin, the prior and the decayed
    # accepted and judged counts.
    absolute_prior: list[float] = field(default_factory=lambda: list(ABSOLUTE_BIN_PRIORS))
    absolute_hits: list[float] = field(default_factory=lambda: [0.0] * len(ABSOLUTE_BIN_PRIORS))
    absolute_trials: list[float] = field(default_factory=lambda: [0.0] * len(ABSOLUTE_BIN_PRIORS))
    _absolute: list[float] | None = field(default=None, repr=False, compare=False)  # `absolute()`, kept up to date

    def _start(self, position: int) -> float:
        """Before any verdict at a position: the prior, else (for drafters that score) the mean score
        there, which for probability-like scores (PPD's measured accuracies, a draft's confidence) is
        better than a guess; siblings in a tree get their scores' small chances, not 60% each."""
        if position < len(self.prior):
            return self.prior[position]
        if position < len(self.score_mean) or not self.prior:
            return self.unseen(position)
        return self.prior[-1]

    def conditional(self, position: int, explore: bool = False, parent: float | None = None) -> float:
        """c[position]. With `explore` (drafters whose length is planned before drafting: a draft model,
        layer_skip), a position is taken as likelier where its parent's explored estimate `parent` is:
        * not verified yet (extending a chain past the deepest one): no less likely than its parent.
          Otherwise a position whose pooled prior is pessimistic is never drafted, so never corrected
          (layer_skip accepting 4 of 4 every step was held at 4 by a pooled 0.48 at the fifth node);
        * verified before: its counts plus STALE_WEIGHT pseudo-counts at the parent's value. Counts of
          positions a step did not verify age (`observe(age=True)`), so a position not verified lately
          returns to its parent's estimate and is tried again: a draft model whose second token failed
          twice early in a translation was then held at one token a step for 60 steps accepting every
          first token.
        A free drafter (anpd) proposes every position anyway and is cut by its scores; exploring there
        verified longer losing tails (mt_bench 0.91 of its constant rule instead of 0.96)."""
        if position < len(self.trials):
            hits, trials = self.hits[position], self.trials[position]
            if explore and parent is not None:
                return (hits + STALE_WEIGHT * parent) / (trials + STALE_WEIGHT)
            return hits / trials
        start = self._start(position)
        if explore and self.trials:
            return max(start, parent if parent is not None else self.hits[-1] / self.trials[-1])
        return start

    def probs(self, count: int, explore: bool = False) -> list[float]:
        """P(accepted) of a chain's first `count` nodes (`explore`: see `conditional`)."""
        out: list[float] = []
        p = 1.0
        c: float | None = None
        for i in range(count):
            c = self.conditional(i, explore, c)
            p *= c
            out.append(p)
        return out

    def node_probs(self, parents: Sequence[int], scores: Sequence[float] | None = None,
                   explore: bool = False) -> list[float]:
        """P(accepted) of nodes in position order; `parents[i]` is the position of node i's parent (-1:
        the root, always earlier); `scores` their conditional scores, when the drafter gives some;
        `explore`: see `conditional` (chain extensions only, never a sibling)."""
        return self.node_estimates(parents, scores, explore)[0]

    def node_estimates(self, parents: Sequence[int], scores: Sequence[float] | None = None,
                       explore: bool = False) -> tuple[list[float], list[tuple[int | None, float]]]:
        """`node_probs`, and per node what its verdict teaches the score calibration (`observe`): its score's
        bin (None: unscored) and its conditional estimate before the score was read. Scores are read through
        the learnt calibration (`factors`) for drafters planned before drafting (`explore`: layer_skip's
        confidences), where it stops their chains (specdec.chain_exit) and cuts them; a free drafter's (anpd's
        match quality) keep the square-root rule: learnt from the nodes a cut kept, they lost anpd 1.4% of its speed
        (8% on mt_bench prompts) in an interleaved A/B, where layer_skip gained 1-6% (three runs). With hindsight
        anpd reads its scores by value instead (`by_score`)."""
        out: list[float] = []
        conditionals: list[float] = []
        readings: list[tuple[int | None, float]] = []
        factors = self.factors() if scores is not None and explore else None
        for i, parent in enumerate(parents):
            c = self._node_conditional(i, parent, explore, conditionals)
            conditionals.append(c)
            scored = scores is not None and i < len(self.score_mean)
            readings.append((score_bin(scores[i], self.score_mean[i]) if scored else None, c))  # type: ignore[index]
            if scored:
                c = scaled_conditional(c, scores[i], self.score_mean[i], factors)  # type: ignore[index]
            out.append(c * (out[parent] if parent >= 0 else 1.0))
        return out, readings

    def _node_conditional(self, i: int, parent: int, explore: bool, before: Sequence[float]) -> float:
        """Node i's conditional estimate given its parent's position and the conditionals of the nodes before it
        (`explore`: a chain extension is explored, see `conditional`; a sibling never is)."""
        chained = explore and parent == i - 1
        return self.conditional(i, chained, before[parent] if chained and parent >= 0 else None)

    def by_score(self, parents: Sequence[int], scores: Sequence[float]
                 ) -> tuple[list[float], list[tuple[int | None, float]]]:
        """`node_estimates` for a drafter cut by its scores whose every cut node is judged too (hindsight,
        `specdec.controller.hindsight`): a node's conditional is the acceptance learnt for its conditional
        score's own value (`absolute_bin`), whatever its position. Read against its position's mean instead,
        anpd's match score put nodes the cut dropped at a third of what they were accepted at (0.13 against
        0.31 for scores 0.3-0.5), where the score's value alone matched the verdicts (0.33; 0.69 for 0.5-0.7).
        Readings carry the absolute bin."""
        table = self._absolute_table()
        out: list[float] = []
        readings: list[tuple[int | None, float]] = []
        for i, parent in enumerate(parents):
            index = absolute_bin(scores[i])
            c = table[index]
            readings.append((index, c))
            out.append(c * (out[parent] if parent >= 0 else 1.0))
        return out, readings

    def absolute(self) -> list[float]:
        """Per absolute bin, the acceptance `by_score` reads (a new row's prior, `fork`)."""
        return list(self._absolute_table())

    def _absolute_table(self) -> list[float]:
        """`absolute()` itself, worked out once and then kept bin by bin as verdicts come (`observe`): `by_score`
        reads it every step of a free drafter."""
        if self._absolute is None:
            self._absolute = [self._absolute_bin(index) for index in range(len(self.absolute_prior))]
        return self._absolute

    def _absolute_bin(self, index: int) -> float:
        return ((self.absolute_hits[index] + ABSOLUTE_WEIGHT * self.absolute_prior[index])
                / (self.absolute_trials[index] + ABSOLUTE_WEIGHT))

    def factors(self) -> list[float]:
        """Per score bin, how much likelier than its position's estimate a node scored there is accepted: the
        verified nodes' acceptances over their estimates, starting from the prior factor (`score_prior`)."""
        return [min(4.0, (hits + CALIBRATION_WEIGHT * prior) / (expected + CALIBRATION_WEIGHT))
                for prior, hits, expected in zip(self.score_prior, self.score_hits, self.score_expected)]

    def observe(self, parents: Sequence[int], accepted: Sequence[bool], age: bool = False,
                readings: Sequence[tuple[int | None, float]] | None = None,
                known: Sequence[bool] | None = None, by_score: bool = False) -> None:
        """Verdict of one step over the verified nodes in position order: a node is a trial of its
        position's conditional when its parent was accepted (or is the root). `age`: the counts of positions
        the step did not verify age (drafters whose estimates are read with `explore`, see `conditional`);
        not for a free drafter's, whose deep positions would then swing with each verdict (anpd, cut by
        them, fell from 105% to 91% of its constant rule on mt_bench and summarization prompts).
        `readings`: the verified nodes' (score bin, estimate) from `node_estimates`, which the trials teach
        the score calibration of explored drafters (`age`; see `node_estimates`), or with `by_score` its bins.
        `known`: which nodes' verdicts are known (None: all); the others are no trials (nodes below one cut away,
        judged in hindsight). `by_score`: the readings are `by_score`'s."""
        if len(self.trials) < len(accepted):
            # A position verified for the first time enters with prior pseudo-counts that decay too, at what it was
            # priced at until now (`conditional`; with `age`, chains are explored: no less likely than the parent).
            # Entered at the prior alone, an explored position fell when its first verdict was an acceptance
            # (1.0 -> 0.71 under a pooled prior of 0.5), and layer_skip's chains stopped at 7, the seventh node low.
            priced: list[float] = []
            for i, parent in enumerate(parents[:len(accepted)]):
                priced.append(self._node_conditional(i, parent, age, priced))
            for position in range(len(self.trials), len(accepted)):
                self.hits.append(self.weight * priced[position])
                self.trials.append(self.weight)
        for i, (parent, hit) in enumerate(zip(parents, accepted)):
            if (parent >= 0 and not accepted[parent]) or (known is not None and not known[i]):
                continue
            self.hits[i] = self.decay * self.hits[i] + float(hit)
            self.trials[i] = self.decay * self.trials[i] + 1.0
            learns = (age or by_score) and readings is not None and i < len(readings)
            index, estimate = readings[i] if learns else (None, 0.0)  # type: ignore[index]
            if index is not None and by_score:
                self.absolute_hits[index] = self.decay * self.absolute_hits[index] + float(hit)
                self.absolute_trials[index] = self.decay * self.absolute_trials[index] + 1.0
                if self._absolute is not None:
                    self._absolute[index] = self._absolute_bin(index)
            elif index is not None:
                self.score_hits[index] = self.decay * self.score_hits[index] + float(hit)
                self.score_expected[index] = self.decay * self.score_expected[index] + estimate
        for i in range(len(accepted), len(self.trials) if age else 0):  # not verified this step: they age
            if self.trials[i] > 1e-6:  # (their ratio stays; long rows must not age it to 0 / 0)
                self.hits[i] *= self.decay
                self.trials[i] *= self.decay

    def fade(self, steps: int) -> None:
        """Evidence ages with time as well as with verdicts: after `steps` steps without one, the counts
        shrink by STEP_FADE per step (never below FADE_FLOOR trials, never raised), keeping each position's
        ratio, so pricing is unchanged until the next verdict, which then weighs more."""
        if steps <= 0:
            return
        factor = STEP_FADE ** steps
        for i, trials in enumerate(self.trials):
            scale = max(factor, min(1.0, FADE_FLOOR / trials)) if trials > 0 else 1.0
            self.hits[i] *= scale
            self.trials[i] *= scale

    def observe_scores(self, scores: Sequence[float]) -> None:
        """Conditional scores of one proposal in position order (every proposed node, verified or not)."""
        for i, score in enumerate(scores):
            if i >= len(self.score_mean):
                self.score_mean.append(score)
            else:
                self.score_mean[i] = self.decay * self.score_mean[i] + (1 - self.decay) * score

    def relaxed(self, fraction: float, down: bool = True) -> RowAcceptance:
        """A fork (same weight and decay) whose prior conditionals lie `fraction` of the way from this estimate's
        back to where an estimate without verdicts starts (`unseen`): for a pooled estimate that no verdict reached
        for a while, what the requests it was learnt on accepted says less and less about the next one. `down=False`:
        only conditionals below that start move (up); those above it stay."""
        fresh = self.fork(self.weight, self.decay)
        starts = [self.unseen(i) for i in range(len(fresh.prior))]
        fresh.prior = [c if not down and c >= start else (1.0 - fraction) * c + fraction * start
                       for c, start in zip(fresh.prior, starts)]
        return fresh

    def unseen(self, position: int) -> float:
        """Where an estimate with no prior and no verdicts starts at `position`: the mean conditional score there
        for a drafter that scores (a PPD tree's siblings have small chances, not 60% each), else the default prior
        (PRIOR_FIRST, then PRIOR_NEXT)."""
        if position < len(self.score_mean):
            return min(1.0, self.score_mean[position])
        return _prior([], position)

    def fork(self, weight: float = PRIOR_WEIGHT, decay: float = DECAY) -> RowAcceptance:
        """A fresh estimate whose prior is this one (pooled rows -> a new row's starting point)."""
        count = max(len(self.trials), len(self.prior), 1)
        return RowAcceptance(prior=[self.conditional(i) for i in range(count)], weight=weight, decay=decay,
                             score_mean=list(self.score_mean), score_prior=self.factors(),
                             absolute_prior=self.absolute())
