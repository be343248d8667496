"""layer_skip drafter: lossless greedy on every architecture, cache left intact, clear errors, search."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
import torch
from conftest import ARCHS, CPU_ONLY, VOCAB, hf_greedy, tiny_model
from specdec.drafters.layerskip.adaptive import AdaptiveOptions, exit_rule
from specdec.drafters.layerskip.drafter import LayerSkipDrafter, LayerSkipOptions
from specdec.drafters.layerskip.skipset import SkipSet, load_skip_set, model_fingerprint, save_skip_set

import specdec
from specdec.errors import DrafterError, PluginOptionsError, UnsupportedModelError
from specdec.layer_plan import LayerPlan, plan_view
from specdec.lean_forward import default_weight_format
from specdec.sampling import SamplingParams, process_logits
from specdec.tools.layer_search import SearchSettings, main, search_skip_set

pytestmark = pytest.mark.usefixtures("one_thread")


def _drafter(skip, **options) -> LayerSkipDrafter:
    # schedule="own": these tests check layer_skip's own drafts (the paper's rule), every one verified;
    # under the goodput controller a tiny model's self-draft rarely pays and is cut.
    return LayerSkipDrafter(LayerSkipOptions(skip=skip, **{"schedule": "own", **options}))


@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_token_identical(arch: str) -> None:
    model = tiny_model(arch, layers=3)
    skip = {"attention": [1, 2], "mlp": [0, 2]}  # layer 2 is skipped whole
    for prompt, adaptive in (([3, 14, 15, 92, 65], True), ([27, 18], False)):
        expected = hf_greedy(model, prompt, 20)
        out = specdec.generate(model, prompt, drafter=_drafter(skip, max_draft=4, adaptive=adaptive),
                               verifier="exact", max_new_tokens=20)
        assert out.sequences[0] == expected
        assert out.stats.drafted_tokens > 0


def test_greedy_batch_identical() -> None:
    model = tiny_model("llama", layers=3)
    prompts = [[5, 6, 7, 8, 9, 10, 11], [40, 41], [1, 2, 3, 4]]
    out = specdec.generate(model, prompts, drafter=_drafter({"attention": [2], "mlp": [1]}, max_draft=3),
                           verifier="exact", max_new_tokens=16)
    for prompt, got in zip(prompts, out.sequences):
        assert got == hf_greedy(model, prompt, 16)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_skipping_nothing_is_a_perfect_draft(arch: str) -> None:
    """The unskipped model must reproduce the target exactly: any cache mix-up would show here (with the
    model's own weights: int8 draft weights are a different model)."""
    model = tiny_model(arch, layers=2)
    prompts = [[9, 8, 7, 6, 5], [11, 12]]
    # controller=False: every draft verified. (The controller rightly drafts little here: a draft that
    # skips nothing costs a full forward per token, more than verifying saves.)
    out = specdec.generate(model, prompts, drafter=_drafter({}, max_draft=4, adaptive=False, draft_weights="model"),
                           verifier="exact", max_new_tokens=20, controller=False)
    assert out.stats.acceptance_rate == 1.0
    assert out.stats.mean_accepted == pytest.approx(5.0)  # 4 drafts + bonus on every step
    for prompt, got in zip(prompts, out.sequences):
        assert got == hf_greedy(model, prompt, 20)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_a_chain_ends_at_a_drafted_eos(arch: str) -> None:
    """Nothing drafted past an eos can be committed, so the chain stops there: with a perfect draft of
    8 tokens a step, a text ending at its 11th token drafts 8 + 2 tokens, not 16."""
    model = tiny_model(arch, layers=2)
    prompt = [9, 8, 7, 6, 5]
    reference = hf_greedy(model, prompt, 20)
    eos = next(t for i, t in enumerate(reference) if i >= 9 and t not in reference[:i])
    end = reference.index(eos) + 1
    out = specdec.generate(model, prompt, drafter=_drafter({}, max_draft=8, adaptive=False, draft_weights="model"),
                           verifier="exact", max_new_tokens=20, eos_token_id=eos, controller=False)
    assert out.sequences[0] == reference[:end]
    assert out.stats.acceptance_rate == 1.0
    assert out.stats.drafted_tokens <= end  # without the stop: 8 more than the text's last step needs


class _CacheWatchingDrafter(LayerSkipDrafter):
    """Snapshots the committed part of every row's KV before and after each propose."""

    def propose(self, state):
        target = state.target
        before = self._committed(target)
        draft = super().propose(state)
        after = self._committed(target)
        assert len(before) == len(after)
        for (k0, v0), (k1, v1) in zip(before, after):
            assert torch.equal(k0, k1) and torch.equal(v0, v1)
        self.checked = getattr(self, "checked", 0) + 1
        return draft

    @staticmethod
    def _committed(target):
        snapshot = []
        for layer in target.cache.layers:
            for row, length in enumerate(target.lengths.tolist()):
                snapshot.append((layer.keys[row, :, :length].clone(), layer.values[row, :, :length].clone()))
        return snapshot


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_drafting_leaves_committed_cache_unchanged(temperature: float) -> None:
    model = tiny_model("qwen2", layers=3)
    drafter = _CacheWatchingDrafter(LayerSkipOptions(skip={"attention": [1], "mlp": [2]}, max_draft=4))
    specdec.generate(model, [[1, 2, 3, 4, 5, 6], [7, 8]], drafter=drafter, verifier="exact", max_new_tokens=12,
                     temperature=temperature, seed=0)
    assert drafter.checked > 0


SAMPLED = SamplingParams(temperature=0.7, top_k=20, top_p=0.9)


def _first_sampled_draft(verifier: str, **options) -> tuple[list[int], Any, torch.Tensor]:
    """The first draft of a sampled layer_skip run on a tiny model: (committed sequence, draft, the
    skipped model's logits over sequence + drafted tokens), to check the draft's q against."""
    model = tiny_model("llama", layers=3)
    skip = SkipSet(attention=(2,), mlp=(1,))
    captured = {}

    class Capture(LayerSkipDrafter):
        def propose(self, state):
            draft = super().propose(state)
            captured.setdefault("first", (list(state.sequences[0]), draft))
            return draft

    # the model's own weights: the reference logits below come from transformers' fp32 forward
    drafter = Capture(LayerSkipOptions(skip=skip, max_draft=3, adaptive=False, draft_weights="model", **options))
    # (its own rule: priced at nominal costs, a self-draft running 2 of 3 layers would not pay, and q is what is
    # checked here, not the schedule)
    specdec.generate(model, [4, 5, 6, 7], drafter=drafter, verifier=verifier, max_new_tokens=4,
                     temperature=SAMPLED.temperature, top_k=SAMPLED.top_k, top_p=SAMPLED.top_p, seed=1,
                     controller=False)
    sequence, draft = captured["first"]
    assert draft.q is not None and draft.q.shape == (1, int(draft.num_nodes[0]), VOCAB)
    chain = sequence + draft.tokens[0].tolist()
    with torch.no_grad():
        skipped = plan_view(model, LayerPlan.build(model, skip.attention, skip.mlp))
        logits = skipped(torch.tensor([chain], device=model.device), use_cache=False).logits[0]
    return sequence, draft, logits


def test_sampled_drafts_return_the_exact_q() -> None:
    """q must be process_logits of the skipped model's logits, with the same sampling params."""
    sequence, draft, logits = _first_sampled_draft("exact")
    for i in range(int(draft.num_nodes[0])):
        expected = process_logits(logits[len(sequence) - 1 + i], SAMPLED)
        torch.testing.assert_close(draft.q[0, i], expected, atol=1e-5, rtol=1e-4)
        assert draft.q[0, i, draft.tokens[0, i]] > 0


def test_plan_view_leaves_the_model_alone() -> None:
    model = tiny_model("llama", layers=2)
    ids = torch.tensor([[1, 2, 3]], device=model.device)
    with torch.no_grad():
        reference = model(ids).logits
        skipped = plan_view(model, LayerPlan.build(model, [0, 1], [0, 1]))(ids).logits
        again = model(ids).logits
    assert not torch.allclose(reference, skipped)
    assert torch.equal(reference, again)
    assert "forward" not in model.model.layers[0].self_attn.__dict__


def test_skipping_everything_is_embedding_to_head() -> None:
    model = tiny_model("llama", layers=2)
    ids = torch.tensor([[1, 2, 3]], device=model.device)
    with torch.no_grad():
        logits = plan_view(model, LayerPlan.build(model, [0, 1], [0, 1]))(ids).logits
    expected = model.lm_head(model.model.norm(model.model.embed_tokens(ids)))
    torch.testing.assert_close(logits, expected)


def test_skip_set_for_another_model_is_refused(tmp_path) -> None:
    model_a, model_b = tiny_model("llama", seed=0), tiny_model("llama", seed=1)
    assert model_fingerprint(model_a) != model_fingerprint(model_b)
    path = save_skip_set(tmp_path / "skip.json", SkipSet(attention=(1,)), model_a)
    assert load_skip_set(path, model_a) == SkipSet(attention=(1,))
    with pytest.raises(DrafterError, match="another model"):
        specdec.generate(model_b, [1, 2, 3], drafter="layer_skip", drafter_options={"skip": str(path)},
                         max_new_tokens=4)


def test_nonexistent_layer_is_refused(tmp_path) -> None:
    model = tiny_model("llama", layers=2)
    with pytest.raises(DrafterError, match=r"mlp layer\(s\) \[5\] that do not exist"):
        specdec.generate(model, [1, 2, 3], drafter="layer_skip",
                         drafter_options={"skip": {"attention": [1], "mlp": [5]}}, max_new_tokens=4)
    # a file naming a missing layer, with the right fingerprint, is refused too
    path = save_skip_set(tmp_path / "skip.json", SkipSet(attention=(1,)), model)
    data = json.loads(path.read_text())
    data["attention"] = [2]
    path.write_text(json.dumps(data))
    with pytest.raises(DrafterError, match="do not exist"):
        specdec.generate(model, [1, 2, 3], drafter="layer_skip", drafter_options={"skip": str(path)},
                         max_new_tokens=4)
    with pytest.raises(PluginOptionsError, match=">= 0"):
        specdec.generate(model, [1, 2, 3], drafter="layer_skip", drafter_options={"skip": {"attention": [-1]}})


def test_missing_skip_set_and_unsupported_models() -> None:
    with pytest.raises(DrafterError, match="search-layers"):
        specdec.generate(tiny_model("llama"), [1, 2, 3], drafter="layer_skip", max_new_tokens=4)
    from transformers import OPTConfig, OPTForCausalLM

    opt = OPTForCausalLM(OPTConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, ffn_dim=64,
                                   num_attention_heads=2, max_position_embeddings=64, word_embed_proj_dim=32,
                                   do_layer_norm_before=False)).eval()
    with pytest.raises(UnsupportedModelError, match="post-LayerNorm"):
        LayerPlan.build(opt, [1], [])


