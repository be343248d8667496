"""Peak memory of one benchmark cell: max allocated on CUDA, resident set size (sampled) on CPU."""

from __future__ import annotations

import os
import resource
import threading
from types import TracebackType

import torch

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def current_rss() -> int:
    """Resident set size of this process in bytes (Linux /proc; getrusage's lifetime peak elsewhere)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            return int(handle.read().split()[1]) * _PAGE
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class PeakMemory:
    """Context manager: `peak_bytes` and `kind` after exit. A CPU sampler thread polls RSS, because
    the process-lifetime peak (getrusage) would charge every cell with the largest earlier one."""

    def __init__(self, device: torch.device | str = "cpu", interval: float = 0.01) -> None:
        self.device = torch.device(device)
        self.interval = interval
        self.kind = "cuda_max_allocated" if self.device.type == "cuda" else "cpu_rss"
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak_bytes = max(self.peak_bytes, current_rss())

    def __enter__(self) -> PeakMemory:
        if self.kind == "cuda_max_allocated":
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self.peak_bytes = current_rss()
            self._thread = threading.Thread(target=self._poll, name="specdec-bench-rss", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self.kind == "cuda_max_allocated":
            self.peak_bytes = int(torch.cuda.max_memory_allocated(self.device))
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.peak_bytes = max(self.peak_bytes, current_rss())
