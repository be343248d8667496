"""Timing the phases of a step on the device's own timeline.

On CUDA the host only enqueues work: timed with host clocks, a draft model's forwards would count as
verification (the host waits for them at the step's read-back) and drafting would look free. Each mark
here records a CUDA event on the current stream; the step's one read-back waits for that stream, after
which the events before it are complete and their elapsed times are read without any further
synchronisation. Elsewhere nothing is recorded and the host clocks stand.
"""

from __future__ import annotations

import torch


class DeviceMarks:
    """Named points of one step on the device's timeline (CUDA events), or nothing off CUDA."""

    def __init__(self, device: torch.device) -> None:
        self.enabled = device.type == "cuda"
        self.events: dict[str, torch.cuda.Event] = {}

    def mark(self, name: str) -> None:
        if self.enabled:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.events[name] = event

    def seconds(self, start: str, end: str) -> float | None:
        """Device time between two marks (None off CUDA). Only for marks made before the step's read-back."""
        if not self.enabled:
            return None
        return self.events[start].elapsed_time(self.events[end]) / 1000.0