def test_adaptive_update_rule() -> None:
    options = AdaptiveOptions()  # gamma0 .6, eps .01, beta1 .5, beta2 .9, alpha .9
    state = exit_rule(options, 0.6)
    state.update(drafted=4, accepted=1, drafted_full_length=False)  # AR = .25 <= alpha: raise
    assert state.rate == 0.25 and state.threshold == pytest.approx(0.601)
    state.update(drafted=4, accepted=4, drafted_full_length=False)  # AR = .625: still raise
    assert state.rate == pytest.approx(0.625) and state.threshold == pytest.approx(0.602)
    state.update(drafted=4, accepted=4, drafted_full_length=False)  # AR .8125: raise
    assert state.threshold == pytest.approx(0.603)
    state.update(drafted=4, accepted=4, drafted_full_length=False)  # AR .906 > alpha: lower
    assert state.rate == pytest.approx(0.90625) and state.threshold == pytest.approx(0.602)
    before = state.threshold
    state.update(drafted=12, accepted=12, drafted_full_length=True)  # at max length: unchanged
    assert state.threshold == before


def test_adaptive_exit_drafts_less_than_fixed() -> None:
    model = tiny_model("llama", layers=3)
    skip = {"attention": [1, 2], "mlp": [2]}
    fixed = specdec.generate(model, [5, 6, 7], drafter=_drafter(skip, max_draft=6, adaptive=False),
                             verifier="exact", max_new_tokens=24)
    adaptive = specdec.generate(model, [5, 6, 7], drafter=_drafter(skip, max_draft=6, gamma0=0.99),
                                verifier="exact", max_new_tokens=24)
    assert fixed.sequences == adaptive.sequences
    assert adaptive.stats.drafted_tokens / adaptive.stats.steps < fixed.stats.drafted_tokens / fixed.stats.steps


