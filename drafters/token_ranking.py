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
`token_ranking.json` beside its weights (`save_ranking_file`), with the size the project measured best.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from specdec.errors import DrafterError

RANKING_FILE = "token_ranking.json"
RANKING_FORMAT = "specdec.token_ranking/1"


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


def ranking_texts(corpus: str | None, files: list[str]) -> list[str]:
    """Text to count tokens on: the bundled default model's training corpus (`corpus="default"`) and/or
    these files (the `--vocab-corpus` / `--vocab-files` flags of `rank-tokens` and `search-layers`)."""
    texts = default_training_texts() if corpus == "default" else []
    return texts + [Path(f).read_text(encoding="utf-8", errors="replace") for f in files]


def coverage(ranking: list[int], size: int, tokens: Iterable[int]) -> float:
    """Share of `tokens` that fall inside the first `size` ids of `ranking`."""
    kept = set(ranking[:size])
    tokens = list(tokens)
    return sum(t in kept for t in tokens) / len(tokens) if tokens else 1.0


def save_ranking_file(model_dir: str | Path, ranking: list[int], draft_vocab: int, source: str,
                      measurement: dict[str, Any] | None = None) -> Path:
    """Write `token_ranking.json` beside a draft model: the ranking, the recommended draft vocabulary
    (0 = full) and how both were obtained."""
    if sorted(ranking) != list(range(len(ranking))):
        raise ValueError("a token ranking must list every token id exactly once")
    path = Path(model_dir) / RANKING_FILE
    data = {"format": RANKING_FORMAT, "vocab_size": len(ranking), "draft_vocab": int(draft_vocab),
            "source": source, "measurement": measurement or {}, "ranking": "@RANKING@"}
    text = json.dumps(data, indent=2).replace('"@RANKING@"', json.dumps([int(t) for t in ranking]))
    path.write_text(text + "\n")
    return path


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specdec rank-tokens",
        description="Rank a model's tokens by frequency in training text and write token_ranking.json beside it, "
                    "so draft_model can draft with a reduced vocabulary (option draft_vocab).")
    parser.add_argument("--model", required=True, help="local directory of the draft model (the file goes there)")
    parser.add_argument("--vocab-corpus", choices=["default"], default=None,
                        help="rank by frequency in the bundled default model's training corpus")
    parser.add_argument("--vocab-files", nargs="*", default=[], metavar="FILE",
                        help="rank by frequency in these text files (training text, never evaluation prompts)")
    parser.add_argument("--draft-vocab", type=int, default=0,
                        help="recommended draft vocabulary recorded in the file (0 = full); draft_model uses it "
                             "when its draft_vocab option is not given")
    parser.add_argument("--note", default="", help="how the recommended size was chosen (recorded in the file)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not (args.vocab_corpus or args.vocab_files):
        raise SystemExit("give --vocab-corpus default and/or --vocab-files FILE ...")
    from transformers import AutoConfig, AutoTokenizer

    model_dir = Path(args.model)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    vocab = int(AutoConfig.from_pretrained(model_dir, local_files_only=True).vocab_size)
    texts = ranking_texts(args.vocab_corpus, args.vocab_files)
    source = ", ".join((["the default model's training corpus"] if args.vocab_corpus else []) + args.vocab_files)
    ranking = ranking_from_texts(texts, tokenizer, vocab)
    path = save_ranking_file(model_dir, ranking, args.draft_vocab, f"token frequency in {source}",
                             {"note": args.note} if args.note else None)
    print(f"wrote {path}: {vocab} tokens ranked, recommended draft_vocab {args.draft_vocab or 'full'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
