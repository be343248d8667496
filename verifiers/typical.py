"""Medusa's typical acceptance (Cai et al. 2024, arXiv 2401.10774 section 3.3.1): keep draft tokens
the target finds "typical enough" instead of insisting on its exact distribution. Lossy by design:
it accepts more than rejection sampling at the price of not preserving the target's distribution.
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field

from specdec.draft import Draft, Verdict
from specdec.plugins import Verifier
from specdec.rng import RandomSource
from specdec.sampling import SamplingParams, process_logits, sample

from ._tree import sum_along_paths
from .exact import longest_accepted_path


class TypicalOptions(BaseModel):
    """Medusa's `posterior_threshold` (epsilon) and `posterior_alpha` (delta). Medusa's helper
    functions have these two defaults swapped; these are the values `medusa_generate` and PPD use."""

    model_config = ConfigDict(extra="forbid")

    epsilon: float = Field(0.09, gt=0.0, le=1.0, description="hard probability threshold (upper bound)")
    delta: float = Field(0.3, gt=0.0, le=1.0, description="entropy-scaled threshold factor; sqrt(epsilon) is usual")


def typical_thresholds(probs: torch.Tensor, epsilon: float, delta: float) -> torch.Tensor:
    """min(epsilon, delta * exp(-H(p))) for every distribution in `probs` [..., V].

    H uses 0 log 0 = 0 (Medusa adds 1e-5 inside the log; the difference is below 1e-4 nats),
    so a one-hot p has H = 0 and threshold min(epsilon, delta).
    """
    entropy = torch.special.entr(probs).sum(dim=-1)
    return torch.clamp(delta * torch.exp(-entropy), max=epsilon)


class TypicalVerifier(Verifier):
    """Accept draft token x at a node whose parent has processed target distribution p iff
    p(x) > min(epsilon, delta * exp(-H(p))); keep the longest path of accepted nodes.

    * p is `process_logits(logits, sampling)`: temperature, top-k and top-p applied, as everywhere.
    * Ties between equally long paths go to the highest summed log p of the path's tokens (Medusa
      and PPD do the same), then to the first in node order.
    * The bonus token is sampled from p at the end of the path (its argmax at temperature 0).
    * At temperature 0, p is one-hot, so only the argmax passes the threshold and the output is
      token-identical to greedy decoding.
    * q is ignored: the rule depends on the target alone, so it works for any drafter.
    """

    name = "typical"
    description = "Medusa typical acceptance (epsilon, delta); lossy: trades fidelity to the target for acceptance."
    lossless = False
    Options = TypicalOptions

    def verify(
        self, draft: Draft, logits: torch.Tensor, sampling: SamplingParams, generator: RandomSource
    ) -> Verdict:
        options: TypicalOptions = self.options  # type: ignore[assignment]
        batch, width = draft.batch_size, draft.width
        device = logits.device
        p_all = process_logits(logits, sampling)  # [B, 1 + N, V]
        if width == 0:
            end = torch.zeros(batch, dtype=torch.long, device=device)
            path = torch.zeros(batch, 0, dtype=torch.long, device=device)
            length = torch.zeros(batch, dtype=torch.long, device=device)
        else:
            valid = draft.node_mask().to(device)
            parents = torch.where(valid, draft.parents.to(device), -1)
            parent_slot = torch.where(valid, parents + 1, 0)
            rows = torch.arange(batch, device=device)[:, None]
            tokens = torch.where(valid, draft.tokens.to(device), 0)  # padding entries may hold anything
            p_token = p_all[rows, parent_slot, tokens]  # [B, N]: p_parent(x)
            threshold = typical_thresholds(p_all, options.epsilon, options.delta)  # [B, 1 + N]
            ok = valid & (p_token > threshold.gather(1, parent_slot))
            depth = draft.host.depth() if draft.host is not None else None  # (host view: nothing read back)
            path_logp = sum_along_paths(torch.log(p_token.clamp(min=1e-30)), parents, valid, depth)
            path, length, deepest = longest_accepted_path(draft, ok, tie_score=path_logp, rounds=depth)
            end = deepest + 1
        p_end = p_all[torch.arange(batch, device=device), end]
        # unchecked: the engine judges the bonus on the host, where a distribution without mass shows
        bonus = p_end.argmax(dim=-1) if sampling.greedy else sample(p_end, generator, checked=False)
        return Verdict(path, length, bonus)