@CPU_ONLY  # the search's default draft weights are int8 copies on a CPU
def test_search_writes_loadable_file_and_resumes(tmp_path) -> None:
    model = tiny_model("llama", layers=2)
    prompts = [[1, 2, 3, 4], [9, 10]]
    settings = SearchSettings(max_new_tokens=6, max_draft=3)
    cache, out = tmp_path / "cache.json", tmp_path / "skip.json"
    kwargs = dict(settings=settings, cache_path=cache, out_path=out, init_points=1, retime_top=1, retime_repeats=1,
                  progress=False)
    first = search_skip_set(model, prompts, 2, **kwargs)
    assert load_skip_set(out, model) == first.skip
    timed = json.loads(cache.read_text())["evaluations"]
    assert len(first.history) == 2 and 1 <= len(timed) <= 2
    # the unset weight format was resolved for this device before timing, and recorded as such
    assert json.loads(cache.read_text())["settings"]["draft_weights"] == default_weight_format(model) == "int8"

    second = search_skip_set(model, prompts, 3, **kwargs)
    assert len(second.history) == 3
    assert [h["mask"] for h in second.history[:2]] == [h["mask"] for h in first.history]
    data = json.loads(cache.read_text())
    assert all(data["evaluations"][key] == value for key, value in timed.items())  # not re-timed
    # the shipped file is used by the drafter
    result = specdec.generate(model, [1, 2, 3], drafter="layer_skip", drafter_options={"skip": str(out)},
                              max_new_tokens=5)
    assert result.sequences[0] == hf_greedy(model, [1, 2, 3], 5)


