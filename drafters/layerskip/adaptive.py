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

from pydantic import BaseModel, ConfigDict, Field

from ..draft_schedule import ConfidenceExit


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


def exit_rule(options: AdaptiveOptions, gamma: float) -> ConfidenceExit:
    """One row's threshold (starting at `gamma`) and smoothed acceptance rate, updated by the rule above,
    which lives once in `drafters/draft_schedule.py` (draft_model's confidence schedule uses it too)."""
    return ConfidenceExit(gamma, True, options.alpha, options.epsilon, options.beta1, options.beta2)
