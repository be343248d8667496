"""Built-in drafters and verifiers use only the public plugin API and the runner handle (`specdec.runner`),
never the engine's or the runtime's internals (nor the runner's cache, nor a module's forward), so either side can
change behind the API."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The documented public modules a plugin may import (see `specdec.runner`'s docstring).
PUBLIC = {"specdec.plugins", "specdec.registry", "specdec.errors", "specdec.draft", "specdec.sampling", "specdec.rng",
          "specdec.runner", "specdec.zoo"}
PLUGIN_FOLDERS = ("drafters", "verifiers")  # installed as specdec.drafters and specdec.verifiers


def _specdec_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import of specdec in the file (relative imports stay in the package)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.split(".")[0] == "specdec"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "specdec":
            if node.module == "specdec":  # `from specdec import x`: x is a module or a name of the package
                found += [(node.lineno, f"specdec.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, node.module))
    return found


FILES = sorted(p for folder in PLUGIN_FOLDERS for p in (ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_plugins_import_only_the_public_api(path: Path) -> None:
    allowed = PUBLIC | {f"specdec.{folder}" for folder in PLUGIN_FOLDERS}
    bad = [f"line {line}: {module}" for line, module in _specdec_imports(path)
           if module not in PUBLIC and not any(module == a or module.startswith(a + ".") for a in allowed - PUBLIC)]
    assert not bad, f"{path.relative_to(ROOT)} imports runtime internals: {bad}"


def test_the_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    sample = tmp_path / "plugin.py"
    sample.write_text("from specdec.engine import SpeculativeEngine\nfrom specdec.draft import Draft\n"
                      "import specdec.target\nfrom specdec import costs\n")
    assert [module for _, module in _specdec_imports(sample)] == [
        "specdec.engine", "specdec.draft", "specdec.target", "specdec.costs"]
    assert len(FILES) > 10  # the plugin folders were found


def _runtime_reaches(path: Path) -> list[str]:
    """Where a plugin reaches past the runner handle: a runner's KV cache (`.cache`, whose layers only the
    runtime writes) or a module's `forward` replaced (layer skipping goes through a `LayerPlan`)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr == "cache":
            found.append(f"line {node.lineno}: .cache")
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AnnAssign, ast.AugAssign)) else []
        found += [f"line {node.lineno}: assigns .forward" for target in targets
                  if isinstance(target, ast.Attribute) and target.attr == "forward"]
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr"
                and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and node.args[1].value == "forward"):
            found.append(f"line {node.lineno}: setattr forward")
    return found


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_plugins_use_the_runner_not_its_cache_or_patches(path: Path) -> None:
    bad = _runtime_reaches(path)
    assert not bad, f"{path.relative_to(ROOT)} reaches into the runtime: {bad}"


def test_the_reach_check_sees_a_cache_and_a_patch(tmp_path: Path) -> None:
    sample = tmp_path / "plugin.py"
    sample.write_text("layer = state.target.cache.layers[0]\nmodule.forward = zeros\nsetattr(block, 'forward', f)\n"
                      "logits = state.target.scratch_forward(ids, plan=plan)\n")
    assert sorted(_runtime_reaches(sample)) == ["line 1: .cache", "line 2: assigns .forward", "line 3: setattr forward"]