def test_search_cli_rejects_cache_of_other_settings(tmp_path) -> None:
    model = tiny_model("llama", layers=2)
    settings = SearchSettings(max_new_tokens=4, max_draft=2)
    search_skip_set(model, [[1, 2, 3]], 1, settings=settings, cache_path=tmp_path / "c.json", init_points=0,
                    retime_top=1, retime_repeats=1, progress=False)
    with pytest.raises(ValueError, match="different settings"):
        search_skip_set(model, [[1, 2, 3]], 1, settings=SearchSettings(max_new_tokens=5, max_draft=2),
                        cache_path=tmp_path / "c.json", progress=False)
    with pytest.raises(SystemExit):
        main(["--help"])


@pytest.mark.parametrize("setting", ["t1.0", "t0.7-top_p0.9"])
def test_rejection_sampling_with_layer_skip_matches_target(setting: str) -> None:
    """Sampled self-drafts with their q, verified by rejection sampling, reproduce the target's joint
    distribution of 3 tokens (chi-square over 20k rows; adaptive exit makes chain lengths vary per row)."""
    from sampling_drafters import ContextLM, exact_joint, small_llama
    from test_distribution import PROMPT, ROWS, SETTINGS, STEPS, _generate_counts, chi_square_p_value

    target = small_llama(16, seed=0)
    params = SETTINGS[setting]
    joint = exact_joint(ContextLM(target), PROMPT, 16, STEPS, params)
    drafter = _drafter({"mlp": [0]}, max_draft=3, gamma0=0.3)
    counts, stats = _generate_counts(target, drafter, "rejection", params)
    # one-token prompt: the first draft forward allocates the cache through transformers' path, the
    # rest run the lean int8 forward, so q of both paths goes through rejection sampling here
    assert 0 < drafter.lean_forwards < drafter.draft_forwards
    assert stats.accepted_tokens > 0.5 * ROWS
    assert chi_square_p_value(counts, joint) > 1e-3


def test_skip_set_shipped_beside_the_model_is_the_default(tmp_path) -> None:
    model = tiny_model("llama", layers=2)
    model.save_pretrained(tmp_path / "model")
    loaded = type(model).from_pretrained(tmp_path / "model").eval()
    loaded.generation_config.eos_token_id = None
    save_skip_set(tmp_path / "model" / "layer_skip.json", SkipSet(attention=(1,), mlp=(1,)), loaded)
    drafter = LayerSkipDrafter()
    out = specdec.generate(loaded, [1, 2, 3], drafter=drafter, verifier="exact", max_new_tokens=6)
    assert drafter.skip_set == SkipSet(attention=(1,), mlp=(1,))
    assert out.sequences[0] == hf_greedy(loaded, [1, 2, 3], 6)


