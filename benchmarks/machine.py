"""What the numbers were measured on: CPU, cores, load, library versions and the git commit."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import datetime, timezone
from typing import Any

from .datasets import repo_root


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git(*args: str) -> str | None:
    try:
        result = subprocess.run(["git", *args], cwd=repo_root(), capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def machine_info() -> dict[str, Any]:
    import torch
    import transformers

    import specdec

    load = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    info: dict[str, Any] = {
        "timestamp_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": usable,
        "torch_threads": torch.get_num_threads(),
        "load_average_1min": load[0] if load else None,
        "load_average": load,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "specdec": specdec.__version__,
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "git_commit": _git("rev-parse", "HEAD"),
    }
    status = _git("status", "--porcelain", "--untracked-files=no")
    info["git_dirty"] = bool(status) if status is not None else None
    return info
