"""Layer plans: self-drafting bypasses blocks through a view the runner runs, never by modifying the model."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import VOCAB, hf_greedy, tiny_model
from specdec.drafters.layerskip.drafter import LayerSkipDrafter, LayerSkipOptions

import specdec
from specdec.errors import UnsupportedModelError
from specdec.layer_plan import LayerPlan, layout_for, plan_view
from specdec.target import TargetRunner

pytestmark = pytest.mark.usefixtures("one_thread")

_LAYERS = {"llama": "model.layers", "qwen2": "model.layers", "gpt2": "transformer.h"}
_ATTENTION = {"llama": "self_attn", "qwen2": "self_attn", "gpt2": "attn"}


def _module(model, dotted: str):
    for part in dotted.split("."):
        model = getattr(model, part)
    return model


@pytest.mark.parametrize("lean", [False, True])
@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_drafting_runs_the_plan_and_leaves_the_model_alone(arch: str, lean: bool) -> None:
    """A ragged batch drafted with layer 1's attention bypassed: at every forward the model's modules, their
    instance attributes and its config are as before; the bypassed attention module never runs while drafting
    (it runs once per target forward, the kept one once per forward of either kind); output = plain greedy."""
    model = tiny_model(arch, layers=3, seed=2)
    specdec.generate(model, [1, 2, 3], drafter="none", max_new_tokens=2)  # the support check's forwards, first
    config = json.dumps(model.config.to_dict(), sort_keys=True, default=str)
    modules = [(name, id(module)) for name, module in model.named_modules()]
    layers = _module(model, _LAYERS[arch])
    calls = {"root": 0, "skipped": 0, "kept": 0}
    problems: list[str] = []

    def check(*_):
        if [(name, id(module)) for name, module in model.named_modules()] != modules:
            problems.append("module tree changed")
        if any("forward" in module.__dict__ for module in model.modules()):
            problems.append("a forward patched on the instance")
        if json.dumps(model.config.to_dict(), sort_keys=True, default=str) != config:
            problems.append("config changed")

    def counter(key):
        def hook(*_):
            calls[key] += 1
        return hook

    handles = [model.register_forward_pre_hook(check), model.register_forward_pre_hook(counter("root")),
               getattr(layers[1], _ATTENTION[arch]).register_forward_pre_hook(counter("skipped")),
               getattr(layers[2], _ATTENTION[arch]).register_forward_pre_hook(counter("kept"))]
    prompts = [[5, 6, 7, 8, 9, 10, 11], [40, 41], [1, 2, 3, 4]]
    drafter = LayerSkipDrafter(LayerSkipOptions(skip={"attention": [1]}, max_draft=3, schedule="own",
                                                fast_forward=lean, draft_weights="model"))
    try:
        out = specdec.generate(model, prompts, drafter=drafter, verifier="exact", max_new_tokens=12)
    finally:
        for handle in handles:
            handle.remove()
    for prompt, got in zip(prompts, out.sequences):
        assert got == hf_greedy(model, prompt, 12)
    assert not problems, sorted(set(problems))
    assert out.stats.drafted_tokens > 0
    # The views share the model's hooks: the root and the kept attention run in every forward through
    # transformers (the prefill, each verification, the draft forwards off the lean path); the bypassed one
    # only in the target's own forwards.
    through_transformers = drafter.draft_forwards - drafter.lean_forwards
    assert calls["kept"] == calls["root"]
    assert calls["skipped"] == calls["root"] - through_transformers > 0
    if lean and arch != "gpt2":
        assert drafter.lean_forwards > 0
    else:
        assert drafter.lean_forwards == 0 and through_transformers > 0


def test_plan_view_copies_only_the_way_to_what_it_replaces() -> None:
    model = tiny_model("llama", layers=3)
    head = [7, 3, 11]
    view = plan_view(model, LayerPlan.build(model, [1], [1, 2], head_tokens=head))
    assert view is not model and view.model is not model.model and view.model.layers is not model.model.layers
    assert view.model.embed_tokens is model.model.embed_tokens and view.model.norm is model.model.norm
    assert view.model.layers[0] is model.model.layers[0]  # nothing replaced under it: shared
    assert view.model.layers[2] is not model.model.layers[2]
    assert view.model.layers[2].self_attn is model.model.layers[2].self_attn
    assert dict(view.named_parameters()).keys() <= dict(model.named_parameters()).keys()
    for name, param in view.named_parameters():
        assert param is dict(model.named_parameters())[name]
    ids = torch.tensor([[1, 2, 3, 4]], device=model.device)
    with torch.no_grad():
        logits = view(ids).logits
        assert logits.shape == (1, 4, len(head))
        # layer 1 whole and layer 2's MLP bypassed, by hand
        inner = model.model
        hidden = inner.embed_tokens(ids)
        positions = torch.arange(4)[None]
        cos_sin = inner.rotary_emb(hidden, positions)
        mask = torch.full((4, 4), float("-inf")).triu(1)[None, None]
        for index in (0, 2):
            layer = inner.layers[index]
            attn = layer.self_attn(layer.input_layernorm(hidden), attention_mask=mask, position_embeddings=cos_sin)[0]
            hidden = hidden + attn
            if index == 0:
                hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        expected = model.lm_head(inner.norm(hidden))[..., head]
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-4)


def test_plans_are_checked_against_the_model() -> None:
    model = tiny_model("llama", layers=2)
    with pytest.raises(ValueError, match="has 2 layers"):
        LayerPlan.build(model, [2])
    for head in ([], [0, 0], [VOCAB], [-1]):
        with pytest.raises(ValueError, match="distinct token ids"):
            LayerPlan.build(model, head_tokens=head)
    assert layout_for(model).layers == "model.layers"
    plan = LayerPlan.build(model, head_tokens=[3, 1])  # a reduced head needs no layout
    assert not plan.skips and plan.head_tokens == (3, 1)


def test_a_patched_forward_on_the_way_is_refused() -> None:
    """accelerate's device hooks replace a module's forward on the instance with one that runs the original
    module's children: a copy would silently run the full layer, so the plan is refused."""
    model = tiny_model("llama", layers=2)
    layer = model.model.layers[1]
    layer.forward = layer.forward  # an instance attribute bound to the original, as accelerate's is
    try:
        with pytest.raises(UnsupportedModelError, match="patched on the instance"):
            plan_view(model, LayerPlan.build(model, [1]))
        plan_view(model, LayerPlan.build(model, [0]))  # nothing replaced under the patched layer
    finally:
        del layer.forward


