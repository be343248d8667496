"""specdec as a user gets it: a wheel built from this checkout, installed into a fresh virtual environment
outside the repository, run from a directory with nothing beside it.

The new environment gets specdec only from the wheel. Its dependencies (torch, transformers, ...) are
the test environment's own, reached through a .pth path entry: installing them again would take minutes
and prove nothing about specdec's packaging. A path entry does not run the .pth files it points at, so
the checkout's editable install stays invisible there; the tests check that every specdec module comes
from the new environment.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOT_SOURCE = shutil.ignore_patterns(".venv", ".git", "runs", "build", "dist", "*.egg-info", "__pycache__",
                                    ".pytest_cache", ".ruff_cache", ".hypothesis")
SHIPPED_DATA = ["spec_bench/question.jsonl", "spec_bench/LICENSE", "spec_bench/README.md",
                "humaneval/HumanEval.jsonl.gz", "humaneval/LICENSE", "humaneval/README.md",
                "gsm8k/test.jsonl", "gsm8k/train.jsonl", "gsm8k/LICENSE", "gsm8k/README.md"]


@dataclass
class Installed:
    wheel: Path
    env: Path  # the fresh virtual environment
    workdir: Path  # an empty directory outside the repository, nothing beside it

    @property
    def bin(self) -> Path:
        return self.env / "bin"

    def run(self, args: list[str], timeout: int) -> subprocess.CompletedProcess:
        environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONUNBUFFERED")}
        return subprocess.run(args, cwd=self.workdir, env=environ, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout)


def _pip(*args: str) -> None:
    result = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    root = tmp_path_factory.mktemp("wheel")
    assert not (root.parent / "shared").exists() and not root.is_relative_to(REPO)
    source = root / "source"  # build from a copy: a build writes build/ and *.egg-info into its source tree
    shutil.copytree(REPO, source, ignore=NOT_SOURCE)
    _pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(root / "dist"), str(source))
    wheel = next((root / "dist").glob("specdec-*.whl"))
    env = root / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    python = env / "bin" / "python"
    _pip("--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel))
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    workdir = root / "work"
    workdir.mkdir()
    return Installed(wheel, env, workdir)


def test_wheel_carries_the_shipped_data_and_the_installed_package_reads_it(installed):
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    missing = [f for f in SHIPPED_DATA if f"specdec/data/{f}" not in names]
    assert missing == []
    assert "specdec/zoo/default/target/model.safetensors" in names
    probe = (
        "import json, sys, specdec\n"
        "from specdec import registry\n"
        "from specdec.benchmarks.datasets import DEFAULT_KINDS, default_path\n"
        "from specdec.data import data_file\n"
        "from specdec.tools.zoo.corpus import build_corpus\n"
        "for name in registry.known_names('drafter'): registry.load_class('drafter', name)\n"
        "files = {m: getattr(sys.modules[m], '__file__', None) for m in list(sys.modules) if m.startswith('specdec')}\n"
        "print(json.dumps({'specdec': specdec.__file__, 'modules': files,\n"
        "                  'defaults': [str(default_path(k)) for k in DEFAULT_KINDS],\n"
        "                  'gsm8k_train': str(data_file('gsm8k_train')),\n"
        "                  'corpus_gsm8k_lines': build_corpus(max_train_docs=1).manifest['gsm8k_lines']}))\n"
    )
    result = installed.run([str(installed.bin / "python"), "-c", probe], timeout=300)
    assert result.returncode == 0, result.stdout
    report = json.loads(result.stdout.strip().splitlines()[-1])
    env = installed.env.resolve()
    assert Path(report["specdec"]).resolve().is_relative_to(env)
    assert len(report["modules"]) > 10
    assert all(f is None or Path(f).resolve().is_relative_to(env) for f in report["modules"].values()), report
    for path in [*report["defaults"], report["gsm8k_train"]]:
        assert Path(path).resolve().is_relative_to(env / "lib") and Path(path).is_file()
    assert report["corpus_gsm8k_lines"] == 7473


@pytest.mark.slow
def test_installed_wheel_runs_the_quick_preset_from_an_empty_directory(installed):
    out = installed.workdir / "quick"
    result = installed.run([str(installed.bin / "specdec"), "bench", "--preset", "quick", "--per-category", "1",
                            "--max-new-tokens", "8", "--out", str(out), "--no-progress"], timeout=900)
    assert result.returncode == 0, result.stdout[-4000:]
    assert result.stdout.strip().splitlines()[-1].startswith("specdec bench: ok"), result.stdout[-4000:]
    summary = json.loads((out / "results.json").read_text())["summary"]
    labels = {cell["label"] for cell in summary["cells"]}
    assert {"hf_generate", "hf_prompt_lookup", "hf_assisted", "none", "anpd", "draft_model", "layer_skip", "ppd",
            "ppd_draft_model"} <= labels
    assert all(cell["status"] == "ok" and cell["equality"]["status"] == "identical" for cell in summary["cells"])
    records = [json.loads(line) for line in (out / "cells.jsonl").read_text().splitlines()]
    categories = {s["category"] for s in records[0]["samples"]}
    assert categories == {"mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag"}
    assert len(records[0]["samples"]) == 6
