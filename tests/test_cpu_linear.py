"""The target's oneDNN linear layers on a CPU (`specdec.cpu_linear`): same tokens, the user's model
untouched, never stale."""

from __future__ import annotations

import pytest
import torch
from conftest import hf_greedy
from families import FAMILIES

import specdec
from specdec import cpu_linear
from specdec.attention import attention_view
from specdec.target import TargetRunner

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN")

MEASURED_CROSSOVERS = cpu_linear._crossovers


@pytest.fixture(autouse=True)
def onednn_from_one_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test here checks oneDNN's kernel from the first input row, whatever this machine's crossover
    (on a Xeon these small layers would run MKL at every width the tests use)."""
    monkeypatch.setattr(cpu_linear, "_crossovers",
                        lambda layers: {cpu_linear.layer_shape(layer.source): 1 for layer in layers})


def wide_llama(seed: int = 0, arch: str = "llama") -> torch.nn.Module:
    """Layers above `MIN_WEIGHT_ELEMENTS`, so they are packed (the shared tiny models are too small)."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    shape = dict(vocab_size=512, hidden_size=384, intermediate_size=512, num_hidden_layers=2,
                 num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=256)
    config, model_class = (LlamaConfig, LlamaForCausalLM) if arch == "llama" else (Qwen2Config, Qwen2ForCausalLM)
    model = model_class(config(**shape, attn_implementation="sdpa")).eval()
    with torch.no_grad():  # peaked logits, as in a trained model: ties of random logits would test noise
        model.lm_head.weight.mul_(8.0)
    return model


def _snapshot(model: torch.nn.Module) -> tuple:
    return (tuple(id(m) for m in model.modules()), {k: v.clone() for k, v in model.state_dict().items()},
            [dict(m.__dict__.get("_modules", {})) for m in model.modules()],
            [("forward" in m.__dict__) for m in model.modules()])


def test_view_packs_big_linears_and_leaves_the_model_alone() -> None:
    model = wide_llama()
    before = _snapshot(model)
    view = cpu_linear.packed_view(model)
    assert view is not None and view is not model
    packed = [m for m in view.modules() if isinstance(m, cpu_linear.PackedLinear)]
    # q, o, gate, up, down per layer and the LM head; k and v (2 KV heads: 384 x 128) stay on MKL
    assert len(packed) == 2 * 5 + 1
    assert {id(m.source) for m in packed} == {id(m) for m in model.modules() if isinstance(m, torch.nn.Linear)
                                              and m.weight.numel() >= cpu_linear.MIN_WEIGHT_ELEMENTS}
    assert not any(isinstance(m, cpu_linear.PackedLinear) for m in model.modules())
    ids = torch.randint(0, 512, (2, 40))
    with torch.no_grad():
        expected, got = model(ids).logits, view(ids).logits
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    after = _snapshot(model)
    assert before[0] == after[0] and before[2] == after[2] and before[3] == after[3]
    assert all(torch.equal(before[1][k], after[1][k]) for k in before[1])
    assert cpu_linear.packed_view(model) is view  # kept while the model is unchanged


