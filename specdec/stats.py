"""Per-generation statistics. The benchmark harness reads these; nothing times itself twice."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class GenerationStats:
    """Counts are summed over rows; a "step" is one verification forward of one row."""

    steps: int = 0  # row-steps (a batch step of B active rows counts B)
    batch_steps: int = 0  # target verification forwards
    new_tokens: int = 0
    drafted_per_step: list[int] = field(default_factory=list)  # summed over the batch's rows
    accepted_per_step: list[int] = field(default_factory=list)
    accepted_by_depth: list[int] = field(default_factory=list)  # accepted nodes at depth 1, 2, ...
    drafted_by_depth: list[int] = field(default_factory=list)  # steps whose draft reached depth d
    draft_time: float = 0.0
    verify_time: float = 0.0
    other_time: float = 0.0
    prefill_time: float = 0.0
    # Process CPU seconds of prefill and drafter setup: before the first step, plus rows joining later
    # (continuous batching). Decode-only CPU time = total - this.
    setup_cpu_time: float = 0.0
    peak_memory_bytes: int = 0  # CUDA: max allocated during the call; CPU: the process's peak RSS
    kv_cache_bytes: int = 0  # peak bytes allocated for the target's KV cache
    kv_slots: int = 0  # cache slots in use at the end (rows still in the batch)
    kv_padding_slots: int = 0  # of which holes (padded batch mode only)
    kv_holes_added: int = 0  # holes the padded mode added while decoding, all rows (EMS-SD: / new_tokens)
    kv_used_bytes: int = 0  # the largest [rows, slots] KV region one forward read: the exact-size need
    no_draft_row_steps: int = 0  # row-steps that verified no draft node
    input_slots: int = 0  # verification inputs computed (rows x padded width, summed over steps)
    useful_input_slots: int = 0  # of which real (root + nodes + extra slots)
    drafter_stats: dict[str, Any] = field(default_factory=dict)  # from Drafter.stats()
    # The goodput controller's account (empty when it was off): which drafter drafted how many row-steps,
    # the share of row-steps with no draft and why, probes, switches (specdec.controller).
    controller: dict[str, Any] = field(default_factory=dict)
    # Per prompt row (index = row of the batch as given), so batched runs report tau per row too.
    row_steps: list[int] = field(default_factory=list)
    row_new_tokens: list[int] = field(default_factory=list)
    row_drafted: list[int] = field(default_factory=list)
    row_accepted: list[int] = field(default_factory=list)

    @property
    def drafted_tokens(self) -> int:
        return sum(self.drafted_per_step)

    @property
    def accepted_tokens(self) -> int:
        return sum(self.accepted_per_step)

    @property
    def mean_accepted(self) -> float:
        """tau: tokens committed per row-step, bonus included (1.0 for plain decoding)."""
        return self.new_tokens / self.steps if self.steps else 0.0

    @property
    def row_tau(self) -> list[float]:
        """tau of each prompt row (tokens it committed per verification step it took part in)."""
        return [t / s if s else 0.0 for t, s in zip(self.row_new_tokens, self.row_steps)]

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0

    @property
    def no_draft_share(self) -> float:
        """Share of row-steps that verified no draft node (plain decoding steps)."""
        return self.no_draft_row_steps / self.steps if self.steps else 0.0

    @property
    def input_padding_ratio(self) -> float:
        """Share of verification inputs that were padding (rows with smaller drafts than the widest)."""
        return 1.0 - self.useful_input_slots / self.input_slots if self.input_slots else 0.0

    @property
    def wall_time(self) -> float:
        return self.prefill_time + self.draft_time + self.verify_time + self.other_time

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.wall_time if self.wall_time > 0 else 0.0

    def record_depths(self, accepted_counts: list[int], max_depths: list[int]) -> None:
        for counts, target in ((accepted_counts, self.accepted_by_depth), (max_depths, self.drafted_by_depth)):
            for value in counts:
                while len(target) < value:
                    target.append(0)
                for depth in range(value):
                    target[depth] += 1

    def to_dict(self) -> dict:
        data = asdict(self)
        for name in ("drafted_tokens", "accepted_tokens", "mean_accepted", "acceptance_rate", "wall_time",
                     "tokens_per_second", "input_padding_ratio", "row_tau", "no_draft_share"):
            data[name] = getattr(self, name)
        return data

    def summary(self) -> str:
        return (
            f"{self.new_tokens} tokens in {self.steps} steps | tau {self.mean_accepted:.2f} | "
            f"acceptance {self.acceptance_rate:.1%} | {self.tokens_per_second:.1f} tok/s | "
            f"draft {self.draft_time:.2f}s verify {self.verify_time:.2f}s other {self.other_time:.2f}s"
        )
