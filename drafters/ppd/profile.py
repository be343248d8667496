"""Reading a stored PPD hardware profile: per device, the tree size and prompt count measured fastest.

Profiles are keyed by device (`specdec.costs.device_key`) so one is never silently reused on other
hardware. `specdec profile` (specdec.tools.ppd.profile) measures and writes them; the drafter only reads.
"""

from __future__ import annotations

import json
from pathlib import Path


def load_profile(path: str | Path) -> dict:
    """A profile file: {"fingerprint": ..., "devices": {device_key: {...}}}."""
    with open(path) as handle:
        data = json.load(handle)
    if not isinstance(data, dict) or "devices" not in data:
        raise ValueError(f"{path} is not a specdec PPD profile (no 'devices' key)")
    return data
