"""Offline training corpus for the bundled model pair.

The corpus is the Python standard library of the running interpreter plus the
GSM8K *train* split (English prose), which ships inside the package
(`specdec/data/gsm8k/train.jsonl`, unchanged) so the recipe runs wherever
specdec is installed. Everything is read in a fixed, sorted order so the same
interpreter always yields the same corpus; the manifest records exactly what
was read so a run can be audited and reproduced.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

from specdec.data import data_file

#: How the manifest names the shipped GSM8K file. The default model was trained on the same bytes read from
#: the project's development data folder; the content hash in its recipe.json covers them either way.
GSM8K_FILE_NAME = "specdec/data/gsm8k/train.jsonl"

# Stdlib modules never trained on; they are the code half of the held-out set.
HELDOUT_MODULES: tuple[str, ...] = (
    "argparse.py",
    "calendar.py",
    "colorsys.py",
    "configparser.py",
    "csv.py",
    "difflib.py",
    "fnmatch.py",
    "fractions.py",
    "getopt.py",
    "heapq.py",
    "json/",
    "queue.py",
    "shlex.py",
    "statistics.py",
    "textwrap.py",
)
# The last lines of gsm8k/train.jsonl are the prose half of the held-out set.
GSM8K_HELDOUT_LINES = 256
# Directory names whose contents are test suites or third-party code.
EXCLUDED_DIRS = frozenset({"test", "tests", "idle_test", "site-packages", "__pycache__"})


@dataclass
class Corpus:
    """Documents split into training and held-out parts, plus the manifest."""

    train: list[str] = field(default_factory=list)
    heldout_code: list[str] = field(default_factory=list)
    heldout_prose: list[str] = field(default_factory=list)
    manifest: dict = field(default_factory=dict)


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def is_heldout(rel: str) -> bool:
    return any(rel == m or (m.endswith("/") and rel.startswith(m)) for m in HELDOUT_MODULES)


def stdlib_files(root: Path | None = None) -> list[str]:
    """Sorted posix paths (relative to the stdlib root) of the source files used."""
    root = root or stdlib_root()
    rels = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if EXCLUDED_DIRS.intersection(rel.parts[:-1]) or rel.name.startswith("test_"):
            continue
        rels.append(rel.as_posix())
    return sorted(rels)


def gsm8k_text(line: str) -> str:
    row = json.loads(line)
    return f"Question: {row['question']}\nAnswer: {row['answer']}\n"


def _sha256(items: list[str]) -> str:
    return hashlib.sha256("\n".join(items).encode("utf-8")).hexdigest()


def build_corpus(max_train_docs: int | None = None, gsm8k_path: Path | None = None) -> Corpus:
    """Read the corpus; ``max_train_docs`` trims the training split for tiny test runs.
    ``gsm8k_path`` replaces the shipped GSM8K train file (the content hash then changes with it)."""
    gsm8k_path = data_file("gsm8k_train") if gsm8k_path is None else Path(gsm8k_path)
    if not gsm8k_path.is_file():
        raise FileNotFoundError(f"GSM8K train file {str(gsm8k_path)!r} (the corpus's prose) does not exist")
    root = stdlib_root()
    corpus = Corpus()
    content_hash = hashlib.sha256()
    used, skipped, nbytes = [], [], 0
    for rel in stdlib_files(root):
        raw = (root / rel).read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            skipped.append(rel)
            continue
        used.append(rel)
        nbytes += len(raw)
        content_hash.update(rel.encode() + b"\0" + raw + b"\0")
        (corpus.heldout_code if is_heldout(rel) else corpus.train).append(text)

    lines = [ln for ln in gsm8k_path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    gsm_bytes = sum(len(ln.encode("utf-8")) + 1 for ln in lines)
    cut = len(lines) - GSM8K_HELDOUT_LINES
    prose_train = [gsm8k_text(ln) for ln in lines[:cut]]
    corpus.heldout_prose = [gsm8k_text(ln) for ln in lines[cut:]]
    content_hash.update(b"gsm8k\0" + "\n".join(lines).encode("utf-8"))
    corpus.train.extend(prose_train)
    if max_train_docs is not None:
        corpus.train = corpus.train[:max_train_docs]

    corpus.manifest = {
        "python": sys.version.split()[0],
        "stdlib_root": str(root),
        "stdlib_files": len(used),
        "stdlib_bytes": nbytes,
        "stdlib_file_list_sha256": _sha256(used),
        "stdlib_skipped_undecodable": skipped,
        "excluded_dirs": sorted(EXCLUDED_DIRS),
        "gsm8k_file": GSM8K_FILE_NAME if gsm8k_path == data_file("gsm8k_train") else str(gsm8k_path),
        "gsm8k_lines": len(lines),
        "gsm8k_bytes": gsm_bytes,
        "content_sha256": content_hash.hexdigest(),
        "heldout_modules": list(HELDOUT_MODULES),
        "heldout_stdlib_files": [r for r in used if is_heldout(r)],
        "heldout_gsm8k_lines": f"last {GSM8K_HELDOUT_LINES} lines ({cut + 1}..{len(lines)}, 1-based)",
        "train_docs": len(corpus.train),
        "train_chars": sum(len(t) for t in corpus.train),
        "heldout_code_chars": sum(len(t) for t in corpus.heldout_code),
        "heldout_prose_chars": sum(len(t) for t in corpus.heldout_prose),
        "max_train_docs": max_train_docs,
    }
    return corpus


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print the corpus manifest.")
    parser.add_argument("--out", type=Path, help="also write the manifest JSON here")
    args = parser.parse_args(argv)
    manifest = build_corpus().manifest
    text = json.dumps(manifest, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
