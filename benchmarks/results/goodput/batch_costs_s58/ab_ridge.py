"""`benchmarks/scripts/goodput/batch_ab.py` with one more switch, `oldridge`: the draft cost fit with one ridge for
every feature (before b6770ba). Run from the repository root with batch_ab.py's arguments."""
import importlib.util
import sys
from unittest import mock

import specdec.costs

spec = importlib.util.spec_from_file_location("batch_ab", "benchmarks/scripts/goodput/batch_ab.py")
ab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ab)
ab.SWITCHES["oldridge"] = lambda: [mock.patch.object(specdec.costs, "DRAFT_RIDGE", 1e-4)]
ab.main(sys.argv[1:])
