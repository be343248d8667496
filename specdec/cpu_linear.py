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
counts, and a `PackedLinear` runs MKL below the row count from which oneDNN wins (`_crossovers`).
It is timed as a forward runs it: every layer in turn, its weight fetched from memory, not from a cache
the same call just filled. Timed alone and warm, the default model's 384 x 384 projections (0.6 MB each)
read 18-28 us on MKL against 26-27 us on oneDNN at 1-2 rows and stayed on MKL at every width, and
its MLP's down projection on MKL below 4 rows; in a forward, where the model's 69 MB pass through the
caches, oneDNN is the faster there: verifying 1-2 draft tokens cost 0.5-2.3 ms over a ~10 ms plain step,
now about nothing (AMD EPYC, `benchmarks/results/goodput/checks_s71/`).

Where the output must be reproduced (a seeded sampled call: `GenerationContext.reproducible`), timings may not
choose: a draw within the rounding of a boundary flips with the kernel, and under load the timed choice differed
between processes (`benchmarks/results/goodput/checks_s79/`). There `packed_view(model, timed=False)` runs every
layer from `fixed_crossover()` rows on oneDNN, a row count set per processor maker from the two measured (MKL
alone elsewhere); on the EPYC it verifies as fast as the timed choice. Both views share the packed weights.

