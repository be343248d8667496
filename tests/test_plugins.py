"""Third-party plugins installed with pip appear in `specdec list` and work by name; a broken plugin
is listed with its error and does not break the others."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "specdec-bigram"


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args], check=True)


def _specdec(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specdec.cli", *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def installed_plugins(tmp_path_factory):
    broken = tmp_path_factory.mktemp("broken")
    (broken / "specdec_broken").mkdir()
    (broken / "specdec_broken" / "__init__.py").write_text("raise RuntimeError('this plugin is broken on purpose')\n")
    (broken / "pyproject.toml").write_text(textwrap.dedent("""
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "specdec-broken"
        version = "0.0.1"
        [project.entry-points."specdec.drafters"]
        broken = "specdec_broken:Drafter"
        [tool.setuptools]
        packages = ["specdec_broken"]
    """))
    for package in (EXAMPLE, broken):
        _pip("install", "--no-deps", "--no-build-isolation", str(package))
    yield
    _pip("uninstall", "-y", "specdec-bigram", "specdec-broken")


def test_third_party_plugin_listed_and_usable(installed_plugins, tmp_path) -> None:
    listing = _specdec("list")
    assert listing.returncode == 0, listing.stderr
    assert "bigram" in listing.stdout and "specdec-bigram 0.1.0" in listing.stdout
    assert "broken" in listing.stdout and "this plugin is broken on purpose" in listing.stdout
    assert "none" in listing.stdout and "exact" in listing.stdout  # built-ins unaffected

    script = textwrap.dedent("""
        import sys
        sys.path.insert(0, %r)
        from conftest import tiny_model, hf_greedy
        import specdec
        model = tiny_model("llama")
        prompt = [5, 6, 7, 5, 6, 7, 5, 6]
        out = specdec.generate(model, prompt, drafter="bigram", verifier="exact", max_new_tokens=20,
                               drafter_options={"k": 3})
        assert out.sequences[0] == hf_greedy(model, prompt, 20), "bigram output differs from greedy"
        assert out.drafter == "bigram" and out.stats.drafted_tokens > 0
        print("OK")
    """) % str(Path(__file__).parent)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert run.returncode == 0 and "OK" in run.stdout, run.stderr

    broken = subprocess.run([sys.executable, "-c", "import specdec; specdec.generate(None, [1], drafter='broken')"],
                            capture_output=True, text=True)
    assert "drafter 'broken'" in broken.stderr and "failed to import" in broken.stderr


def test_cli_generate_on_a_saved_model(tmp_path) -> None:
    import sys as _sys

    _sys.path.insert(0, str(Path(__file__).parent))
    from conftest import tiny_model, tiny_tokenizer

    model = tiny_model("llama")
    model.save_pretrained(tmp_path)
    tiny_tokenizer().save_pretrained(tmp_path)
    run = _specdec("generate", "--model", str(tmp_path), "--prompt", "t1 t2 t3", "--drafter", "none",
                   "--verifier", "exact", "--max-new-tokens", "5")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("t1 t2 t3")
    assert "tau 1.00" in run.stderr and "none + exact (lossless)" in run.stderr
    bad = _specdec("generate", "--model", str(tmp_path), "--prompt", "t1", "--drafter", "nope")
    assert bad.returncode == 2 and "unknown drafter 'nope'" in bad.stderr