def test_a_kept_drafter_reads_the_skip_set_again_when_its_file_changes(tmp_path) -> None:
    # The skip-set file is read once per model (it carries a token ranking: ~1.5 ms a call to parse), and
    # again when it changes, e.g. after `specdec search-layers` wrote a better one.
    model = tiny_model("llama", layers=2)
    model.save_pretrained(tmp_path / "model")
    loaded = type(model).from_pretrained(tmp_path / "model").eval()
    loaded.generation_config.eos_token_id = None
    path = tmp_path / "model" / "layer_skip.json"
    save_skip_set(path, SkipSet(attention=(1,), mlp=(1,)), loaded)
    drafter = LayerSkipDrafter()
    for _ in range(2):
        specdec.generate(loaded, [1, 2, 3], drafter=drafter, verifier="exact", max_new_tokens=4)
        assert drafter.skip_set == SkipSet(attention=(1,), mlp=(1,))
    save_skip_set(path, SkipSet(attention=(0,), mlp=()), loaded)
    stamp = path.stat().st_mtime_ns
    os.utime(path, ns=(stamp + 10**9, stamp + 10**9))  # a later write, whatever the clock's resolution
    out = specdec.generate(loaded, [1, 2, 3], drafter=drafter, verifier="exact", max_new_tokens=6)
    assert drafter.skip_set == SkipSet(attention=(0,), mlp=())
    assert out.sequences[0] == hf_greedy(loaded, [1, 2, 3], 6)


def test_the_skip_set_file_is_read_once_per_model_across_drafters(tmp_path, monkeypatch) -> None:
    """`drafter="layer_skip"` makes a new drafter at every call: what the skip-set file says is kept per model
    and options (weakly), so later calls do not read it again."""
    import specdec.drafters.layerskip.drafter as drafter_module

    model = tiny_model("llama", layers=2)
    model.save_pretrained(tmp_path / "model")
    loaded = type(model).from_pretrained(tmp_path / "model").eval()
    loaded.generation_config.eos_token_id = None
    save_skip_set(tmp_path / "model" / "layer_skip.json", SkipSet(attention=(1,), mlp=(1,)), loaded)
    reads: list[Any] = []
    original = drafter_module.read_skip_file
    monkeypatch.setattr(drafter_module, "read_skip_file", lambda path: reads.append(path) or original(path))
    run = {"drafter": "layer_skip", "verifier": "exact", "max_new_tokens": 4}
    assert specdec.generate(loaded, [1, 2, 3], **run).sequences[0] == hf_greedy(loaded, [1, 2, 3], 4)
    first = len(reads)
    for _ in range(2):
        specdec.generate(loaded, [1, 2, 3], **run)
    assert first > 0 and len(reads) == first
    path = tmp_path / "model" / "layer_skip.json"
    specdec.generate(loaded, [1, 2, 3], drafter_options={"skip": str(path)}, **run)  # other options: read again
    assert len(reads) > first


# -- reduced draft vocabulary and the cost-model search ---------------------------------------
KEPT = list(range(0, VOCAB, 2)) + [VOCAB - 1]  # half the vocabulary, not a prefix


@pytest.mark.parametrize("arch", ARCHS)
def test_reduced_vocab_greedy_token_identical(arch: str) -> None:
    """The draft proposes only kept tokens; the full verifier keeps greedy output identical."""
    model = tiny_model(arch, layers=3)
    drafter = _drafter({"attention": [1], "mlp": [2]}, max_draft=4, draft_vocab=KEPT)
    seen: list[int] = []

    class Watch(LayerSkipDrafter):
        def propose(self, state):
            draft = super().propose(state)
            seen.extend(draft.tokens[0, : int(draft.num_nodes[0])].tolist())
            return draft

    watch = Watch(drafter.options)
    out = specdec.generate(model, [3, 14, 15, 92], drafter=watch, verifier="exact", max_new_tokens=20)
    assert out.sequences[0] == hf_greedy(model, [3, 14, 15, 92], 20)
    assert seen and set(seen) <= set(KEPT)


