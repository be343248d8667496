"""The target's linear layers through oneDNN with prepacked weights, on a CPU in float32.

Why: on a CPU, PyTorch runs an fp32 `nn.Linear` through MKL's GEMM, which at 2-8 input rows costs
1.3-1.6x one row (on the default model a 2-input verification forward took 1.37x a plain step, 4
inputs 1.37x, 8 inputs 1.56x). That made every extra verified token expensive here, unlike on a GPU,
where verifying a few tokens costs about as much as one. oneDNN's inner-product kernel with its weights
reordered once into its blocked layout streams each weight once for the whole forward: 2-6 inputs cost
1.01-1.04x a plain step, and the plain step is 4% faster (`benchmarks/results/cpu_linear/`). It is
what `torch.compile`'s CPU backend does when it freezes weights; this keeps eager mode.

How, without touching the user's model: `packed_view(model)` returns a structural copy of the model
whose modules share every parameter, buffer and config with it, except that plain `nn.Linear` layers
are replaced by `PackedLinear`, which holds the oneDNN copy of the weight. A module whose `forward` was
replaced on the instance is kept as it is, with its sub-modules. The copy costs the linear
weights' bytes once more, so it is made only while that stays under a quarter of the machine's
memory. The view is kept per model (weakly) and rebuilt when the model's modules are replaced or a
weight changes (tensor version counters), so an edited model never runs stale weights.

Which kernel wins depends on the processor: on the AMD EPYC this was written on, oneDNN was as fast as
MKL for one input row and faster for more; on a Sapphire Rapids Xeon, MKL is 1.1-2.7x faster for 1-4
rows and oneDNN 2x faster from 8 (a plain step through oneDNN made `none` 16% slower than transformers'
`generate`). So each layer shape is timed once when a view is built, on both kernels at a few row
counts, and a `PackedLinear` runs MKL below the row count from which oneDNN wins (`_crossover`).

Numerics: the same fp32 products summed in another order, as MKL's GEMM already does between one
and several rows (logits differ by ~1e-6 relative); verification stays exact against the target as
this runtime computes it, and the support check (`specdec.model_support`) compares against
transformers' own forward.
"""

from __future__ import annotations

import copy
import os
import time
import weakref
from typing import Any

import torch

#: The packed copies may take at most this share of the machine's physical memory.
MEMORY_SHARE = 0.25
#: Smaller layers stay on MKL: oneDNN's call costs ~10 us more, which a layer this size (512 KiB in fp32)
#: earns back by streaming its weight faster; tiny layers that sit in cache never do.
MIN_WEIGHT_ELEMENTS = 1 << 17

#: Input row counts at which both kernels are timed per layer shape (`_crossover`), the rounds, and the most
#: weights timed (a bigger layer is timed on its first outputs).
TIMED_ROWS = (1, 2, 4, 8, 16, 32)
TIMING_ROUNDS = 5
TIMED_ELEMENTS = 1 << 23

_VIEWS: weakref.WeakKeyDictionary[torch.nn.Module, _View] = weakref.WeakKeyDictionary()


class PackedLinear(torch.nn.Module):
    """`source`'s forward with its weight in oneDNN's blocked layout (read-only copy; bias shared), used
    from `min_rows` input rows on (MKL, as `source` itself, below)."""

    def __init__(self, source: torch.nn.Linear, min_rows: int | None = None) -> None:
        super().__init__()
        self.source = source
        with torch.no_grad():
            self.packed = torch.ops.mkldnn._reorder_linear_weight(source.weight.detach(), None)
        self.min_rows = _crossover(source.weight.detach(), source.bias) if min_rows is None else min_rows

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if inputs.numel() < self.min_rows * inputs.shape[-1]:  # fewer rows than the crossover: MKL
            return torch.nn.functional.linear(inputs, self.source.weight, self.source.bias)
        return self.onednn(inputs)

    def onednn(self, inputs: torch.Tensor) -> torch.Tensor:
        return _onednn_linear(inputs, self.packed, self.source.bias)


