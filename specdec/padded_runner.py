"""The vanilla padded batch mode (`batch_mode="padded"`), kept beside the runtime so EMS-SD's gain can be
measured against it (the benchmarks and the equality tests run it); the unpadded `TargetRunner` never
takes these branches.

Every row writes at one shared slot and advances by the batch's largest acceptance; the slots a row did
not fill stay behind as holes, masked out via `slot_valid`, and positions come from `lengths`, not
slots. Inputs are always padded to the widest row and attention is transformers' own.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .target import TargetRunner


class PaddedTargetRunner(TargetRunner):
    padded = True

    def __init__(self, model: torch.nn.Module, batch_size: int, capacity: int,
                 packed_inputs: bool | None = None, compile: bool = False, reproducible: bool = False) -> None:
        if compile:
            raise ValueError("compile=True needs the unpadded mode (static shapes are the unpadded runner's)")
        super().__init__(model, batch_size, capacity, packed_inputs, reproducible=reproducible)
        self.slot_valid = torch.zeros(batch_size, capacity, dtype=torch.bool, device=self.device)
        # Holes added while decoding, summed over every row (rows that left the batch too): EMS-SD's padding
        # ratio is this over the generated tokens.
        self.holes_added = 0

    def _valid_slots(self, length: int) -> torch.Tensor:
        """slot_valid widened to at least `length` slots."""
        if self.slot_valid.shape[1] < length:
            grow = max(length, 2 * self.slot_valid.shape[1]) - self.slot_valid.shape[1]
            self.slot_valid = torch.nn.functional.pad(self.slot_valid, (0, grow))
        return self.slot_valid[:, :length]

    def _prefix(self, before_new: torch.Tensor, slot: torch.Tensor, attend_len: int) -> torch.Tensor:
        """Before the new tokens a row sees its committed slots (not the holes) and this step's scratch slots."""
        scratch = slot[None, :] >= torch.as_tensor(self.write_start, device=self.device)[:, None]
        return before_new & (self._valid_slots(attend_len) | scratch)

    def _prefix_positions(self, slot: torch.Tensor, batch: int, attend_len: int) -> torch.Tensor:
        """A committed slot's position counts the committed slots below it (holes are skipped)."""
        return torch.cumsum(self._valid_slots(attend_len).long(), dim=1) - 1

    def _plain_path(self, batch: int) -> bool:
        return False  # positions come from lengths, not slots: never the model's own causal mask

    def _prefilled(self, steps: int) -> None:
        """Every row continues after the longest prompt; shorter prompts leave holes."""
        valid = self._valid_slots(max(steps, 1))
        valid[:] = (torch.arange(valid.shape[1], device=self.device)[None, :]
                    < torch.as_tensor(self.lengths, device=self.device)[:, None])
        self.write_start = np.full_like(self.lengths, steps)

    def _advanced(self, keep_count: np.ndarray) -> None:
        """Mark the kept slots, then every row jumps past the largest acceptance."""
        end = self.write_start + 1 + keep_count
        self.holes_added += int((end.max() - end).sum())
        valid = self._valid_slots(int(end.max()))
        slot = torch.arange(valid.shape[1], device=self.device)[None, :]
        valid |= ((slot >= torch.as_tensor(self.write_start, device=self.device)[:, None])
                  & (slot < torch.as_tensor(end, device=self.device)[:, None]))
        self.write_start = np.full_like(self.write_start, int(end.max()))

    def set_lengths(self, lengths: Sequence[int] | np.ndarray | torch.Tensor) -> None:
        raise ValueError("set_lengths needs the unpadded cache, where slot == position")

    def select_rows(self, indices: Sequence[int]) -> None:
        super().select_rows(indices)
        self.slot_valid = self.slot_valid[torch.tensor([int(i) for i in indices], dtype=torch.long, device=self.device)]
