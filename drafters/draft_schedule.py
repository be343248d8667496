"""How long the next draft may be: a fixed K, transformers' heuristic, or a confidence exit.

The heuristic (transformers' `num_assistant_tokens_schedule="heuristic"`): +2 after a round in
which every drafted token was accepted, otherwise -1 (never below 1, or below 0 with
`min_k=0`, where a row then decodes plainly and probes with a 1-token draft every few steps);
kept per row here, since rows of a batch accept at different rates.

The confidence exit (Draft & Verify, also transformers' `assistant_confidence_threshold`): stop
drafting a row once the draft's top probability (softmax of its raw logits) falls below a
threshold gamma; the low-confidence token itself is still proposed. With `adaptive=True` gamma
follows Draft & Verify's update (paper Eq. 2-4) after every verified round:

    AR    = beta1 * AR + (1 - beta1) * accepted / drafted       (AR = the first round's rate at first)
    gamma_tmp = gamma + eps  if AR <= alpha  else  gamma - eps
    gamma = beta2 * gamma + (1 - beta2) * gamma_tmp

and, as in the authors' code, gamma is not lowered after a round that already drafted the full K.
gamma is clamped to [0, 1] (it is compared with a probability). gamma carries over from one
generate call to the next on the same drafter instance (as in the paper's evaluation); the
smoothed rate restarts with each call (as in the authors' code).
"""

from __future__ import annotations


class HeuristicLength:
    """Per-row draft length: +2 when a round was fully accepted, else -1 (floor `floor`, ceiling
    `ceiling`). With floor 0 a row whose 1-token drafts keep failing decodes plainly (no draft
    forward, the cheapest step when the draft disagrees) and probes again with a 1-token draft
    after `probe_after` plain steps."""

    def __init__(self, initial: int, ceiling: int, floor: int = 1, probe_after: int = 4) -> None:
        self.initial = initial
        self.ceiling = max(1, ceiling)
        self.floor = max(0, min(floor, self.ceiling))
        self.probe_after = max(1, probe_after)
        self.lengths: dict[int, int] = {}
        self.idle: dict[int, int] = {}

    def length(self, row: int) -> int:
        return min(self.lengths.get(row, self.initial), self.ceiling)

    def update(self, row: int, drafted: int, accepted: int) -> None:
        current = self.length(row)
        if drafted == 0:
            if current == 0:  # a plain step: count it, and probe again after enough of them
                self.idle[row] = self.idle.get(row, 0) + 1
                if self.idle[row] >= self.probe_after:
                    self.lengths[row], self.idle[row] = 1, 0
            return
        self.lengths[row] = min(current + 2, self.ceiling) if accepted >= drafted else max(self.floor, current - 1)


class ConfidenceExit:
    """The threshold gamma of the confidence exit and, optionally, its online update."""

    def __init__(self, threshold: float, adaptive: bool, target_acceptance: float, step: float,
                 rate_smoothing: float, threshold_smoothing: float) -> None:
        self.threshold = threshold
        self.adaptive = adaptive
        self.alpha = target_acceptance
        self.step = step
        self.beta1 = rate_smoothing
        self.beta2 = threshold_smoothing
        self.rate: float | None = None  # smoothed acceptance rate AR
        self.updates = 0

    def reset_rate(self) -> None:
        self.rate = None

    def update(self, drafted: int, accepted: int, drafted_full_length: bool) -> None:
        """Feed one verified round of one row (drafted > 0 tokens, of which `accepted` were kept)."""
        if not self.adaptive or drafted == 0:
            return
        round_rate = accepted / drafted
        self.rate = round_rate if self.rate is None else self.beta1 * self.rate + (1 - self.beta1) * round_rate
        self.updates += 1
        if self.rate <= self.alpha:
            proposal = self.threshold + self.step
        elif drafted_full_length:
            return
        else:
            proposal = self.threshold - self.step
        updated = self.beta2 * self.threshold + (1 - self.beta2) * proposal
        self.threshold = min(1.0, max(0.0, updated))
