"""Where a greedy output parts from the reference, and whether it parts at a near tie.

In bfloat16 or float16 two computations of the same logits differ in their last bits: a verification forward of
k+1 inputs, a one-token decoding step and transformers' own `generate` each round a position's logits their own
way, and where the reference's two best tokens are that close, greedy decoding may take either (transformers'
prompt lookup and assisted generation part from its plain greedy output there too). The benchmark's greedy check
tells such a parting from a wrong token: at the first position where a method's output differs from the
reference, the target is run once on the reference's own prefix, and the token the method chose must be within
the dtype's rounding of the best logit there. A token clearly worse than the best is a mismatch, as before.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import torch

from specdec.target import model_device

#: Two computations of one logit were seen to differ by up to ~1.3 units in the last place of the logits' scale
#: (the bundled target in bfloat16: a whole-prefix forward against one-token steps); the chosen token's logit
#: and the best then differ by at most twice that. Four units leave room for other kernels.
TIE_UNITS = 4.0


def tie_tolerance(logits: torch.Tensor, dtype: torch.dtype, units: float = TIE_UNITS) -> float:
    """How far below the best logit a token may be and still be a rounding tie in `dtype`: `units` units in the
    last place at the logits' scale, at least 1 (the hidden states rounded on the way are of that order, so
    near-zero logits of a random model still carry their error; float32: ~1e-6, which no real choice hides in)."""
    return units * torch.finfo(dtype).eps * max(1.0, float(logits.abs().max()))


def first_difference(ours: Sequence[int], reference: Sequence[int]) -> int:
    """The first position where two token lists differ (the shorter one's length where one is a prefix of the
    other; equal lists give their length)."""
    return next((i for i, (a, b) in enumerate(zip(ours, reference)) if a != b), min(len(ours), len(reference)))


@torch.no_grad()
def parting(model: Any, prompt: Sequence[int], ours: Sequence[int], reference: Sequence[int],
            stop_tokens: Collection[int] = (), units: float = TIE_UNITS) -> dict[str, Any] | None:
    """None when `ours` equals `reference`; else the first position where they differ, the gap between the best
    logit there (on the reference's prefix) and the logit of the token `ours` took (a stop token where `ours`
    ended first), the tolerance, and whether that is a tie."""
    position = first_difference(ours, reference)
    if position == len(ours) == len(reference):
        return None
    chosen = ours[position] if position < len(ours) else min(stop_tokens, default=None)
    if chosen is None:  # ours ended early with no stop token known: nothing to weigh
        return {"position": position, "gap": None, "tolerance": None, "tie": False}
    ids = torch.tensor([list(prompt) + list(reference[:position])], device=model_device(model))
    logits = model(ids).logits[0, -1].float()
    gap = float(logits.max() - logits[chosen])
    tolerance = tie_tolerance(logits, model.get_input_embeddings().weight.dtype, units)
    return {"position": position, "gap": gap, "tolerance": tolerance, "tie": gap <= tolerance}
