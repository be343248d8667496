"""Random numbers per batch row, so a sampled output depends only on its prompt and its seed.

With one generator for the whole batch, a row's draws would depend on how many values its
neighbours consumed before it (and on their draft sizes), so the same prompt and seed would give
different samples in different batches. Here every row owns a generator and draws only the values
it uses itself; a row's random stream is then a function of its own prompt, seed and drafts.

What this cannot fix: the model's kernels may round a row's logits differently at another batch size
(float32 kernels for 1 row and for 3 rows sum in another order on some CPUs and most GPUs, ~1e-7), and
a draw whose uniform lands that close to a boundary of the inverse CDF then picks the neighbouring
token. Outputs are identical across batches where the kernels are batch-invariant, as they are in
float32 on the Xeon this was measured on, and in practice in float64 (`tests/test_determinism.py`).

Generators live on the CPU and the uniforms are copied to the device that needs them: the same seed
gives the same uniforms on every device, and the copies are a few numbers per step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Union

import numpy as np
import torch

#: What samplers accept: per-row generators (the engine's), one generator for everything, or None
#: (torch's global generator). The last two are for code outside the engine (tests, training).
RandomSource = Union["RowGenerators", torch.Generator, None]


class RowGenerators:
    """One CPU `torch.Generator` per batch row; `select` gives the view for the active rows."""

    def __init__(self, generators: Sequence[torch.Generator]) -> None:
        self.generators = list(generators)

    @classmethod
    def seeded(cls, seeds: Sequence[int | None]) -> RowGenerators:
        """A generator per seed; a None seed draws a fresh nondeterministic one."""
        generators = []
        for seed in seeds:
            generator = torch.Generator()
            if seed is None:
                generator.seed()
            else:
                generator.manual_seed(int(seed))
            generators.append(generator)
        return cls(generators)

    def __len__(self) -> int:
        return len(self.generators)

    def select(self, rows: Sequence[int]) -> RowGenerators:
        """The generators of `rows` (indices into this view), sharing their state."""
        return RowGenerators([self.generators[row] for row in rows])

    def rand(self, mask: torch.Tensor | np.ndarray, dtype: torch.dtype = torch.float32,
             device: torch.device | str | None = None) -> torch.Tensor:
        """Uniforms in [0, 1) shaped like `mask` [B, ...], zero where `mask` is False, on `device` (default: the
        mask's; the CPU for a host mask).

        Row b draws exactly `mask[b].sum()` values from its own generator, in row-major order, so
        the values it gets do not depend on the other rows. A device mask is read back (on a GPU, a
        synchronisation); a host mask (numpy), which callers that know which draws they use pass, is not.
        """
        if mask.shape[0] != len(self.generators):
            raise ValueError(f"rand: mask has {mask.shape[0]} rows for {len(self.generators)} generators")
        if isinstance(mask, torch.Tensor):
            device = mask.device if device is None else device
            host = mask.reshape(mask.shape[0], -1).cpu().numpy()
        else:
            host = np.asarray(mask, dtype=bool).reshape(mask.shape[0], -1)
        out = torch.zeros(host.shape, dtype=dtype)
        for row, (generator, used) in enumerate(zip(self.generators, host)):
            count = int(used.sum())
            if count:
                out[row, torch.from_numpy(np.flatnonzero(used))] = torch.rand(count, generator=generator, dtype=dtype)
        return out.reshape(tuple(mask.shape)).to("cpu" if device is None else device)


def uniform(source: RandomSource, mask: torch.Tensor | np.ndarray, dtype: torch.dtype = torch.float32,
            device: torch.device | str | None = None) -> torch.Tensor:
    """Uniforms shaped like `mask` from any RandomSource: per-row streams for RowGenerators (zero where
    `mask` is False; see `RowGenerators.rand`); a single generator fills the whole shape in one call, as
    torch.rand does, on `device` (default: the mask's)."""
    if isinstance(source, RowGenerators):
        return source.rand(mask, dtype, device)
    if device is None:
        device = mask.device if isinstance(mask, torch.Tensor) else "cpu"
    drawn_on = source.device if source is not None else device  # a generator draws on its own device
    return torch.rand(tuple(mask.shape), generator=source, device=drawn_on, dtype=dtype).to(device)


def row_seeds(seed: int | Sequence[int | None] | None, batch: int) -> list[int | None]:
    """Per-row generator seeds from `generate`'s `seed`.

    - an int: row r gets a seed mixed from (seed, r): rows are independent streams, and row r's
      output does not change when other rows are added, removed or changed;
    - one int per row: row r gets the seed mixed from (seed[r], 0), the same as that prompt run alone
      with `seed=seed[r]`, so its output is the same at any batch position (how a server keeps
      per-request seeds reproducible under any batching);
    - None: a fresh random seed per row.
    """
    if seed is None:
        return [None] * batch
    if isinstance(seed, bool) or isinstance(seed, str) or not isinstance(seed, (int, Sequence)):
        raise ValueError(f"seed must be an int, one int per prompt row, or None; got {seed!r}")
    if isinstance(seed, int):
        return [_mix(seed, row) for row in range(batch)]
    seeds = list(seed)
    if len(seeds) != batch or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise ValueError(f"seed as a sequence needs one int per prompt row ({batch}); got {seed!r}")
    return [_mix(s, 0) for s in seeds]


def _mix(seed: int, row: int) -> int:
    """A well-spread 63-bit generator seed for (seed, row) (numpy's SeedSequence hashing)."""
    if seed < 0:
        raise ValueError(f"seed must be non-negative, got {seed}")
    return int(np.random.SeedSequence([seed, row]).generate_state(1, np.uint64)[0] >> np.uint64(1))