def test_tiny_models_other_devices_and_dtypes_and_low_memory_get_no_view(monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import tiny_model

    assert cpu_linear.packed_view(tiny_model("llama")) is None  # every layer below MIN_WEIGHT_ELEMENTS
    assert cpu_linear.packed_view(wide_llama().to(torch.bfloat16)) is None
    assert cpu_linear.packed_view(wide_llama().to("meta")) is None  # not on the CPU (as on a GPU)
    monkeypatch.setattr(cpu_linear, "MEMORY_SHARE", 1e-9)
    assert cpu_linear.packed_view(wide_llama()) is None


def test_view_follows_weights_changed_in_place_and_replaced_modules() -> None:
    model = wide_llama()
    ids = torch.randint(0, 512, (1, 24))
    view = cpu_linear.packed_view(model)
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight.mul_(3.0)  # in place: the packed copy is now stale
        fresh = cpu_linear.packed_view(model)
        assert fresh is not view
        torch.testing.assert_close(fresh(ids).logits, model(ids).logits, rtol=1e-4, atol=1e-4)
        model.model.layers[0].self_attn.o_proj = torch.nn.Linear(384, 384, bias=False)  # a new module
        newest = cpu_linear.packed_view(model)
        assert newest is not fresh
        torch.testing.assert_close(newest(ids).logits, model(ids).logits, rtol=1e-4, atol=1e-4)


def test_a_module_patched_on_the_instance_is_kept_not_copied() -> None:
    """A view built while a module's forward is patched on the instance (accelerate's hooks do that) must
    not keep the patch after it ends."""
    model = wide_llama()
    ids = torch.randint(0, 512, (1, 24))
    mlp = model.model.layers[1].mlp
    with torch.no_grad():
        mlp.forward = torch.zeros_like  # the MLP adds nothing while patched
        try:
            view = cpu_linear.packed_view(model)
            skipped = model(ids).logits
            torch.testing.assert_close(view(ids).logits, skipped, rtol=1e-4, atol=1e-4)
        finally:
            del mlp.forward
        assert cpu_linear.packed_view(model) is view
        full = model(ids).logits
        assert not torch.allclose(full, skipped, atol=1e-3)
        torch.testing.assert_close(view(ids).logits, full, rtol=1e-4, atol=1e-4)


def widened(family: str, seed: int = 0) -> torch.nn.Module:
    """A test family's model (its windows, layer types and norms) with MLPs wide enough to be packed."""
    import transformers

    spec = FAMILIES[family]
    config = spec.config()
    config.intermediate_size = 512
    config.hidden_size = 256
    torch.manual_seed(seed)
    model = getattr(transformers, spec.model_class)(config).eval()
    model.generation_config.eos_token_id = None
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)
    return model


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen2_windows", "gemma3"])
def test_runner_uses_the_view_and_greedy_matches_transformers(family: str) -> None:
    """Chains and trees with wrong branches verified through the packed layers, on full, sliding-window and
    hybrid local/global models with windows shorter than the text: transformers' greedy tokens."""
    model = wide_llama(seed=3, arch=family) if family in ("llama", "qwen2") else widened(family)
    runner = TargetRunner(model, 1, 64)
    assert any(isinstance(m, cpu_linear.PackedLinear) for m in runner.forward_model.modules())
    vocab = model.get_input_embeddings().weight.shape[0]
    prompt = torch.randint(0, vocab, (30,), generator=torch.Generator().manual_seed(1)).tolist()
    expected = hf_greedy(model, prompt, 40)
    cells = [("none", None), ("anpd", None)]
    if family != "gemma3":  # layer_skip knows Llama-family layouts
        cells.append(("layer_skip", {"skip": {"attention": [1], "mlp": []}, "schedule": "own"}))
    for drafter, options in cells:
        out = specdec.generate(model, prompt, drafter=drafter, drafter_options=options, max_new_tokens=40,
                               controller=False)
        assert out.sequences[0] == expected, drafter
    short = prompt[:9]  # a ragged batch: packed inputs through the packed layers
    out = specdec.generate(model, [prompt, short], drafter="anpd", max_new_tokens=24, controller=False)
    assert out.sequences == [expected[:24], hf_greedy(model, short, 24)]


def test_packed_layers_run_mkl_below_their_crossover(monkeypatch: pytest.MonkeyPatch) -> None:
    layer = torch.nn.Linear(512, 512)
    packed = cpu_linear.PackedLinear(layer, min_rows=4)
    through_onednn = []
    onednn = packed.onednn
    monkeypatch.setattr(packed, "onednn", lambda inputs: through_onednn.append(inputs.shape[0]) or onednn(inputs))
    with torch.no_grad():
        for rows in (1, 3, 4, 9):
            inputs = torch.randn(rows, 512)
            torch.testing.assert_close(packed(inputs), layer(inputs), rtol=1e-5, atol=1e-5)
    assert through_onednn == [4, 9]


