"""`specdec rank-tokens`: rank a model's tokens by frequency in training text for a reduced draft vocabulary.

Offline: counts tokens on training / calibration text (never evaluation prompts) and writes the
`token_ranking.json` that `draft_model` reads beside a draft's weights (specdec.drafters.token_ranking
reads and applies it while drafting). `specdec search-layers` uses the same counting for the ranking it
stores in a skip-set file.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from specdec.drafters.token_ranking import RANKING_FILE, RANKING_FORMAT


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
    from specdec.tools.zoo.corpus import build_corpus

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
