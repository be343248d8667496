"""Benchmark prompt sets: Spec-Bench JSONL, HumanEval, GSM8K and plain text files of prompts.

Every loader reads a local file (nothing is downloaded; the default files ship inside the package, see
`specdec.data`), checks each line and names the file and line
of anything malformed, and returns `Sample`s grouped by category so the report can break results
down the way Spec-Bench does. Prompt construction (chat template or plain concatenation, left
truncation to fit the model's context) lives in `PromptBuilder`.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdec.data import DataFileMissing, data_file
from specdec.errors import SpecDecError

#: Spec-Bench folds MT-bench's eight categories into one subtask (its speed.py calls it mt_bench).
MT_BENCH_CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
#: Dataset kinds whose prompt file ships with specdec (`specdec.data`); `text` always needs a path.
DEFAULT_KINDS = ("spec_bench", "humaneval", "gsm8k")
KINDS = ("spec_bench", "humaneval", "gsm8k", "text")


class DatasetError(SpecDecError, ValueError):
    """A dataset file is missing or malformed, or a filter names something it does not hold."""


@dataclass(frozen=True)
class Sample:
    """One benchmark question: one or more user turns, asked in order."""

    sample_id: str
    category: str  # the reporting group (Spec-Bench subtask: mt_bench, translation, ...)
    turns: tuple[str, ...]
    raw_category: str = ""  # the file's own category (e.g. "writing" inside mt_bench)


def repo_root() -> Path:
    """The source tree this package runs from (benchmarks/ sits at its top level)."""
    return Path(__file__).resolve().parents[1]


def default_path(kind: str) -> Path:
    """The prompt file shipped inside the package for `kind`; an error naming it and the flag if missing."""
    if kind not in DEFAULT_KINDS:
        raise DatasetError(f"dataset kind {kind!r} has no default file; give a path (--dataset {kind}:PATH)")
    try:
        return data_file(kind)
    except DataFileMissing as error:
        raise DatasetError(f"{error} (or pass --dataset {kind}:PATH; specdec never downloads)") from None


def _open_lines(path: Path) -> Iterable[tuple[int, str]]:
    if not path.is_file():
        raise DatasetError(f"dataset file {str(path)!r} does not exist")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            yield from enumerate(handle, start=1)
    except (OSError, UnicodeDecodeError) as error:
        raise DatasetError(f"{path}: cannot read: {error}") from error


def _json_records(path: Path) -> Iterable[tuple[int, dict[str, Any]]]:
    for number, line in _open_lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise DatasetError(f"{path}:{number}: not valid JSON ({error.msg} at column {error.colno})") from None
        if not isinstance(record, dict):
            raise DatasetError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
        yield number, record


def _field(path: Path, number: int, record: dict, name: str, kind: type | tuple[type, ...]) -> Any:
    if name not in record:
        raise DatasetError(f"{path}:{number}: missing field {name!r}")
    value = record[name]
    if not isinstance(value, kind):
        raise DatasetError(f"{path}:{number}: field {name!r} must be {getattr(kind, '__name__', kind)}, "
                           f"got {type(value).__name__}")
    return value


def spec_bench_category(raw: str) -> str:
    return "mt_bench" if raw in MT_BENCH_CATEGORIES else raw


def load_spec_bench(path: Path) -> list[Sample]:
    """Spec-Bench question.jsonl (fields question_id, category, turns); any file of that format."""
    samples = []
    for number, record in _json_records(path):
        qid = _field(path, number, record, "question_id", (int, str))
        raw = _field(path, number, record, "category", str)
        turns = _field(path, number, record, "turns", list)
        if not turns or not all(isinstance(t, str) and t for t in turns):
            raise DatasetError(f"{path}:{number}: field 'turns' must be a non-empty list of non-empty strings")
        samples.append(Sample(str(qid), spec_bench_category(raw), tuple(turns), raw))
    return samples


def load_humaneval(path: Path) -> list[Sample]:
    """OpenAI HumanEval (.jsonl or .jsonl.gz): the prompt is the signature and docstring."""
    samples = []
    for number, record in _json_records(path):
        task = _field(path, number, record, "task_id", str)
        prompt = _field(path, number, record, "prompt", str)
        samples.append(Sample(task, "humaneval", (prompt,), "humaneval"))
    return samples


def load_gsm8k(path: Path) -> list[Sample]:
    """GSM8K (fields question, answer); the prompt is the question in a Question/Answer frame."""
    samples = []
    for number, record in _json_records(path):
        question = _field(path, number, record, "question", str)
        samples.append(Sample(f"gsm8k-{number}", "gsm8k", (f"Question: {question}\nAnswer:",), "gsm8k"))
    return samples


def load_text(path: Path) -> list[Sample]:
    """A plain text file: one prompt per non-empty line (write "\\n" for a newline inside a prompt)."""
    samples = []
    for number, line in _open_lines(path):
        text = line.rstrip("\n")
        if text.strip():
            samples.append(Sample(f"{path.stem}-{number}", path.stem, (text.replace("\\n", "\n"),), path.stem))
    if not samples:
        raise DatasetError(f"{path}: no prompts (the file is empty)")
    return samples


LOADERS = {"spec_bench": load_spec_bench, "humaneval": load_humaneval, "gsm8k": load_gsm8k, "text": load_text}


def _interleave(samples: list[Sample]) -> list[Sample]:
    """Round-robin over raw categories, so a per-category limit on mt_bench covers all eight."""
    groups: dict[str, list[Sample]] = {}
    for sample in samples:
        groups.setdefault(sample.raw_category, []).append(sample)
    ordered: list[Sample] = []
    queues = list(groups.values())
    index = 0
    while any(index < len(q) for q in queues):
        ordered.extend(q[index] for q in queues if index < len(q))
        index += 1
    return ordered


def select(
    samples: Sequence[Sample],
    categories: Sequence[str] | None = None,
    per_category: int | None = None,
    source: str = "dataset",
) -> list[Sample]:
    """Keep the named categories (reporting names or the file's own) and the first N of each."""
    known = sorted({s.category for s in samples} | {s.raw_category for s in samples})
    if categories:
        unknown = [c for c in categories if c not in known]
        if unknown:
            raise DatasetError(f"unknown categor{'y' if len(unknown) == 1 else 'ies'} {', '.join(map(repr, unknown))} "
                               f"in {source}. Known categories: {', '.join(known)}")
        samples = [s for s in samples if s.category in categories or s.raw_category in categories]
    groups: dict[str, list[Sample]] = {}
    for sample in samples:
        groups.setdefault(sample.category, []).append(sample)
    chosen: list[Sample] = []
    for group in groups.values():
        ordered = _interleave(group)
        chosen.extend(ordered if per_category is None else ordered[:per_category])
    return chosen


def dataset_file(kind: str, path: str | Path | None = None) -> Path:
    """The file a dataset entry reads: `path`, or the shipped default; an error naming it if missing."""
    if kind not in LOADERS:
        raise DatasetError(f"unknown dataset kind {kind!r}; known: {', '.join(KINDS)}")
    if path is None:
        if kind == "text":
            raise DatasetError("a text dataset needs a path (one prompt per line): --dataset text:PATH")
        return default_path(kind)
    file = Path(path)
    if not file.is_file():
        raise DatasetError(f"dataset file {str(file)!r} does not exist (given as the path of the {kind} dataset: "
                           f"--dataset {kind}:PATH or datasets[].path in a config)")
    return file


def load_dataset(
    kind: str,
    path: str | Path | None = None,
    categories: Sequence[str] | None = None,
    per_category: int | None = None,
) -> list[Sample]:
    """Load and filter one dataset; `path=None` uses the file shipped with specdec (`default_path`)."""
    file = dataset_file(kind, path)
    samples = LOADERS[kind](file)
    if not samples:
        raise DatasetError(f"{file}: no prompts in the file")
    return select(samples, categories, per_category, source=str(file))


class PromptBuilder:
    """Turns conversation history into prompt token ids for one tokenizer and context budget.

    With a chat template the turns become user/assistant messages; without one, turns and answers are
    joined with blank lines (plain concatenation). Prompts longer than the context minus
    max_new_tokens are cut from the left; the caller records that it happened.
    """

    def __init__(self, tokenizer: Any, context: int | None, max_new_tokens: int) -> None:
        if tokenizer is None:
            raise DatasetError("benchmark prompts are text: the model needs a tokenizer beside it")
        self.tokenizer = tokenizer
        self.uses_chat_template = bool(getattr(tokenizer, "chat_template", None))
        self.limit = None if context is None else context - max_new_tokens
        if self.limit is not None and self.limit < 1:
            raise DatasetError(f"max_new_tokens={max_new_tokens} leaves no room for a prompt in the model's "
                               f"context of {context} tokens")

    def encode(self, history: Sequence[tuple[str, str]], question: str) -> tuple[list[int], bool]:
        """Token ids for `question` after earlier (question, answer) turns; and whether truncated."""
        if self.uses_chat_template:
            messages: list[dict[str, str]] = []
            for asked, answered in history:
                messages += [{"role": "user", "content": asked}, {"role": "assistant", "content": answered}]
            messages.append({"role": "user", "content": question})
            ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # BatchEncoding in recent transformers
                ids = ids["input_ids"]
            ids = list(ids)
        else:
            parts = [f"{asked}\n\n{answered}" for asked, answered in history] + [question]
            ids = list(self.tokenizer("\n\n".join(parts))["input_ids"])
        if self.limit is not None and len(ids) > self.limit:
            return ids[-self.limit :], True
        return ids, False
