"""Training and held-out text for PPD prompts (and the Medusa baseline that is compared with them).

`--data stdlib` (the default) is the running interpreter's standard library minus the modules the
bundled models never saw (`specdec.tools.zoo.corpus.HELDOUT_MODULES`); those modules are then the held-out
text, so prompts are scored on code neither the model nor the prompts were trained on. Other data
(files, directories, .jsonl such as GSM8K *train*) is split by holding out the tail of the shuffled
token stream, unless --eval-data names held-out text. The project's evaluation sets are refused.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch

# Evaluation sets of the project: never train on them (specdec/data/README.md).
FORBIDDEN = ("spec_bench", "humaneval", "gsm8k/test")
STDLIB = "stdlib"


def stdlib_documents(heldout: bool) -> list[str]:
    """The interpreter's stdlib sources (tests and site-packages excluded, sorted): the zoo's held-out
    modules if `heldout`, else all the others."""
    from specdec.tools.zoo.corpus import is_heldout, stdlib_files, stdlib_root

    root = stdlib_root()
    docs = []
    for rel in stdlib_files(root):
        if is_heldout(rel) != heldout:
            continue
        try:
            docs.append((root / rel).read_text(encoding="utf-8"))
        except UnicodeDecodeError:
            continue
    return docs


def _check_allowed(path: Path) -> None:
    if any(bad in str(path.resolve()) for bad in FORBIDDEN):
        raise ValueError(f"{path} is an evaluation set of this project; PPD must not train on it")


def read_texts(paths: Sequence[str | Path], max_docs: int | None = None) -> list[str]:
    """Documents from files or directories (or the keyword "stdlib"): .jsonl rows (question + answer, or
    text), other files whole; directories contribute their *.py and *.txt files in sorted order."""
    files: list[Path] = []
    docs: list[str] = []
    for raw in paths:
        if str(raw) == STDLIB:
            docs.extend(stdlib_documents(heldout=False))
            continue
        path = Path(raw)
        _check_allowed(path)
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*") if p.suffix in (".py", ".txt") and p.is_file()))
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"training data {str(path)!r} does not exist")
    for file in files:
        text = file.read_text(encoding="utf-8", errors="replace")
        if file.suffix == ".jsonl":
            for line in text.splitlines():
                if line.strip():
                    row = json.loads(line)
                    docs.append(row["text"] if "text" in row else f"{row.get('question', '')}\n{row.get('answer', '')}")
        else:
            docs.append(text)
    if max_docs is not None:
        docs = docs[:max_docs]
    if not docs:
        raise ValueError("no training text found in " + ", ".join(map(str, paths)))
    return docs


def token_stream(docs: list[str], tokenizer, shuffle_seed: int = 0) -> torch.Tensor:
    """All documents tokenized and concatenated (eos between when the tokenizer has one), in a seeded
    shuffled order so a held-out tail mixes the kinds of text."""
    order = torch.randperm(len(docs), generator=torch.Generator().manual_seed(shuffle_seed)).tolist()
    eos = getattr(tokenizer, "eos_token_id", None)
    ids: list[int] = []
    for index in order:
        ids.extend(tokenizer(docs[index])["input_ids"])
        if eos is not None:
            ids.append(eos)
    return torch.tensor(ids, dtype=torch.long)


def split_streams(data: Sequence[str], tokenizer, window: int, eval_data: Sequence[str] | None = None,
                  heldout_fraction: float = 0.05, max_docs: int | None = None, seed: int = 0
                  ) -> tuple[torch.Tensor, torch.Tensor, str]:
    """(train stream, held-out stream, how the held-out text was chosen)."""
    stream = token_stream(read_texts(data, max_docs), tokenizer, seed)
    if eval_data:
        return stream, token_stream(read_texts(eval_data), tokenizer, seed), "--eval-data " + " ".join(eval_data)
    if list(map(str, data)) == [STDLIB]:
        heldout = token_stream(stdlib_documents(heldout=True), tokenizer, seed)
        return stream, heldout, "stdlib modules held out of the zoo's corpus (specdec.tools.zoo.corpus.HELDOUT_MODULES)"
    cut = max(window + 8, int(len(stream) * heldout_fraction))
    if len(stream) < cut + window + 8:
        raise ValueError(f"only {len(stream)} tokens of training text; need more than {cut + window + 8}")
    return stream[:-cut], stream[-cut:], f"the last {cut} tokens of the shuffled stream"


def sample_windows(stream: torch.Tensor, batch: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """`batch` windows of `length` tokens at random starts."""
    length = min(length, len(stream) - 1)
    starts = torch.randint(0, len(stream) - length, (batch,), generator=generator)
    return torch.stack([stream[s : s + length] for s in starts.tolist()])


def eval_windows(stream: torch.Tensor, count: int, length: int, seed: int = 1234) -> torch.Tensor:
    """A fixed set of held-out windows [count, length]: evenly spaced starts (jittered by a seeded
    offset), so every method is scored on the same tokens."""
    length = min(length, len(stream) - 1)
    span = len(stream) - length
    offset = int(torch.randint(0, max(1, span // max(1, count)), (1,), generator=torch.Generator().manual_seed(seed)))
    starts = [min(span - 1, offset + i * span // count) for i in range(count)]
    return torch.stack([stream[s : s + length] for s in starts])
