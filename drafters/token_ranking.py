"""A reduced draft vocabulary: the draft scores only the most frequent tokens (as FR-Spec / EAGLE-3 do).

Used by `layer_skip` and `draft_model`. The draft only proposes; the verifier still checks every
proposal against the target's full distribution, so greedy output stays token-identical. When
sampling, the draft's q is its softmax over the subset with zero mass elsewhere, the distribution
the token was really drawn from, so rejection sampling stays lossless. What the subset buys is cost:
on a small model the LM head is a large share of a draft forward (8192 x 224 of the default draft's
3M weights; 8192 x 384 of a layer-skipped target forward), and scoring 1/4 of the rows reads 1/4 of
the head's bytes and computes 1/4 of its products.

The ranking (most frequent token first) is counted on training / calibration text, never on
evaluation prompts. `layer_skip` stores it in its skip-set file; a draft model keeps it in a
`token_ranking.json` beside its weights, with the size the project measured best. This module reads
rankings and applies them while drafting; `specdec rank-tokens` (specdec.tools.rank_tokens) writes them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from specdec.errors import DrafterError

RANKING_FILE = "token_ranking.json"
RANKING_FORMAT = "specdec.token_ranking/1"


def ranking_file_path(model: Any) -> Path | None:
    """The `token_ranking.json` beside `model`'s weights (its `name_or_path` folder), if there is one."""
    source = getattr(model, "name_or_path", None) or getattr(getattr(model, "config", None), "_name_or_path", None)
    if not source:
        return None
    path = Path(str(source)) / RANKING_FILE
    return path if path.is_file() else None


def read_ranking_file(model: Any) -> dict[str, Any] | None:
    """The `token_ranking.json` beside `model`'s weights (its `name_or_path` folder), if any and if it
    fits the model's output vocabulary; a file that does not fit is an error, not ignored."""
    path = ranking_file_path(model)
    if path is None:
        return None
    data = json.loads(path.read_text())
    vocab = int(model.get_output_embeddings().weight.shape[0])
    if data.get("format") != RANKING_FORMAT or len(data.get("ranking", [])) != vocab:
        raise DrafterError(f"{path} is not a {RANKING_FORMAT} ranking of this model's {vocab} output tokens")
    return data


def select_draft_vocab(choice: int | list[int] | None, vocab: int, ranking: list[int] | None, recommended: int,
                       who: str, ranking_hint: str) -> tuple[int, ...] | None:
    """Token ids a draft may propose (None = all) for a drafter's `draft_vocab` option: a list = those
    ids; 0 = all; N = the first N of `ranking`; None = the `recommended` N (0 = all). The ranking's
    source (a skip-set file, a ranking file beside a draft) is the caller's; `ranking_hint` says how
    to get one when it is missing."""
    if isinstance(choice, list):
        if not choice or min(choice) < 0 or max(choice) >= vocab or len(set(choice)) != len(choice):
            raise DrafterError(f"{who}: draft_vocab lists must hold distinct token ids in 0..{vocab - 1}")
        return tuple(choice)
    if choice is None:
        choice = recommended if ranking else 0
    if choice < 0:
        raise DrafterError(f"{who}: draft_vocab must be >= 0, got {choice}")
    if choice == 0:
        return None
    if not ranking:
        raise DrafterError(f"{who}: draft_vocab={choice} needs a token ranking, {ranking_hint}; "
                           "or pass token ids instead")
    return None if choice >= vocab else tuple(int(t) for t in ranking[:choice])


def scatter_to_vocab(values: torch.Tensor, head_tokens: torch.Tensor, vocab: int, fill: float) -> torch.Tensor:
    """A reduced head's outputs [..., N] (column j = token head_tokens[j]) spread over the whole
    vocabulary [..., vocab], `fill` elsewhere: -inf for logits, 0 for probabilities."""
    full = values.new_full((*values.shape[:-1], vocab), fill)
    return full.index_copy_(-1, head_tokens.to(values.device), values)
