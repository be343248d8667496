"""Package layout: the offline tools (specdec.tools) import the runtime, never the reverse, so generating
never loads training, search or profiling code. Checked in a fresh interpreter: other tests' imports
would otherwise already be in sys.modules."""

from __future__ import annotations

import json
import subprocess
import sys

# Every module of the runtime packages (the core with the zoo, the built-in drafters and verifiers; walked
# without importing specdec.tools or the benchmark harness, which may import the tools), every plugin the
# registry knows by name loaded through it, and then every specdec module in sys.modules.
PROBE = """
import importlib, json, pkgutil, sys
import specdec, specdec.api, specdec.drafters, specdec.verifiers
from specdec import registry
imported = []
def walk(package):
    for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        if info.name in imported or info.name.startswith(("specdec.tools", "specdec.benchmarks")):
            continue
        module = importlib.import_module(info.name)
        imported.append(info.name)
        if info.ispkg:
            walk(module)
for package in (specdec, specdec.drafters, specdec.verifiers):
    walk(package)
for kind in ("drafter", "verifier"):
    for name in registry.known_names(kind):
        registry.load_class(kind, name)
print(json.dumps({"imported": imported, "modules": sorted(m for m in sys.modules if m.startswith("specdec"))}))
"""


def test_runtime_packages_never_import_the_offline_tools() -> None:
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    imported = set(report["imported"])
    for module in ("specdec.api", "specdec.engine", "specdec.zoo", "specdec.drafters.anpd",
                   "specdec.drafters.token_ranking", "specdec.drafters.layerskip.drafter",
                   "specdec.drafters.ppd.drafter", "specdec.drafters.ppd.profile", "specdec.verifiers.exact"):
        assert module in imported, module
    assert [m for m in report["modules"] if m == "specdec.tools" or m.startswith("specdec.tools.")] == []
