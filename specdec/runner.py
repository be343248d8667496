"""The runner handle: the part of the runtime a drafter may use.

Drafters and verifiers import only the plugin API (`specdec.plugins`, `specdec.registry`, `specdec.errors`),
the draft types (`specdec.draft`), sampling (`specdec.sampling`), random streams (`specdec.rng`), the bundled
assets (`specdec.zoo`) and this module (`tests/test_plugin_imports.py` holds them to it), so the engine and
the runtime can change behind it. A drafter reaches the target through `DecodeState.target` (a
`TargetRunner`: scratch forwards under a `LayerPlan`, committed lengths), never its cache's layers, and may
own a runner of its own for a draft model.
"""

from __future__ import annotations

from .api import parse_dtype
from .costs import cost_clock, device_key, row_forward_seconds, settled_for
from .layer_plan import LayerPlan, layout_for
from .lean_forward import WeightFormat
from .lean_forward import supports as lean_forward_supports
from .model_support import check_model_supported
from .nominal_costs import nominal_forward_share, nominal_model_cost, nominal_width_share
from .target import TargetRunner, context_length, model_device, model_dtype
from .validation import prune_draft

__all__ = ["LayerPlan", "TargetRunner", "WeightFormat", "check_model_supported", "context_length", "cost_clock",
           "device_key", "layout_for", "lean_forward_supports", "model_device", "model_dtype", "nominal_forward_share",
           "nominal_model_cost", "nominal_width_share", "parse_dtype", "prune_draft", "row_forward_seconds", "settled_for"]
