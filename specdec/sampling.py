"""One place that turns logits into the distribution tokens are drawn from.

The target's p, a drafter's q and every bonus token go through `process_logits` with the same
`SamplingParams`, so a verifier always compares like with like (the HF q-mismatch bugs came from
two code paths disagreeing about this).
"""

from __future__ import annotations

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator

from .rng import RandomSource, uniform


class SamplingParams(BaseModel):
    """Temperature 0 means greedy: the processed distribution is a point mass on the argmax."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: float = Field(0.0, ge=0.0, description="0 = greedy")
    top_k: int | None = Field(None, ge=1, description="keep the k most likely tokens")
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="nucleus mass to keep")

    @field_validator("temperature")
    @classmethod
    def _finite(cls, value: float) -> float:
        if value != value or value == float("inf"):
            raise ValueError("temperature must be a finite number >= 0")
        return value

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def process_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Return float32 probabilities [..., V] after temperature, top-k and top-p.

    Greedy gives a one-hot on the first argmax (ties resolve like `torch.argmax`, as in HF greedy).
    """
    logits = logits.float()
    if params.greedy:
        index = logits.argmax(dim=-1, keepdim=True)
        return torch.zeros_like(logits).scatter_(-1, index, 1.0)
    # Shift so the max is 0 and floor the temperature at the smallest normal float: a tiny
    # temperature then tends to greedy (ties share the mass) instead of 0/0 = nan.
    temperature = max(params.temperature, torch.finfo(logits.dtype).tiny)
    logits = (logits - logits.max(dim=-1, keepdim=True).values) / temperature
    if params.top_k is not None and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p is not None and params.top_p < 1.0:
        drop = _top_p_drop(logits.softmax(dim=-1), params.top_p)
        # Probabilities can tie where logits do not (tiny differences round away); the logits' argmax,
        # greedy's choice, always stays.
        drop.scatter_(-1, logits.argmax(dim=-1, keepdim=True), False)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits.softmax(dim=-1)


def _top_p_drop(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Tokens to drop: those whose mass strictly before them (in descending order) reaches top_p;
    the top token always stays.

    Only the head of the sorted order matters, so look at the top k tokens and grow k until they hold
    top_p in every row (a full sort of a 32k-150k vocabulary at every draft node is the slow part of
    sampling). Every token past position k has mass before it >= top_p, so it is dropped either way.
    """
    vocab = probs.shape[-1]
    k = min(vocab, 64)
    while True:
        head, order = torch.topk(probs, k, dim=-1)
        if k == vocab or bool((head.sum(dim=-1) >= top_p).all()):
            break
        k = min(vocab, 8 * k)
    # Descending, ties by ascending token id (topk's tie order is unspecified), so the first argmax,
    # greedy's choice, is always the token that stays.
    order = order.sort(dim=-1).values
    head, position = probs.gather(-1, order).sort(dim=-1, descending=True, stable=True)
    order = order.gather(-1, position)
    mass_before = head.cumsum(dim=-1) - head
    keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, mass_before < top_p)
    return ~keep


def sample(probs: torch.Tensor, generator: RandomSource, mask: torch.Tensor | np.ndarray | None = None,
           checked: bool = True) -> torch.Tensor:
    """Draw one token per distribution in `probs` [..., V] (need not be normalised) -> LongTensor [...].

    With per-row generators, `mask` [...] says which draws are used: only those consume random
    numbers (the others return the first token of positive probability), which keeps a row's random
    stream independent of its neighbours' draft sizes. A host mask (numpy; None: every draw used) is not
    read back from the device.

    `checked`: every distribution must be finite and non-negative with positive mass, else ValueError (two
    reads of the device). Unchecked, such a distribution draws the token V, outside the vocabulary, for a
    caller that judges its tokens on the host anyway (the engine reads every step's tokens back once and
    refuses one outside the vocabulary), so a sampled step makes no read of its own.

    Inverse-CDF sampling: one uniform per row and a binary search in the cumulative sum, about 25x
    faster than `torch.multinomial` on CPU for 32k-token rows. The cumulative sum is float64, and a
    token of probability 0 is never drawn (`right=True` skips flat CDF steps; the clamp guards
    rounding at the top end).
    """
    vocab = probs.shape[-1]
    flat = probs.reshape(-1, vocab)
    dtype = torch.float32 if flat.device.type == "mps" else torch.float64
    cdf = flat.to(dtype).cumsum(dim=-1)
    total = cdf[:, -1:]
    if checked and flat.shape[0] and (not bool(((total > 0) & torch.isfinite(total)).all())
                                      or bool((flat < 0).any())):
        raise ValueError("sample: every row must be a finite, non-negative distribution with positive mass")
    if mask is None:
        mask = np.ones(tuple(probs.shape[:-1]), dtype=bool)
    u = uniform(generator, mask, dtype, flat.device).reshape(-1, 1).to(flat.device)
    tokens = torch.searchsorted(cdf, u * total, right=True).squeeze(-1)
    last_possible = (vocab - 1) - (flat.flip(-1) > 0).to(torch.int8).argmax(dim=-1)
    tokens = torch.minimum(tokens, last_possible)
    if not checked:
        invalid = ~((total[:, 0] > 0) & torch.isfinite(total[:, 0])) | (flat < 0).any(dim=-1)
        tokens = torch.where(invalid, vocab, tokens)
    return tokens.reshape(probs.shape[:-1])


def sample_or_argmax(
    logits: torch.Tensor, params: SamplingParams, generator: RandomSource, mask: torch.Tensor | np.ndarray | None = None,
    checked: bool = True
) -> torch.Tensor:
    """The target's own choice at each position: argmax when greedy, a sample otherwise (`sample`)."""
    if params.greedy:
        return logits.argmax(dim=-1)
    return sample(process_logits(logits, params), generator, mask, checked)