def _onednn_linear(inputs: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    flat = inputs.reshape(-1, inputs.shape[-1])
    rows = flat.shape[0]
    if rows == 2:  # oneDNN's 2-row kernel is slower than its 3-row one (default model: 6.2 vs 5.0 ms of
        flat = torch.cat((flat, flat[-1:]))  # linear layers per forward), so compute a copy of one row too
    output = torch.ops.mkldnn._linear_pointwise.default(flat, packed, bias, "none", [], "")
    return output[:rows].view(*inputs.shape[:-1], output.shape[-1])


@torch.no_grad()
def _crossover(weight: torch.Tensor, bias: torch.Tensor | None) -> int:
    """The fewest input rows from which oneDNN beats MKL on a layer of this shape here, from TIMED_ROWS (past
    the last: never). Each row count is timed on both kernels in alternation, best of TIMING_ROUNDS; a row
    count is won by oneDNN when it is at least 3% faster, and the crossover is the first row count from which
    it wins at every larger one. A layer of more than TIMED_ELEMENTS weights is timed on its first outputs
    (both kernels' time grows in proportion with the outputs; a 32000-token head timed whole took 3 s):
    ~0.1 s a shape at most, 0.14 s for the whole default model's view, packing included. Timed once per
    view: on an oversubscribed CPU the choice can differ between processes, which changes speed and the
    logits' last bits (~1e-6 relative), never what the runtime verifies against."""
    outputs = max(1, TIMED_ELEMENTS // weight.shape[1])
    weight = weight[:outputs]
    bias = None if bias is None else bias[:outputs]
    packed = torch.ops.mkldnn._reorder_linear_weight(weight, None)
    wins = []
    for rows in TIMED_ROWS:
        inputs = torch.randn(rows, weight.shape[1], dtype=weight.dtype)
        mkl = onednn = float("inf")
        for _ in range(TIMING_ROUNDS):
            started = time.perf_counter()
            torch.nn.functional.linear(inputs, weight, bias)
            middle = time.perf_counter()
            _onednn_linear(inputs, packed, bias)
            mkl, onednn = min(mkl, middle - started), min(onednn, time.perf_counter() - middle)
        wins.append(onednn < 0.97 * mkl)
    crossover = len(TIMED_ROWS)
    while crossover > 0 and wins[crossover - 1]:
        crossover -= 1
    return TIMED_ROWS[crossover] if crossover < len(TIMED_ROWS) else TIMED_ROWS[-1] + 1


class _View:
    """The copy of one model and what it was built from (to tell when it went stale)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.modules = _module_ids(model)
        self.linears: list[tuple[torch.nn.Linear, torch.Tensor, int]] = []
        self.crossovers: dict[tuple[int, int, bool], int] = {}  # per layer shape (out, in, bias)
        self.model = self._copy(model)

    def _copy(self, module: torch.nn.Module) -> torch.nn.Module:
        if _packable(module):
            self.linears.append((module, module.weight, module.weight._version))
            shape = (*module.weight.shape, module.bias is not None)
            packed = PackedLinear(module, self.crossovers.get(shape))
            self.crossovers[shape] = packed.min_rows
            return packed
        if "forward" in module.__dict__:  # patched on the instance (accelerate's hooks, for one): keep it,
            return module                 # so the patch applies exactly as on the model, now and later
        clone = copy.copy(module)  # same parameters, buffers, config and hooks; its own child list
        clone._modules = {name: None if child is None else self._copy(child)
                          for name, child in module._modules.items()}
        return clone

    def current(self, model: torch.nn.Module) -> bool:
        return (all(linear.weight is weight and weight._version == version for linear, weight, version in self.linears)
                and _module_ids(model) == self.modules)


def _module_ids(model: torch.nn.Module) -> tuple[int, ...]:
    return tuple(id(module) for module in model.modules())


def _packable(module: torch.nn.Module) -> bool:
    """Exactly `nn.Linear` (not a quantised subclass), fp32 on the CPU, big enough to gain (see
    `MIN_WEIGHT_ELEMENTS`), with nothing hooked onto it."""
    return (type(module) is torch.nn.Linear and module.weight.device.type == "cpu"
            and module.weight.dtype == torch.float32 and module.weight.numel() >= MIN_WEIGHT_ELEMENTS
            and "forward" not in module.__dict__
            and not module._forward_hooks and not module._forward_pre_hooks)


def available(model: torch.nn.Module) -> bool:
    """True when the model's linear layers can run through oneDNN here: a CPU build with oneDNN, at least
    one packable layer, and room for the packed copies (see `MEMORY_SHARE`)."""
    if not torch.backends.mkldnn.is_available() or not hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        return False
    linears = [module for module in model.modules() if _packable(module)]
    if not linears:
        return False
    extra = sum(module.weight.numel() * module.weight.element_size() for module in linears)
    return extra <= MEMORY_SHARE * _physical_memory()


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not a POSIX system: no way to tell, so no copies
        return 0


def packed_view(model: Any) -> torch.nn.Module | None:
    """The model with its fp32 CPU linear layers on oneDNN (shared everything else), or None where that
    does not apply (a GPU, another dtype, no oneDNN, not enough memory). Never modifies `model`."""
    if not available(model):
        return None
    view = _VIEWS.get(model)
    if view is None or not view.current(model):
        view = _View(model)
        _VIEWS[model] = view
    return view.model
