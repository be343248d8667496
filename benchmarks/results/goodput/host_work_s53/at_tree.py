"""Run a script against another checkout of this repository in the same virtual environment:
`python at_tree.py <checkout> <script> [args...]`. The editable install maps `specdec` and its subpackages to
this repository's folders; here they point at <checkout>'s instead (a `git worktree` of an older commit), so the
same script measures the old and the new code in separate processes, one after the other."""
import runpy
import sys
from pathlib import Path

import __editable___specdec_0_1_0_finder as finder

checkout, script = Path(sys.argv[1]).resolve(), sys.argv[2]
home = Path(finder.MAPPING["specdec"]).parent
finder.MAPPING.update({name: str(checkout / Path(path).relative_to(home)) for name, path in finder.MAPPING.items()})
sys.argv = [script, *sys.argv[3:]]
sys.path.insert(0, str(Path(script).resolve().parent))
runpy.run_path(script, run_name="__main__")
import specdec  # noqa: E402  (already imported by the script: say where it came from)

print(f"(specdec from {Path(specdec.__file__).parent})")