def test_reduced_vocab_q_is_the_subset_distribution() -> None:
    """Sampled q = process_logits over the kept tokens' logits, zero elsewhere (lossless rejection needs it)."""
    sequence, draft, logits = _first_sampled_draft("rejection", draft_vocab=KEPT)
    outside = torch.ones(VOCAB, dtype=torch.bool)
    outside[KEPT] = False
    for i in range(int(draft.num_nodes[0])):
        expected = process_logits(logits[len(sequence) - 1 + i, KEPT], SAMPLED)
        torch.testing.assert_close(draft.q[0, i, KEPT], expected, atol=1e-5, rtol=1e-4)
        assert float(draft.q[0, i, outside].abs().sum()) == 0.0
        assert draft.q[0, i, draft.tokens[0, i]] > 0


def test_rejection_sampling_with_reduced_vocab_matches_target() -> None:
    """A draft over 10 of 16 tokens, verified by rejection sampling, keeps the target's distribution."""
    from sampling_drafters import ContextLM, exact_joint, small_llama
    from test_distribution import PROMPT, ROWS, SETTINGS, STEPS, _generate_counts, chi_square_p_value

    target = small_llama(16, seed=0)
    params = SETTINGS["t1.0"]
    joint = exact_joint(ContextLM(target), PROMPT, 16, STEPS, params)
    drafter = _drafter({"mlp": [0]}, max_draft=3, gamma0=0.3, draft_vocab=[0, 2, 3, 5, 7, 8, 9, 11, 12, 15])
    counts, stats = _generate_counts(target, drafter, "rejection", params)
    assert stats.accepted_tokens > 0.2 * ROWS
    assert chi_square_p_value(counts, joint) > 1e-3


def test_draft_vocab_errors() -> None:
    model = tiny_model("llama", layers=2)
    with pytest.raises(DrafterError, match="token ranking"):
        specdec.generate(model, [1, 2, 3], drafter="layer_skip",
                         drafter_options={"skip": {"attention": [1]}, "draft_vocab": 8}, max_new_tokens=4)
    with pytest.raises(DrafterError, match="distinct token ids"):
        specdec.generate(model, [1, 2, 3], drafter="layer_skip",
                         drafter_options={"skip": {"attention": [1]}, "draft_vocab": [1, 1]}, max_new_tokens=4)


def test_rank_tokens_orders_by_frequency() -> None:
    from specdec.tools.rank_tokens import coverage, rank_tokens

    ranking = rank_tokens([[3, 3, 3, 1, 1, 2], [1, 3]], vocab_size=5)
    assert ranking == [3, 1, 2, 0, 4]  # 3 x4, 1 x3, 2 x1, then unseen by id
    assert coverage(ranking, 2, [3, 1, 2, 4]) == 0.5


def test_cost_objective_search_records_vocab_and_drafter_uses_it(tmp_path) -> None:
    model = tiny_model("llama", layers=2)
    prompts = [[1, 2, 3, 4], [9, 10]]
    ranking = list(range(VOCAB))[::-1]
    settings = SearchSettings(max_new_tokens=6, max_draft=3, objective="cost", draft_vocab=48)
    out = tmp_path / "skip.json"
    result = search_skip_set(model, prompts, 3, settings=settings, cache_path=tmp_path / "cache.json", out_path=out,
                             init_points=1, retime_top=2, retime_repeats=1, progress=False, ranking=ranking,
                             vocab_sizes=(0, 24))
    cache = json.loads((tmp_path / "cache.json").read_text())
    assert set(cache["cost_model"]["draft_fixed"]) == {"0", "24", "48"}
    assert all(0 < m["predicted_speedup"] for m in cache["evaluations"].values())
    # deterministic objective: the same mask always gets the same value
    again = search_skip_set(model, prompts, 3, settings=settings, cache_path=tmp_path / "other.json",
                            init_points=1, retime_top=1, retime_repeats=1, progress=False, ranking=ranking)
    assert [h["mask"] for h in again.history][:1] == [h["mask"] for h in result.history][:1]
    data = json.loads(out.read_text())
    assert data["token_ranking"] == ranking and data["draft_vocab"] in (0, 24, 48)
    drafter = LayerSkipDrafter(LayerSkipOptions(skip=str(out)))
    got = specdec.generate(model, [1, 2, 3], drafter=drafter, verifier="exact", max_new_tokens=8)
    assert got.sequences[0] == hf_greedy(model, [1, 2, 3], 8)
    expected = None if data["draft_vocab"] == 0 else ranking[: data["draft_vocab"]]
    assert (drafter.head_tokens is None if expected is None else drafter.head_tokens.tolist() == expected)
