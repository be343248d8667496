"""layer_skip's lean draft forward (specdec/lean_forward.py with skip sets, a reduced head and int8 /
float16 weight copies): same logits as the plan view + transformers path, committed cache left
alone, greedy output token-identical to plain greedy in both batch modes, and the path actually taken."""

from __future__ import annotations

import pytest
import torch
from conftest import CPU_ONLY, VOCAB, hf_greedy, tiny_model
from specdec.drafters.layerskip.drafter import LayerSkipDrafter, LayerSkipOptions

import specdec
from specdec.layer_plan import LayerPlan
from specdec.lean_forward import FastDraftForward, fast_forward_for
from specdec.target import TargetRunner

LEAN_ARCHS = ["llama", "qwen2", "mistral"]
HEAD = list(range(VOCAB - 1, 0, -3)) + [0]  # a third of the vocabulary, not a prefix, not sorted by id
SKIPS = {
    "whole-layer": ({"attention": [1], "mlp": [1]}, None),
    "attention-only": ({"attention": [0, 2], "mlp": []}, None),
    "mlp-only": ({"attention": [], "mlp": [0, 2]}, None),
    "mixed, reduced head": ({"attention": [2], "mlp": [0, 2]}, HEAD),
    "nothing": ({"attention": [], "mlp": []}, None),
}


def _runners(model, lengths: torch.Tensor, seed: int = 0) -> tuple[TargetRunner, TargetRunner]:
    """Two target runners with the same ragged prompts prefilled (rows of different lengths)."""
    prompt = torch.randint(1, VOCAB, (len(lengths), int(lengths.max())), generator=torch.Generator().manual_seed(seed))
    runners = TargetRunner(model, len(lengths), 48), TargetRunner(model, len(lengths), 48)
    for runner in runners:
        runner.prefill(prompt, lengths)
    return runners


def _snapshot(runner: TargetRunner) -> list[torch.Tensor]:
    """Every layer's committed keys and values, per row."""
    out = []
    for layer in runner.cache.layers:
        for row, length in enumerate(runner.lengths.tolist()):
            out += [layer.keys[row, :, :length].clone(), layer.values[row, :, :length].clone()]
    return out


@pytest.mark.parametrize("case", list(SKIPS))
@pytest.mark.parametrize("arch", LEAN_ARCHS)
def test_lean_forward_matches_skipper_path(arch: str, case: str) -> None:
    """A 3-token scratch chain (one token per forward, as the drafter runs it) over rows of different
    lengths: the lean forward's logits match transformers' forward on the plan's view, and neither
    path touches a committed slot."""
    skip, head = SKIPS[case]
    model = tiny_model(arch, layers=3, seed=3)
    fast = fast_forward_for(model, skip["attention"], skip["mlp"], head)
    assert fast is not None
    lengths = torch.tensor([7, 3, 5])
    reference, ours = _runners(model, lengths)
    committed = _snapshot(ours)
    tokens = torch.tensor([[4, 9, 17], [30, 2, 8], [11, 11, 60]])
    plan = LayerPlan.build(model, skip["attention"], skip["mlp"], head_tokens=head)  # transformers' forward
    with torch.inference_mode():
        for depth in range(3):
            expected = reference.scratch_forward(tokens[:, depth, None], offset=depth, plan=plan)[:, -1]
            start, positions = ours.scratch_slots(1, depth)
            got = fast(ours.cache, tokens[:, depth, None], start, positions)[:, -1]
            assert got.shape == (3, len(head) if head else VOCAB)
            torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
        # rows 0 and 2 draft a 4th token alone (row 1 stopped): the same logits as the full batch
        expected = reference.scratch_forward(torch.tensor([[5], [6], [7]]), offset=3, plan=plan)[:, -1]
        rows = torch.tensor([0, 2])
        start, positions = ours.scratch_slots(1, 3)
        got = fast(ours.cache, torch.tensor([[5], [7]]), start[rows], positions[rows], rows=rows)[:, -1]
        torch.testing.assert_close(got, expected[rows], atol=1e-4, rtol=1e-4)
    assert all(torch.equal(a, b) for a, b in zip(committed, _snapshot(ours)))