def test_each_layer_shape_gets_one_crossover_per_view(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(cpu_linear, "_crossovers", lambda layers: calls.append(list(layers)) or {
        cpu_linear.layer_shape(layer.source): 8 for layer in layers})
    model = wide_llama()
    packed = [m for m in cpu_linear.packed_view(model).modules() if isinstance(m, cpu_linear.PackedLinear)]
    assert len(calls) == 1 and calls[0] == packed  # once, with every packed layer in the order a forward runs them
    assert all(m.min_rows == 8 for m in packed)


def test_a_small_model_is_timed_in_sweeps_over_all_its_layers_as_a_forward_runs_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    model = wide_llama()
    sources = [m for m in model.modules() if isinstance(m, torch.nn.Linear)
               and m.weight.numel() >= cpu_linear.MIN_WEIGHT_ELEMENTS]
    layers = [cpu_linear.PackedLinear(source) for source in sources]
    calls: list[tuple[int, str, int]] = []
    for index, layer in enumerate(layers):
        for kernel in ("mkl", "onednn"):
            run = getattr(layer, kernel)
            monkeypatch.setattr(layer, kernel, lambda inputs, run=run, index=index, kernel=kernel:
                                calls.append((index, kernel, inputs.shape[0])) or run(inputs))
    monkeypatch.setattr(cpu_linear, "_crossover", lambda weight, bias: pytest.fail("timed one layer alone"))
    crossovers = MEASURED_CROSSOVERS(layers)
    assert set(crossovers) == {cpu_linear.layer_shape(source) for source in sources}
    assert set(crossovers.values()) <= {*cpu_linear.TIMED_ROWS, cpu_linear.TIMED_ROWS[-1] + 1}
    sweeps = [calls[i:i + len(layers)] for i in range(0, len(calls), len(layers))]
    assert len(sweeps) == cpu_linear.STREAM_ROUNDS * len(cpu_linear.TIMED_ROWS) * 2
    for sweep in sweeps:  # each sweep: every layer in order, on one kernel at one row count
        assert [index for index, _, _ in sweep] == list(range(len(layers)))
        assert len({(kernel, rows) for _, kernel, rows in sweep}) == 1
    assert {(kernel, rows) for _, kernel, rows in calls} == {
        (kernel, rows) for kernel in ("mkl", "onednn") for rows in cpu_linear.TIMED_ROWS}


def test_a_big_model_is_timed_one_layer_per_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_linear, "STREAM_BYTES", 0)
    layer = torch.nn.Linear(512, 512)
    measured = cpu_linear._crossover(layer.weight.detach(), layer.bias)
    assert measured in (*cpu_linear.TIMED_ROWS, cpu_linear.TIMED_ROWS[-1] + 1)
    timed = []
    monkeypatch.setattr(cpu_linear, "_crossover", lambda weight, bias: timed.append(tuple(weight.shape)) or 8)
    model = wide_llama()
    layers = [cpu_linear.PackedLinear(m) for m in model.modules() if isinstance(m, torch.nn.Linear)
              and m.weight.numel() >= cpu_linear.MIN_WEIGHT_ELEMENTS]
    crossovers = MEASURED_CROSSOVERS(layers)
    assert len(timed) == len(set(timed)) == len(crossovers) < len(layers)
    assert set(crossovers.values()) == {8}


def test_where_the_output_is_reproduced_no_kernel_is_chosen_by_timing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A seeded sampled call runs every packed layer from `fixed_crossover()` rows on oneDNN and times nothing
    (under load the timed choice differed between processes, flipping seeded draws); a greedy call still
    times. Both views share the packed weights."""
    timed = []
    monkeypatch.setattr(cpu_linear, "_crossovers", lambda layers: timed.append(len(layers)) or {
        cpu_linear.layer_shape(layer.source): 4 for layer in layers})
    monkeypatch.setattr(cpu_linear, "_cpu_vendor", lambda: "GenuineIntel")
    model = wide_llama(seed=2)
    prompt = torch.randint(0, 512, (20,), generator=torch.Generator().manual_seed(4)).tolist()
    runs = [specdec.generate(model, prompt, drafter=drafter, temperature=0.8, seed=5, max_new_tokens=24)
            for drafter in ("none", "anpd", "anpd")]
    assert not timed
    assert runs[1].sequences == runs[2].sequences
    viewed = attention_view(model)  # what the runtime packs
    fixed = cpu_linear.packed_view(viewed, timed=False)
    fixed_layers = [m for m in fixed.modules() if isinstance(m, cpu_linear.PackedLinear)]
    assert fixed_layers and all(m.min_rows == cpu_linear.FIXED_CROSSOVERS["GenuineIntel"] for m in fixed_layers)
    assert TargetRunner(model, 1, 64, reproducible=True).forward_model is fixed and not timed

    specdec.generate(model, prompt, drafter="anpd", max_new_tokens=8)  # greedy: the timed view
    assert len(timed) == 1
    timed_layers = [m for m in cpu_linear.packed_view(viewed).modules() if isinstance(m, cpu_linear.PackedLinear)]
    assert all(m.min_rows == 4 for m in timed_layers) and len(timed) == 1
    assert all(a.packed is b.packed for a, b in zip(timed_layers, fixed_layers, strict=True))  # not copies


def test_the_fixed_crossover_follows_the_processor_maker(monkeypatch: pytest.MonkeyPatch) -> None:
    never = cpu_linear.TIMED_ROWS[-1] + 1  # MKL, the model's own kernel, at every width the runtime verifies
    for vendor, crossover in (("AuthenticAMD", cpu_linear.FIXED_CROSSOVERS["AuthenticAMD"]),
                              ("GenuineIntel", cpu_linear.FIXED_CROSSOVERS["GenuineIntel"]),
                              ("CentaurHauls", never), (None, never)):
        monkeypatch.setattr(cpu_linear, "_cpu_vendor", lambda vendor=vendor: vendor)
        assert cpu_linear.fixed_crossover() == crossover
