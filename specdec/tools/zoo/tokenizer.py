"""Byte-level BPE tokenizer for the bundled models.

Byte-level BPE round-trips any text exactly (indentation and newlines
included), which matters for a code model whose output is fed back as input.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

EOS = "<|endoftext|>"
VOCAB_SIZE = 8192


def train_tokenizer(texts: Iterable[str], vocab_size: int = VOCAB_SIZE) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on ``texts`` and wrap it for transformers.

    ``<|endoftext|>`` is bos, eos and pad at once (GPT-2 style): documents are
    separated by it and generation stops on it.
    """
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=EOS,
        eos_token=EOS,
        pad_token=EOS,
        clean_up_tokenization_spaces=False,
        model_max_length=1024,
    )


def round_trips(tokenizer: PreTrainedTokenizerFast, text: str) -> bool:
    ids = tokenizer.encode(text, add_special_tokens=False)
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False) == text


def main(argv: list[str] | None = None) -> int:
    from specdec.tools.zoo.corpus import build_corpus

    parser = argparse.ArgumentParser(description="Train the byte-level BPE on the training split.")
    parser.add_argument("--out", type=Path, default=Path("runs/tokenizer"))
    parser.add_argument("--vocab-size", type=int, default=VOCAB_SIZE)
    args = parser.parse_args(argv)
    corpus = build_corpus()
    tokenizer = train_tokenizer(corpus.train, args.vocab_size)
    sample = corpus.heldout_code[0][:2000]
    if not round_trips(tokenizer, sample):
        raise SystemExit("tokenizer does not round-trip held-out text")
    tokenizer.save_pretrained(args.out)
    print(f"saved tokenizer ({len(tokenizer)} tokens) to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