@pytest.mark.parametrize("weights", ["float16", pytest.param("int8", marks=CPU_ONLY)])
def test_reduced_precision_weights_stay_close(weights: str) -> None:
    """int8 / float16 weight copies compute the same function up to quantisation error: a wrong scale
    layout or a transposed weight would be far off."""
    model = tiny_model("llama", layers=3, seed=4)
    exact = FastDraftForward(model, [1], [2], HEAD)
    lossy = FastDraftForward(model, [1], [2], HEAD, weights=weights)
    a, b = _runners(model, torch.tensor([6, 4]))
    with torch.inference_mode():
        start, positions = a.scratch_slots(1)
        ids = torch.tensor([[3], [40]])
        want = exact(a.cache, ids, start, positions)[:, -1]
        got = lossy(b.cache, ids, start, positions)[:, -1]
    error = (got - want).abs().max() / want.abs().max()
    assert error < (0.05 if weights == "int8" else 0.01)
    with pytest.raises(ValueError, match="weight format"):
        FastDraftForward(model, weights="int4")  # type: ignore[arg-type]


class _Watch(LayerSkipDrafter):
    """Asserts that every propose leaves each row's committed KV bitwise unchanged."""

    checked = 0

    def propose(self, state):
        before = _snapshot(state.target)
        draft = super().propose(state)
        assert all(torch.equal(a, b) for a, b in zip(before, _snapshot(state.target)))
        self.checked += 1
        return draft


@pytest.mark.parametrize("weights", [pytest.param("int8", marks=CPU_ONLY), "model"])
@pytest.mark.parametrize("arch", LEAN_ARCHS)
def test_lean_greedy_token_identical_chain_and_batch(arch: str, weights: str) -> None:
    """Batch 1 and a ragged batch: greedy output equals plain greedy, every draft forward ran on the
    lean path, and drafting never changed a committed slot."""
    model = tiny_model(arch, layers=4, seed=1)
    skip = {"attention": [1, 3], "mlp": [1, 2]}  # layer 1 skipped whole
    for prompts in ([[3, 14, 15, 92, 65]], [[5, 6, 7, 8, 9, 10, 11], [40, 41], [1, 2, 3, 4]]):
        drafter = _Watch(LayerSkipOptions(skip=skip, max_draft=4, draft_weights=weights, draft_vocab=HEAD,
                                          schedule="own"))  # its own drafts, every one verified
        out = specdec.generate(model, prompts, drafter=drafter, verifier="exact", max_new_tokens=16)
        for prompt, got in zip(prompts, out.sequences):
            assert got == hf_greedy(model, prompt, 16)
        assert out.stats.drafted_tokens > 0 and drafter.checked > 0
        assert drafter.lean_forwards == drafter.draft_forwards > 0


def test_padded_batch_mode_uses_transformers_path_and_stays_identical() -> None:
    """The padded mode's KV holes are masked by the runner only, so drafts go through the plan view."""
    model = tiny_model("qwen2", layers=3, seed=2)
    prompts = [[5, 6, 7, 8, 9, 10, 11], [40, 41], [1, 2, 3, 4]]
    drafter = _Watch(LayerSkipOptions(skip={"attention": [1], "mlp": [2]}, max_draft=3, schedule="own"))
    out = specdec.generate(model, prompts, drafter=drafter, verifier="exact", max_new_tokens=16, batch_mode="padded")
    for prompt, got in zip(prompts, out.sequences):
        assert got == hf_greedy(model, prompt, 16)
    assert drafter.draft_forwards > 0 and drafter.lean_forwards == 0


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_transformers_path_when_unsupported_or_switched_off(arch: str) -> None:
    model = tiny_model(arch, layers=2)
    drafter = LayerSkipDrafter(LayerSkipOptions(skip={"attention": [1]}, max_draft=3, fast_forward=arch == "gpt2"))
    out = specdec.generate(model, [[9, 8, 7, 6]], drafter=drafter, verifier="exact", max_new_tokens=12)
    assert out.sequences[0] == hf_greedy(model, [9, 8, 7, 6], 12)
    assert drafter.draft_forwards > 0 and drafter.lean_forwards == 0


