"""Adaptive draft exiting (Draft & Verify §3.4): stop drafting once the draft is unsure.

After each drafted token, drafting stops if the draft's confidence is below gamma (the low-confidence
token is still kept). After every verification round gamma moves toward the value that keeps the
acceptance rate near a target alpha (paper Eq. 2-4):

    AR    = beta1 * AR + (1 - beta1) * AR_e          (AR = AR_1 on the first round)
    g_tmp = gamma + eps  if AR <= alpha  else  gamma - eps
    gamma = beta2 * gamma + (1 - beta2) * g_tmp

Like the official code, gamma is not lowered when the round already drafted the maximum length
(lowering it could not draft more). Unlike it, gamma is clamped to [0, 1] (a probability threshold).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field


class AdaptiveOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    adaptive: bool = Field(True, description="False = always draft max_draft tokens (fixed length)")
    gamma0: float = Field(0.6, ge=0.0, le=1.0, description="initial confidence threshold")
    alpha: float = Field(0.9, gt=0.0, le=1.0, description="target acceptance rate")
    epsilon: float = Field(0.01, ge=0.0, le=1.0, description="step of the threshold update")
    beta1: float = Field(0.5, ge=0.0, lt=1.0, description="smoothing of the acceptance rate")
    beta2: float = Field(0.9, ge=0.0, lt=1.0, description="smoothing of the threshold")
    carry_gamma: bool = Field(True, description="start each generate call from the last call's threshold, as "
                                                "the paper's evaluation does")


@dataclass
class ExitState:
    """Threshold and smoothed acceptance rate of one sequence."""

    gamma: float
    acceptance: float | None = None  # None until the first round

    def update(self, accepted: int, drafted: int, max_draft: int, options: AdaptiveOptions) -> None:
        """Apply the paper's update after a round that drafted `drafted` tokens and kept `accepted`."""
        if drafted <= 0:
            return
        rate = accepted / drafted
        if self.acceptance is None:
            self.acceptance = rate
        else:
            self.acceptance = options.beta1 * self.acceptance + (1.0 - options.beta1) * rate
        if self.acceptance <= options.alpha:
            proposal = self.gamma + options.epsilon
        elif drafted >= max_draft:
            return  # already drafting the maximum: a lower threshold cannot help
        else:
            proposal = self.gamma - options.epsilon
        gamma = options.beta2 * self.gamma + (1.0 - options.beta2) * proposal
        self.gamma = min(1.0, max(0.0, gamma))
