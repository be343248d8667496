"""A reduced draft vocabulary: the draft scores only the most frequent tokens (as FR-Spec / EAGLE-3 do).

The draft only proposes; the verifier still checks every proposal against the target's full
distribution, so greedy output stays token-identical. When sampling, the draft's q is its softmax
over the subset with zero mass elsewhere, the distribution the token was really drawn from, so
rejection sampling stays lossless. What the subset buys is cost: on a small model the LM head is a
large share of a layer-skipped draft forward (8192 x 384 on the default model), and a draft forward
is memory-bound on CPU, so scoring 1/4 of the rows reads 1/4 of the head's bytes.

The ranking (most frequent token first) is counted on training / calibration text, never on
evaluation prompts, and stored in the skip-set file next to the searched blocks.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np


def rank_tokens(streams: Iterable[Iterable[int] | np.ndarray], vocab_size: int) -> list[int]:
    """Token ids ordered by frequency in `streams` (ties by id); unseen ids come last, by id."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for stream in streams:
        ids = np.asarray(list(stream) if not isinstance(stream, np.ndarray) else stream, dtype=np.int64)
        if ids.size:
            if int(ids.min()) < 0 or int(ids.max()) >= vocab_size:
                raise ValueError(f"token ids outside 0..{vocab_size - 1}")
            counts += np.bincount(ids, minlength=vocab_size)
    order = np.lexsort((np.arange(vocab_size), -counts))  # count descending, then id ascending
    return [int(i) for i in order]


def ranking_from_texts(texts: list[str], tokenizer: Any, vocab_size: int) -> list[int]:
    """`rank_tokens` over `texts` encoded with `tokenizer` (no special tokens)."""
    encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return rank_tokens((np.asarray(ids, dtype=np.int64) for ids in encoded), vocab_size)


def default_training_texts() -> list[str]:
    """The training split of the bundled default model's corpus (stdlib source + GSM8K train)."""
    from specdec.zoo.corpus import build_corpus

    return build_corpus().train


def coverage(ranking: list[int], size: int, tokens: Iterable[int]) -> float:
    """Share of `tokens` that fall inside the first `size` ids of `ranking`."""
    kept = set(ranking[:size])
    tokens = list(tokens)
    return sum(t in kept for t in tokens) / len(tokens) if tokens else 1.0