@CPU_ONLY
def test_sampled_q_comes_from_the_lean_logits() -> None:
    """At temperature > 0 the draft's q is process_logits of the lean forward's own logits (int8 here),
    so rejection sampling stays lossless whatever the draft's precision."""
    from specdec.sampling import SamplingParams, process_logits

    model = tiny_model("llama", layers=3, seed=5)
    params = SamplingParams(temperature=0.8, top_k=30)
    captured = {}

    class Capture(LayerSkipDrafter):
        def propose(self, state):
            draft = super().propose(state)
            captured.setdefault("first", (draft, list(state.sequences[0])))
            return draft

    drafter = Capture(LayerSkipOptions(skip={"attention": [2], "mlp": [1]}, max_draft=2, adaptive=False))
    specdec.generate(model, [[4, 5, 6, 7]], drafter=drafter, verifier="rejection", max_new_tokens=3,
                     temperature=params.temperature, top_k=params.top_k, seed=3, controller=False)  # (its own rule)
    draft, sequence = captured["first"]
    fast = fast_forward_for(model, [2], [1], None, "int8")
    reference = TargetRunner(model, 1, 32)
    with torch.inference_mode():
        reference.prefill(torch.tensor([sequence[:-1]]), torch.tensor([len(sequence) - 1]))
        chain = [sequence[-1], *draft.tokens[0].tolist()]
        for depth in range(int(draft.num_nodes[0])):
            start, positions = reference.scratch_slots(1, depth)
            logits = fast(reference.cache, torch.tensor([[chain[depth]]]), start, positions)[:, -1].float()
            torch.testing.assert_close(draft.q[0, depth], process_logits(logits, params)[0], atol=1e-5, rtol=1e-4)


def test_int8_default_needs_the_kernel(monkeypatch) -> None:
    """Without torch's int8 kernel the default draft weights are the model's own (documented rule), and
    asking for int8 explicitly is a clear error, not a silent change of format."""
    model = tiny_model("llama", layers=2)
    monkeypatch.delattr(torch, "_weight_int8pack_mm")
    drafter = LayerSkipDrafter(LayerSkipOptions(skip={"mlp": [1]}, max_draft=2))
    out = specdec.generate(model, [[9, 8, 7]], drafter=drafter, verifier="exact", max_new_tokens=6)
    assert out.sequences[0] == hf_greedy(model, [9, 8, 7], 6)
    assert drafter.lean_forwards > 0
    assert drafter.plan.weights == "model"
    with pytest.raises(ValueError, match="int8 draft weights"):
        FastDraftForward(model, weights="int8")


def test_fused_forwards_of_several_variants_are_kept_per_model(monkeypatch) -> None:
    """Drafters sharing a draft model (draft_model's reduced head, ppd_draft_model's whole one) each keep their
    fused forward: alternating calls must not rebuild the weight copies; an in-place weight change must; and a
    model whose copies are big relative to it keeps only the newest (a Llama's fused qkv and gate_up copies are
    ~65% of its weights)."""
    from specdec import lean_forward

    monkeypatch.setattr(lean_forward, "KEPT_SHARE", 100.0)  # room for every variant: the count decides
    model = tiny_model("llama")
    whole = fast_forward_for(model, (), (), None, "model")
    reduced = fast_forward_for(model, (), (), list(range(16)), "model")
    skipping = fast_forward_for(model, [1], (), None, "model")
    assert len({id(whole), id(reduced), id(skipping)}) == 3 and whole.copy_bytes > 0
    assert fast_forward_for(model, (), (), None, "model") is whole
    assert fast_forward_for(model, (), (), list(range(16)), "model") is reduced
    with torch.no_grad():
        model.lm_head.weight.mul_(2.0)
    rebuilt = fast_forward_for(model, (), (), None, "model")
    assert rebuilt is not whole
    variants = [fast_forward_for(model, [layer], (), None, "model") for layer in range(2)] + [
        fast_forward_for(model, (), [layer], None, "model") for layer in range(2)]
    assert len({id(v) for v in variants}) == 4
    assert fast_forward_for(model, (), (), None, "model") is not rebuilt  # the least recently used went first
    # copies beyond the share: only the newest variant stays
    monkeypatch.setattr(lean_forward, "KEPT_SHARE", 0.0)
    other = tiny_model("llama", seed=1)
    first = fast_forward_for(other, (), (), None, "model")
    fast_forward_for(other, [1], (), None, "model")
    assert fast_forward_for(other, (), (), None, "model") is not first
