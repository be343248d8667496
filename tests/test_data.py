"""The data specdec ships (specdec/data): default prompt files resolve inside the installed package,
the wheel's package data covers every shipped file, and no product code reads a folder beside the
checkout. test_wheel.py builds and installs a real wheel."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from specdec.benchmarks.datasets import DEFAULT_KINDS, DatasetError, default_path, load_dataset

import specdec
import specdec.data
from specdec.data import FILES, data_dir, data_file

REPO = Path(__file__).resolve().parents[1]
PACKAGE = Path(specdec.__file__).resolve().parent


def test_every_default_data_path_lies_inside_the_installed_package():
    for kind in DEFAULT_KINDS:
        path = default_path(kind).resolve()
        assert path.is_file() and path.is_relative_to(PACKAGE / "data"), (kind, path)
    for name in FILES:
        assert data_file(name).resolve().is_relative_to(PACKAGE / "data")
    for folder in {Path(f).parent for f in FILES.values()}:  # each source keeps its license and origin note
        assert (data_dir() / folder / "LICENSE").stat().st_size > 500
        assert "https://github.com/" in (data_dir() / folder / "README.md").read_text()


def test_shipped_prompt_sets_load_in_full():
    assert len(load_dataset("spec_bench")) == 480
    assert len(load_dataset("humaneval")) == 164
    assert len(load_dataset("gsm8k")) == 1319


def test_package_data_patterns_cover_every_shipped_file():
    """What pyproject's package-data globs select is what a wheel carries (test_wheel.py checks a real one)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "specdec.data" in config["packages"]
    root = REPO / "specdec" / "data"
    patterns = config["package-data"]["specdec.data"] + config["package-data"]["*"]
    covered = {p for pattern in patterns for p in root.glob(pattern) if p.is_file()}
    shipped = {p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".py"}
    assert shipped - covered == set()
    assert {root / f for f in FILES.values()} <= covered


def test_a_missing_shipped_file_is_named_with_the_flag_that_replaces_it(monkeypatch, tmp_path):
    monkeypatch.setattr(specdec.data, "data_dir", lambda: tmp_path)
    with pytest.raises(DatasetError) as info:
        load_dataset("humaneval")
    message = str(info.value)
    assert str(tmp_path / "humaneval" / "HumanEval.jsonl.gz") in message and "--dataset humaneval:PATH" in message
    with pytest.raises(DatasetError, match=r"dataset file '.*nope.jsonl' does not exist .*--dataset gsm8k:PATH"):
        load_dataset("gsm8k", tmp_path / "nope.jsonl")


SOURCE_SUFFIXES = {".py", ".sh", ".yaml", ".yml", ".toml", ".cfg"}
SKIPPED_DIRS = {".git", ".venv", "tests", "runs", "build", "dist", "__pycache__"}
SHARED = re.compile(r"""shared['"]?\s*[/,)]\s*['"]?data|\.\./shared""")


def test_no_code_outside_tests_reads_a_shared_folder_beside_the_checkout():
    """Users have no ../shared: code, scripts and configs must find their data in the package."""
    offenders = []
    for path in REPO.rglob("*"):
        if path.suffix in SOURCE_SUFFIXES and path.is_file() and not SKIPPED_DIRS.intersection(
                path.relative_to(REPO).parts):
            offenders += [f"{path.relative_to(REPO)}:{n}" for n, line in
                          enumerate(path.read_text(errors="replace").splitlines(), 1) if SHARED.search(line)]
    assert offenders == []
