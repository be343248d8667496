"""Hardware-aware tree sizing (P §4.2.2): measure latency(n) of the verification forward on this
device, take tau(n) from the tree builder's expected acceptance, pick n* = argmax tau(n)/latency(n),
and store it keyed by device so a profile is never silently reused on other hardware.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

import torch


def device_key(device: torch.device | str) -> str:
    """'cuda:<device name>' or 'cpu:<processor model> x<threads>' (thread count changes latency too)."""
    device = torch.device(device)
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    if device.type == "cpu":
        name = ""
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        name = name or platform.processor() or platform.machine()
        return f"cpu:{name} x{torch.get_num_threads()}"
    return f"{device.type}:{device}"


def load_profile(path: str | Path) -> dict:
    """A profile file: {"fingerprint": ..., "devices": {device_key: {...}}}."""
    with open(path) as handle:
        data = json.load(handle)
    if not isinstance(data, dict) or "devices" not in data:
        raise ValueError(f"{path} is not a specdec PPD profile (no 'devices' key)")
    return data
