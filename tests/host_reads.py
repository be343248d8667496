"""Count reads of tensor data into Python: each one is a device synchronisation on a GPU.

On this CPU a tensor's data is already on the host, so a read is recognised by what asks for it:
- at the Python level (`TorchFunctionMode`): `tolist`, `numpy`, `cpu` and `to("cpu")`, which copy a
  device tensor to the host without passing through an aten kernel the dispatcher would see, and scalar
  reads (`item`, `int(t)`, `bool(t)`, `float(t)`, `t` as an index);
- at the dispatch level (`TorchDispatchMode`): `_local_scalar_dense` (`item`, `int(t)`, `bool(t)`),
  `equal`, and ops whose output size depends on the data (`nonzero`, boolean indexing, `masked_select`,
  `unique`, `repeat_interleave` without `output_size`).
Host-to-device copies (`torch.tensor(list)`, `.to(device)` of host data) are not reads.
"""

from __future__ import annotations

import traceback
from collections import Counter
from contextlib import contextmanager

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

_PYTHON_READS = {"tolist", "numpy", "__array__", "cpu"}
# Scalar reads, also caught here: under `torch.inference_mode` `_local_scalar_dense` does not reach the mode.
_SCALAR_READS = {"item", "__bool__", "__int__", "__float__", "__index__"}
_DISPATCH_READS = {
    "aten._local_scalar_dense.default", "aten.equal.default", "aten.nonzero.default", "aten.masked_select.default",
    "aten._unique2.default", "aten.unique_consecutive.default", "aten.unique_dim.default",
}


def _to_host(args: tuple, kwargs: dict) -> bool:
    """`tensor.to("cpu")`: the explicit copy to the host. `.to(device)` with a device object is a copy *to*
    the model's device, which on this CPU is the host too: it cannot be told apart here and is not counted."""
    return "cpu" in args[1:] or kwargs.get("device") == "cpu"


class _PythonReads(TorchFunctionMode):
    def __init__(self, counts: Counter, where: Counter | None, scalar: list[bool]) -> None:
        super().__init__()
        self.counts, self.where, self.scalar = counts, where, scalar

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in _PYTHON_READS or (name == "to" and _to_host(args, kwargs)):
            _record(self.counts, self.where, name)
        elif name in _SCALAR_READS:
            _record(self.counts, self.where, name)
            self.scalar[0] = True  # its `_local_scalar_dense` is this read
            try:
                return func(*args, **kwargs)
            finally:
                self.scalar[0] = False
        return func(*args, **kwargs)


class _DispatchReads(TorchDispatchMode):
    def __init__(self, counts: Counter, where: Counter | None, scalar: list[bool]) -> None:
        super().__init__()
        self.counts, self.where, self.scalar = counts, where, scalar

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func)
        if name == "aten._local_scalar_dense.default" and self.scalar[0]:
            pass  # counted at the Python level
        elif name in _DISPATCH_READS or (name == "aten.repeat_interleave.Tensor" and kwargs.get("output_size") is None):
            _record(self.counts, self.where, name)
        elif name == "aten.index.Tensor" and any(
                isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] or ())):
            _record(self.counts, self.where, "boolean index")
        return func(*args, **kwargs)


def _record(counts: Counter, where: Counter | None, kind: str) -> None:
    counts[kind] += 1
    if where is not None:  # the innermost frame in specdec's own code, for finding a read
        for frame in reversed(traceback.extract_stack()[:-2]):
            if "/specdec/" in frame.filename or "/drafters/" in frame.filename or "/verifiers/" in frame.filename:
                where[f"{kind} {frame.filename.rsplit('/', 2)[-2]}/{frame.filename.rsplit('/', 1)[-1]}:"
                      f"{frame.lineno} {frame.name}"] += 1
                return
        where[f"{kind} (outside specdec)"] += 1


@contextmanager
def counting_host_reads(where: Counter | None = None):
    """Yields a Counter of the reads made inside the block, by kind; `where` (optional) counts them by the
    line of specdec that made them."""
    counts: Counter = Counter()
    scalar = [False]
    with _PythonReads(counts, where, scalar), _DispatchReads(counts, where, scalar):
        yield counts