@pytest.mark.parametrize("lean", [False, True])
def test_scratch_forward_keep_and_rows(lean: bool) -> None:
    """`keep` picks one input's logits per row; `rows` asks for some rows only: on the lean path the others are
    zeros, on transformers' path they are computed; the asked rows match the full batch either way."""
    model = tiny_model("qwen2", layers=3, seed=1)
    plan = LayerPlan.build(model, [1], [2], head_tokens=list(range(0, VOCAB, 2)), lean=lean, weights="model")
    prompt = torch.randint(1, VOCAB, (3, 7), generator=torch.Generator().manual_seed(0))
    runner = TargetRunner(model, 3, 32)
    runner.prefill(prompt, [7, 3, 5])
    chain = torch.tensor([[4, 9], [30, 2], [11, 60]])
    keep = np.array([1, 0, 1])
    with torch.inference_mode():
        full = runner.scratch_forward(chain, 0, plan=plan)
        kept = runner.scratch_forward(chain, 0, plan=plan, keep=keep)
        some = runner.scratch_forward(chain, 0, plan=plan, keep=keep, rows=np.array([0, 2]))
    assert full.shape == (3, 2, VOCAB // 2) and kept.shape == (3, VOCAB // 2)
    torch.testing.assert_close(kept, full[torch.arange(3), torch.as_tensor(keep)], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(some[[0, 2]], kept[[0, 2]], atol=1e-5, rtol=1e-4)
    assert bool((some[1] == 0).all()) == lean
    assert runner.lean_forwards == (3 if lean else 0)


@pytest.mark.parametrize("lean", [False, True])
@pytest.mark.parametrize("arch", ["qwen2", "gemma2"])
def test_scratch_forward_scores_only_the_last_input_when_only_it_is_kept(arch: str, lean: bool) -> None:
    """A drafter feeding committed tokens keeps only the last input's logits: the head runs on that input alone
    (a draft model's first feed of a 900-token prompt spent half its time in the head on every input), with the
    logits of the full forward; Gemma 2 (soft-capped logits, a 16-token window) fed past its window."""
    from families import build

    if arch == "gemma2":
        model = build(arch, seed=2)
        plan = LayerPlan.build(model, lean=lean) if lean else None
    else:  # blocks bypassed and a reduced head, as layer_skip and draft_model draft
        model = tiny_model(arch, layers=3, seed=1)
        plan = LayerPlan.build(model, [1], [2], head_tokens=list(range(0, VOCAB, 2)), lean=lean, weights="model")
    prompt = torch.randint(1, VOCAB, (2, 9), generator=torch.Generator().manual_seed(0))
    chain = torch.randint(1, VOCAB, (2, 24), generator=torch.Generator().manual_seed(1))
    runner = TargetRunner(model, 2, 64)
    runner.prefill(prompt, [9, 6])
    scored: list[int] = []  # inputs the head scored in each transformers forward
    run = runner._run

    def counted_run(*args, **kwargs):
        logits = run(*args, **kwargs)
        scored.append(logits.shape[1])
        return logits

    runner._run = counted_run
    with torch.inference_mode():
        full = runner.scratch_forward(chain, 0, plan=plan)
        scored.clear()
        last = runner.scratch_forward(chain, 0, plan=plan, keep=np.array([23, 23]))
    torch.testing.assert_close(last, full[:, -1], atol=1e-5, rtol=1e-4)
    if runner.lean_forwards == 0:  # (a lean forward runs its own head on the kept inputs)
        assert scored == [1]