Numerics: the same fp32 products summed in another order, as MKL's GEMM already does between one
and several rows (logits differ by ~1e-6 relative); verification stays exact against the target as
this runtime computes it, and the support check (`specdec.model_support`) compares against
transformers' own forward.
"""

from __future__ import annotations

import copy
import math
import os
import time
import weakref
from collections.abc import Callable
from typing import Any

import torch

#: The packed copies may take at most this share of the machine's physical memory.
MEMORY_SHARE = 0.25
#: Smaller layers stay on MKL: oneDNN's call costs ~10 us more, which a layer this size (512 KiB in fp32)
#: earns back by streaming its weight faster; tiny layers that sit in cache never do.
MIN_WEIGHT_ELEMENTS = 1 << 17

#: Input row counts at which both kernels are timed per layer shape (`_crossovers`), the rounds, and the most
#: weights timed (a bigger layer is timed on its first outputs).
TIMED_ROWS = (1, 2, 4, 8, 16, 32)
TIMING_ROUNDS = 5
TIMED_ELEMENTS = 1 << 23
#: A model whose packed weights take at most this many bytes is timed in sweeps over all its layers, as a
#: forward runs them (`_streamed_crossovers`: ~0.45 s for the default model), in STREAM_ROUNDS rounds. A bigger
#: one is timed a shape at a time (`_crossover`): its layers are each too big for a cache to hold anyway, and a
#: sweep over a 1B-parameter model's would take seconds.
STREAM_BYTES = 1 << 28
STREAM_ROUNDS = 3
#: oneDNN wins at a row count when it takes less than this share of MKL's time there.
WIN_SHARE = 0.97
#: The crossover where timings may not choose (`fixed_crossover`), per processor maker (`/proc/cpuinfo`'s
#: vendor_id), as measured: on an AMD EPYC oneDNN from 2 rows (at one row MKL was as fast or faster, and the timed
#: choice kept MKL for the default model's small layers: `benchmarks/results/goodput/checks_s79/fixed_kernels.txt`);
#: on a Sapphire Rapids Xeon MKL below 8 rows.
FIXED_CROSSOVERS = {"AuthenticAMD": 2, "GenuineIntel": 8}

_VIEWS: weakref.WeakKeyDictionary[torch.nn.Module, _View] = weakref.WeakKeyDictionary()


class PackedLinear(torch.nn.Module):
    """`source`'s forward with its weight in oneDNN's blocked layout (read-only copy; bias shared), used
    from `min_rows` input rows on (MKL, as `source` itself, below)."""

    def __init__(self, source: torch.nn.Linear, min_rows: int = 1, packed: torch.Tensor | None = None) -> None:
        """`packed`: the oneDNN copy of `source`'s weight when another view already made it."""
        super().__init__()
        self.source = source
        if packed is None:
            with torch.no_grad():
                packed = torch.ops.mkldnn._reorder_linear_weight(source.weight.detach(), None)
        self.packed = packed
        self.min_rows = min_rows

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if inputs.numel() < self.min_rows * inputs.shape[-1]:  # fewer rows than the crossover: MKL
            return self.mkl(inputs)
        return self.onednn(inputs)

    def mkl(self, inputs: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(inputs, self.source.weight, self.source.bias)

    def onednn(self, inputs: torch.Tensor) -> torch.Tensor:
        return _onednn_linear(inputs, self.packed, self.source.bias)


Shape = tuple[int, int, bool]  # a linear layer's (outputs, inputs, has a bias)


def layer_shape(layer: torch.nn.Linear) -> Shape:
    return (*layer.weight.shape, layer.bias is not None)


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
        wins.append(onednn < WIN_SHARE * mkl)
    return _first_win(wins)


def _first_win(wins: list[bool]) -> int:
    """The first of TIMED_ROWS from which oneDNN wins at every larger one (`wins[i]`: it won at TIMED_ROWS[i]);
    past the last when it does not win at the last."""
    crossover = len(TIMED_ROWS)
    while crossover > 0 and wins[crossover - 1]:
        crossover -= 1
    return TIMED_ROWS[crossover] if crossover < len(TIMED_ROWS) else TIMED_ROWS[-1] + 1


def fixed_crossover() -> int:
    """The fewest input rows from which every packed layer runs oneDNN where timings may not choose: by the
    processor's maker (`FIXED_CROSSOVERS`); past the widest timed row count (MKL, the model's own kernel, at
    every width) on a processor not measured or where the maker cannot be read."""
    return FIXED_CROSSOVERS.get(_cpu_vendor(), TIMED_ROWS[-1] + 1)


def _cpu_vendor() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            for line in info:
                if line.startswith("vendor_id"):
                    return line.partition(":")[2].strip()
    except OSError:  # not Linux
        pass
    return None


def _crossovers(layers: list[PackedLinear]) -> dict[Shape, int]:
    """Per shape of `layers` (a view's packed layers in the order a forward runs them), the fewest input rows
    from which oneDNN beats MKL here: timed in sweeps over them all when their weights take at most
    STREAM_BYTES, else one layer per shape alone (`_crossover`)."""
    if sum(layer.source.weight.numel() * layer.source.weight.element_size() for layer in layers) <= STREAM_BYTES:
        return _streamed_crossovers(layers)
    firsts = {layer_shape(layer.source): layer.source for layer in reversed(layers)}
    return {shape: _crossover(source.weight.detach(), source.bias) for shape, source in firsts.items()}


@torch.no_grad()
def _streamed_crossovers(layers: list[PackedLinear]) -> dict[Shape, int]:
    """`_crossovers` timed as a forward runs: per round, row count and kernel, one sweep that calls every layer
    in turn on that kernel, each call timed; a shape's time in a sweep is the sum over its layers, and its
    time at a row count on a kernel the least over STREAM_ROUNDS rounds (the kernels' order alternates). Timed
    one layer at a time, a layer's weight is in the cache from the call before and small layers read faster on
    MKL than they run in a forward (see the module's docstring)."""
    inputs = {(layer.source.in_features, rows): torch.randn(rows, layer.source.in_features,
                                                            dtype=layer.source.weight.dtype)
              for layer in layers for rows in TIMED_ROWS}
    shapes = [layer_shape(layer.source) for layer in layers]
    best: dict[tuple[Shape, int, str], float] = {}
    for round_index in range(STREAM_ROUNDS):
        for rows in TIMED_ROWS:
            kernels = ("mkl", "onednn") if (round_index + rows) % 2 else ("onednn", "mkl")
            for kernel in kernels:
                sweep: dict[Shape, float] = {}
                for layer, shape in zip(layers, shapes):
                    run = getattr(layer, kernel)
                    features = inputs[(layer.source.in_features, rows)]
                    started = time.perf_counter()
                    run(features)
                    sweep[shape] = sweep.get(shape, 0.0) + time.perf_counter() - started
                for shape, seconds in sweep.items():
                    key = (shape, rows, kernel)
                    best[key] = min(best.get(key, math.inf), seconds)
    return {shape: _first_win([best[(shape, rows, "onednn")] < WIN_SHARE * best[(shape, rows, "mkl")]
                               for rows in TIMED_ROWS]) for shape in set(shapes)}


class _View:
    """The two copies of one model (kernels chosen by timings, and by `fixed_crossover`; they share the packed
    weights) and what they were built from (to tell when they went stale)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.modules = _module_ids(model)
        self.linears: list[tuple[torch.nn.Linear, torch.Tensor, int]] = []
        self.packed: list[PackedLinear] = []  # the timed copy's, in the order a forward runs them
        self.timed_model = self._copy(model, self._pack)
        self.crossovers: dict[Shape, int] | None = None  # per layer shape, timed on the timed copy's first use
        crossover = fixed_crossover()
        by_source = {id(layer.source): layer.packed for layer in self.packed}
        self.fixed_model = self._copy(model, lambda linear: PackedLinear(linear, crossover, by_source[id(linear)]))

    def model(self, timed: bool) -> torch.nn.Module:
        if not timed:
            return self.fixed_model
        if self.crossovers is None:
            self.crossovers = _crossovers(self.packed)
            for layer in self.packed:
                layer.min_rows = self.crossovers[layer_shape(layer.source)]
        return self.timed_model

    def _pack(self, linear: torch.nn.Linear) -> PackedLinear:
        self.linears.append((linear, linear.weight, linear.weight._version))
        self.packed.append(PackedLinear(linear))
        return self.packed[-1]

    def _copy(self, module: torch.nn.Module, pack: Callable[[torch.nn.Linear], PackedLinear]) -> torch.nn.Module:
        if _packable(module):
            return pack(module)
        if "forward" in module.__dict__:  # patched on the instance (accelerate's hooks, for one): keep it,
            return module                 # so the patch applies exactly as on the model, now and later
        clone = copy.copy(module)  # same parameters, buffers, config and hooks; its own child list
        clone._modules = {name: None if child is None else self._copy(child, pack)
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


def packed_view(model: Any, timed: bool = True) -> torch.nn.Module | None:
    """The model with its fp32 CPU linear layers on oneDNN (shared everything else), or None where that
    does not apply (a GPU, another dtype, no oneDNN, not enough memory). Never modifies `model`. `timed`: each
    layer shape's kernel chosen per row count by timing both here (the faster); else by `fixed_crossover`, the
    same in every process (where the output must be reproduced)."""
    if not available(model):
        return None
    view = _VIEWS.get(model)
    if view is None or not view.current(model):
        view = _View(model)
        _VIEWS[model] = view
    return view.model(timed)
