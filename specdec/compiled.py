"""The verification forward under `torch.compile` (`generate(..., compile=True)`).

A compiled forward specialises on shapes: the runtime's static-shape mode (`TargetRunner(compile=True)`: a
fixed cache capacity every forward reads whole, writes through index tensors, verification widths padded
to powers of two) meets a handful of shapes, one compilation each. The compiled module is the runtime's
attention view of the model (`specdec.attention`), not the oneDNN view of `specdec.cpu_linear`, whose
prepacked weights inductor cannot lower (it prepacks weights itself). On CUDA the "reduce-overhead" mode
adds CUDA graphs. Kept on the view (which the runtime keeps per model, weakly), so a model is compiled
once per process while it lives.

torch compiles one Python function for at most `torch._dynamo.config.recompile_limit` shapes (8), and models
of one family share their forward function: a process that compiles several such models, or more widths,
should raise that limit, or torch warns and runs the rest eagerly.
"""

from __future__ import annotations

import torch

_ATTRIBUTE = "_specdec_compiled"


def compiled_view(view: torch.nn.Module) -> torch.nn.Module:
    """`view` under torch.compile (static shapes; CUDA graphs on CUDA). Only ever the runtime's own view: the
    compiled module is kept in its `__dict__` (not as a submodule), so it goes when the view goes."""
    compiled = view.__dict__.get(_ATTRIBUTE)
    if compiled is None:
        on_cuda = next(view.parameters()).device.type == "cuda"
        compiled = torch.compile(view, dynamic=False, mode="reduce-overhead" if on_cuda else None)
        view.__dict__[_ATTRIBUTE] = compiled
    return compiled
