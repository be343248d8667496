"""Public data shipped inside the package: the benchmark's default prompt sets and the default model's
training text (see README.md here for origins and licenses).

Shipped so that `specdec bench` and the zoo recipe run for anyone who installs specdec, with nothing
beside the checkout and no download. Paths resolve from the installed package, so a checkout
(editable install) and a wheel find the same files.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from specdec.errors import SpecDecError

#: name -> file under this package. spec_bench, humaneval and gsm8k (test) are evaluation prompts.
FILES: dict[str, str] = {
    "spec_bench": "spec_bench/question.jsonl",
    "humaneval": "humaneval/HumanEval.jsonl.gz",
    "gsm8k": "gsm8k/test.jsonl",
    "gsm8k_train": "gsm8k/train.jsonl",
}


class DataFileMissing(SpecDecError, FileNotFoundError):
    """A shipped data file is not where the package says it is (a broken or partial install)."""


def data_dir() -> Path:
    """The folder holding the shipped data (inside the installed package)."""
    return Path(str(files("specdec.data")))


def data_file(name: str) -> Path:
    """Path of the shipped file called `name` (a key of FILES); raises if the install lacks it."""
    if name not in FILES:
        raise KeyError(f"no shipped data file named {name!r}; known: {', '.join(FILES)}")
    path = data_dir() / FILES[name]
    if not path.is_file():
        raise DataFileMissing(f"specdec's shipped data file {path} is missing (a partial install?); "
                              "reinstall specdec or give the path of your own copy")
    return path
