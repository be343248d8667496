"""The draft_model drafter: greedy equality (chain, tree, batch), schedules, q, vocabulary checks,
its own cache (no re-prefill, rows leaving the batch, release)."""

from __future__ import annotations

import copy
import gc
import math
import os
import weakref

import pytest
import torch
from conftest import VOCAB, hf_greedy, tiny_model
from specdec.drafters.draft_model import DraftModelDrafter, tree_levels
from specdec.drafters.draft_schedule import ConfidenceExit, HeuristicLength

import specdec
from specdec.chain_exit import ChainExit
from specdec.costs import DRAFT_FEATURES, CostModel, LinearFit, draft_features
from specdec.draft import Verdict
from specdec.errors import DrafterError, PluginOptionsError
from specdec.sampling import SamplingParams, process_logits

NEW = 16
PROMPTS = [[5, 6, 7, 8, 9], [1, 2, 3], [4, 17, 33, 60, 2, 9, 71, 12, 40, 3, 88]]


@pytest.fixture(scope="module")
def target():
    return tiny_model("llama")


@pytest.fixture(scope="module")
def expected(target):
    return [hf_greedy(target, prompt, NEW) for prompt in PROMPTS]


def noisy_copy(model, scale: float = 0.001, seed: int = 7):
    """A draft that agrees with the target on most (not all) greedy tokens: accepts and rejects."""
    draft = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in draft.parameters():
            param.add_(scale * torch.randn(param.shape, generator=generator).to(param))  # the same noise on any device
    return draft


@pytest.fixture(scope="module")
def close_draft(target):
    return noisy_copy(target)


def _run(target, prompts, max_new_tokens=NEW, **options):
    # controller=False: these tests check the drafter's own drafts and schedules, every draft verified
    return specdec.generate(target, prompts, drafter="draft_model", drafter_options=options, verifier="exact",
                            max_new_tokens=max_new_tokens, controller=False)


@pytest.mark.parametrize("options", [
    dict(k=4),
    dict(k=3, schedule="heuristic"),
    dict(k=5, schedule="confidence", confidence_threshold=0.05, adaptive_threshold=True),
    dict(k=4, branches=2),
    dict(k=3, branches=2, branch_depth=2),
])
def test_greedy_batch_matches_transformers(target, expected, close_draft, options):
    out = _run(target, PROMPTS, model=close_draft, **options)
    assert out.sequences == expected
    assert out.stats.accepted_tokens > 0  # the test exercises accepted drafts, not only bonus tokens
    assert out.stats.accepted_tokens < out.stats.drafted_tokens  # ... and rejected ones


@pytest.mark.parametrize("branches", [1, 2])
def test_greedy_with_an_unrelated_draft_of_the_same_vocab(target, expected, branches):
    out = _run(target, PROMPTS[:2], model=tiny_model("llama", seed=1), k=3, branches=branches)
    assert out.sequences == expected[:2]


def test_single_prompts_match(target, expected, close_draft):
    for prompt, reference in zip(PROMPTS, expected):
        assert _run(target, prompt, model=close_draft, k=4, branches=2).sequences[0] == reference


def test_rows_leaving_the_batch(target, close_draft):
    """Rows stop at different steps (eos); the draft cache must follow the surviving rows."""
    long_run = [hf_greedy(target, prompt, 24) for prompt in PROMPTS]
    eos = long_run[0][5]
    want = [seq[: seq.index(eos) + 1] if eos in seq else seq for seq in long_run]
    for branches in (1, 2):
        out = specdec.generate(target, PROMPTS, drafter="draft_model", verifier="exact", max_new_tokens=24,
                               eos_token_id=eos, drafter_options=dict(model=close_draft, k=3, branches=branches))
        assert out.sequences == want
        assert "eos" in out.finish_reasons


def test_no_reprefill_and_cache_released(target, close_draft):
    fed = []
    handle = close_draft.model.embed_tokens.register_forward_hook(lambda mod, inp, out: fed.append(inp[0].numel()))
    try:
        drafter = DraftModelDrafter(DraftModelDrafter.Options(model=close_draft, k=4))
        # controller=False: the drafter's own rule, so the draft model certainly drafts (whether drafting
        # pays on this tiny pair is the controller's call, and a close one).
        out = specdec.generate(target, PROMPTS[0], drafter=drafter, verifier="exact", max_new_tokens=40,
                               controller=False)
    finally:
        handle.remove()
    stats = out.stats
    # prompt once + each committed token at most once + each drafted token at most once
    assert sum(fed) <= len(PROMPTS[0]) + stats.new_tokens + stats.drafted_tokens
    assert drafter._runner is None  # finish() released the draft cache
    assert stats.drafter_stats["draft_cache_peak_bytes"] > 0
    assert stats.drafter_stats["draft_forwards"] == len(fed) - 1  # every forward but the prefill


def test_heuristic_schedule_grows_and_shrinks(target):
    perfect = _run(target, PROMPTS[0], max_new_tokens=40, model=target, k=2, schedule="heuristic")
    assert perfect.stats.drafted_per_step[:4] == [2, 4, 6, 8]  # +2 after every fully accepted round
    poor = _run(target, PROMPTS[0], max_new_tokens=12, model=tiny_model("llama", seed=3), k=5,
                schedule="heuristic", min_k=1)  # transformers' floor
    drafted = poor.stats.drafted_per_step
    assert drafted[0] == 5 and drafted[-1] < 5  # -1 after a rejection
    assert all(b in (a - 1, a + 2) or b == 1 for a, b in zip(drafted, drafted[1:]))

    schedule = HeuristicLength(initial=3, ceiling=6)
    schedule.update(0, drafted=3, accepted=3)
    schedule.update(0, drafted=5, accepted=5)
    assert schedule.length(0) == 6  # capped
    for _ in range(9):
        schedule.update(0, drafted=2, accepted=0)
    assert schedule.length(0) == 1 and schedule.length(1) == 3  # floor 1; rows are independent


def test_confidence_exit(target):
    never = _run(target, PROMPTS[0], model=target, k=4, schedule="confidence", confidence_threshold=1.0)
    assert set(never.stats.drafted_per_step) == {1}  # the first token is always proposed, then exit
    always = _run(target, PROMPTS[0], model=target, k=4, schedule="confidence", confidence_threshold=0.0)
    assert always.stats.drafted_per_step[:3] == [4, 4, 4]


def test_a_chain_ends_at_a_drafted_eos(target, expected):
    """Nothing drafted past an eos can be committed: a perfect 8-token draft of a text ending at its
    10th token drafts 8 + 1 tokens, not 16."""
    reference = expected[1]
    eos = next(t for i, t in enumerate(reference) if i >= 9 and t not in reference[:i])
    end = reference.index(eos) + 1
    out = specdec.generate(target, PROMPTS[1], drafter="draft_model", drafter_options=dict(model=target, k=8),
                           verifier="exact", max_new_tokens=NEW, eos_token_id=eos, controller=False)
    assert out.sequences[0] == reference[:end]
    assert out.stats.acceptance_rate == 1.0
    assert out.stats.drafted_tokens <= end


def test_adaptive_threshold_update_rule():
    exit_rule = ConfidenceExit(0.6, adaptive=True, target_acceptance=0.8, step=0.01, rate_smoothing=0.5,
                               threshold_smoothing=0.9)
    exit_rule.update(drafted=4, accepted=1, drafted_full_length=False)  # AR = 0.25 <= alpha: raise
    assert exit_rule.rate == pytest.approx(0.25)
    assert exit_rule.threshold == pytest.approx(0.6 + 0.001)
    exit_rule.update(drafted=2, accepted=2, drafted_full_length=False)  # AR = 0.625: still raise
    assert exit_rule.rate == pytest.approx(0.625)
    assert exit_rule.threshold == pytest.approx(0.602)
    exit_rule.rate = 0.95
    exit_rule.update(drafted=12, accepted=12, drafted_full_length=True)  # high AR at full K: unchanged
    assert exit_rule.threshold == pytest.approx(0.602)
    exit_rule.update(drafted=3, accepted=3, drafted_full_length=False)  # high AR, short draft: lower
    assert exit_rule.threshold == pytest.approx(0.601)


class RecordingDrafter(DraftModelDrafter):
    def setup(self, context):
        super().setup(context)
        self.drafts = []

    def propose(self, state):
        draft = super().propose(state)
        self.drafts.append(([list(s) for s in state.sequences], draft))
        return draft


@pytest.mark.parametrize("branches", [1, 2])
def test_q_is_the_processed_draft_distribution(target, close_draft, branches):
    sampling = SamplingParams(temperature=0.8, top_k=20, top_p=0.9)
    # the fp32 weights, so q can be compared with the model run here (int8 q is covered by test_distribution)
    drafter = RecordingDrafter(DraftModelDrafter.Options(model=close_draft, k=3, branches=branches,
                                                         draft_weights="model"))
    specdec.generate(target, PROMPTS[:2], drafter=drafter, verifier="rejection", max_new_tokens=8, seed=0,
                     temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p,
                     controller=False)  # every step drafts: q is checked on real drafts
    checked = 0
    for sequences, draft in drafter.drafts[:3]:
        assert draft.q is not None
        for b, sequence in enumerate(sequences):
            for i in range(int(draft.num_nodes[b])):
                path, node = [], i
                while node >= 0:
                    path.insert(0, int(draft.tokens[b, node]))
                    node = int(draft.parents[b, node])
                with torch.no_grad():
                    logits = close_draft(torch.tensor([sequence + path[:-1]])).logits[0, -1]
                q = draft.q[b, i]
                assert torch.allclose(q, process_logits(logits, sampling), atol=1e-5)
                assert q.sum().item() == pytest.approx(1.0, abs=1e-5) and q[path[-1]] > 0
                checked += 1
    assert checked > 0


def test_greedy_drafts_are_deterministic(target, close_draft):
    drafter = RecordingDrafter(DraftModelDrafter.Options(model=close_draft, k=3))
    specdec.generate(target, PROMPTS[0], drafter=drafter, verifier="exact", max_new_tokens=6)
    assert all(draft.q is None for _, draft in drafter.drafts)


def _word_tokenizer(tokens: list[str]):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(WordLevel({tok: i for i, tok in enumerate(tokens)}, unk_token=tokens[0]))
    backend.pre_tokenizer = Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token=tokens[0])


def test_vocabulary_mismatch_is_refused_before_generation(target):
    words = [f"w{i}" for i in range(VOCAB)]
    same, shuffled = _word_tokenizer(words), _word_tokenizer(words[1:] + words[:1])
    draft = tiny_model("llama", seed=1)
    with pytest.raises(DrafterError, match="tokenizers differ"):
        specdec.generate(target, [1, 2, 3], tokenizer=same, drafter="draft_model", verifier="exact",
                         drafter_options=dict(model=draft, tokenizer=shuffled), max_new_tokens=4)
    bigger = tiny_model("llama", vocab=VOCAB + 32, seed=1)
    with pytest.raises(DrafterError, match="output sizes differ"):
        _run(target, [1, 2, 3], max_new_tokens=4, model=bigger)
    with pytest.raises(DrafterError, match="special token ids differ"):
        _run(target, [1, 2, 3], max_new_tokens=4, model=tiny_model("llama", seed=1, eos_token_id=7))
    with pytest.raises(PluginOptionsError, match="model must be"):
        _run(target, [1, 2, 3], max_new_tokens=4, model=42)
    with pytest.raises(PluginOptionsError, match="adaptive_threshold"):
        _run(target, [1, 2, 3], max_new_tokens=4, model=draft, adaptive_threshold=True)


def test_a_kept_drafter_checks_the_same_pair_once_and_a_changed_pair_again(target, monkeypatch):
    """Comparing two tokenizers' vocabularies costs ~5 ms a call (5% of a 64-token call on a small pair): a
    drafter kept across calls checks the same objects once, and checks again whatever changed."""
    import specdec.drafters.draft_model as module

    checks = []
    real = module.resolve_vocab
    monkeypatch.setattr(module, "resolve_vocab", lambda *args: checks.append(args) or real(*args))
    words = [f"w{i}" for i in range(VOCAB)]
    tokenizer, draft_tokenizer = _word_tokenizer(words), _word_tokenizer(words)
    drafter = DraftModelDrafter(DraftModelDrafter.Options(model=tiny_model("llama", seed=1),
                                                          tokenizer=draft_tokenizer, k=2))
    for _ in range(3):
        specdec.generate(target, [1, 2, 3], tokenizer=tokenizer, drafter=drafter, verifier="exact", max_new_tokens=3)
    assert len(checks) == 1
    draft_tokenizer.add_tokens(["extra"])  # the same object, grown: its vocabulary no longer matches
    with pytest.raises(DrafterError, match="tokenizers differ"):
        specdec.generate(target, [1, 2, 3], tokenizer=tokenizer, drafter=drafter, verifier="exact", max_new_tokens=3)
    shuffled = _word_tokenizer(words[1:] + words[:1])  # another object
    with pytest.raises(DrafterError, match="tokenizers differ"):
        specdec.generate(target, [1, 2, 3], tokenizer=shuffled, drafter=drafter, verifier="exact", max_new_tokens=3)
    assert len(checks) == 3
    fresh_draft = _word_tokenizer(words)  # a matching pair again: checked, kept, then dropped by the caller
    drafter.options.tokenizer = fresh_draft
    specdec.generate(target, [1, 2, 3], tokenizer=tokenizer, drafter=drafter, verifier="exact", max_new_tokens=3)
    assert len(checks) == 4
    checks.clear()
    drafter.options.tokenizer = None
    gone = weakref.ref(fresh_draft)
    del fresh_draft
    gc.collect()
    assert gone() is None  # the kept drafter does not keep the caller's tokenizer alive


def test_extra_unused_rows_are_mapped_explicitly(target, expected):
    """A draft padded with unused rows at the end drafts for the target (and vice versa)."""
    words = [f"w{i}" for i in range(VOCAB)]
    tokenizer = _word_tokenizer(words)
    padded_draft = tiny_model("llama", vocab=VOCAB + 32, seed=1)
    out = specdec.generate(target, PROMPTS[0], tokenizer=tokenizer, drafter="draft_model", verifier="exact",
                           drafter_options=dict(model=padded_draft, tokenizer=tokenizer, k=3), max_new_tokens=NEW)
    assert out.sequences[0] == expected[0]
    assert "96 shared ids" in out.stats.drafter_stats["draft_vocab"]
    out = _run(target, PROMPTS[0], model=padded_draft, shared_vocab_size=VOCAB, k=3)
    assert out.sequences[0] == expected[0]
    padded_target = tiny_model("llama", vocab=VOCAB + 32)
    out = _run(padded_target, PROMPTS[0], model=tiny_model("llama", seed=1), shared_vocab_size=VOCAB, k=3,
               branches=2)
    assert out.sequences[0] == hf_greedy(padded_target, PROMPTS[0], NEW)


def test_tree_shape_and_node_budget(target):
    assert tree_levels(2, 1, 3) == [[-1, -1], [0, 1], [2, 3]]
    assert tree_levels(2, 2, 3) == [[-1, -1], [0, 0, 1, 1], [2, 3, 4, 5]]
    with pytest.raises(DrafterError, match="max_draft_nodes"):
        specdec.generate(target, [1, 2, 3], drafter="draft_model", verifier="exact", max_new_tokens=4,
                         drafter_options=dict(model=target, k=8, branches=4, branch_depth=3), max_draft_nodes=64)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "mistral"])
def test_fast_forward_matches_transformers_forward(arch):
    """The fused draft forward (specdec/lean_forward.py) computes what transformers' forward computes
    on the same ragged cache: logits, cache contents, and a subset of rows run alone."""
    from specdec.lean_forward import fast_forward_for
    from specdec.target import TargetRunner

    model = tiny_model(arch, seed=2)
    fast = fast_forward_for(model)
    assert fast is not None
    lengths = torch.tensor([9, 4, 7])
    prompt = torch.randint(1, VOCAB, (3, 9), generator=torch.Generator().manual_seed(0))
    chain = torch.randint(1, VOCAB, (3, 3), generator=torch.Generator().manual_seed(1))
    reference, ours = TargetRunner(model, 3, 32), TargetRunner(model, 3, 32)
    with torch.inference_mode():
        for runner in (reference, ours):
            runner.prefill(prompt, lengths)
        expected = reference.scratch_forward(chain)
        positions = lengths[:, None] + torch.arange(3)[None, :]
        got = fast(ours.cache, chain, ours.write_start, positions)
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
        last = fast(ours.cache, chain, ours.write_start, positions, keep=torch.tensor([2, 0, 1]))
        torch.testing.assert_close(last, expected[torch.arange(3), torch.tensor([2, 0, 1])], atol=1e-4, rtol=1e-4)
        for ref_layer, layer in zip(reference.cache.layers, ours.cache.layers):
            for row, length in enumerate(lengths.tolist()):
                torch.testing.assert_close(layer.keys[row, :, : length + 3], ref_layer.keys[row, :, : length + 3])
        # one more token for rows 0 and 2 only (row 1 stopped drafting)
        step = torch.tensor([[5], [6], [7]])
        expected = reference.scratch_forward(step, offset=3)[:, -1]
        rows = torch.tensor([0, 2])
        got = fast(ours.cache, step[rows], ours.write_start[rows] + 3, lengths[rows, None] + 3, rows=rows)[:, -1]
        torch.testing.assert_close(got, expected[rows], atol=1e-4, rtol=1e-4)
    assert fast_forward_for(tiny_model("gpt2")) is None  # other architectures use transformers' forward


@pytest.mark.parametrize("fast_forward", [True, False])
def test_fast_forward_on_and_off_give_greedy_output(target, expected, close_draft, fast_forward):
    out = _run(target, PROMPTS, model=close_draft, fast_forward=fast_forward)
    assert out.sequences == expected


@pytest.mark.parametrize("weights", ["int8", "float16"])
def test_draft_weight_formats_keep_greedy_output(target, expected, close_draft, weights):
    out = _run(target, PROMPTS, model=close_draft, draft_weights=weights)
    assert out.sequences == expected
    assert out.stats.accepted_tokens > 0
    with pytest.raises(PluginOptionsError):
        _run(target, PROMPTS, model=close_draft, draft_weights="int4")


@pytest.mark.parametrize("schedule", ["heuristic", "confidence"])
def test_batched_rows_draft_exactly_as_alone(target, close_draft, schedule):
    """Rows that stop drafting early are left out of later greedy draft forwards (the fast path's
    active-rows subset); their last drafted token is then not in the draft cache. Regression: the
    draft cache once counted it as cached when accepted, so drafts in a batch read a stale slot and
    differed from the same prompt alone (the output stayed correct, acceptance fell)."""
    options = dict(model=close_draft, k=4, schedule=schedule, confidence_threshold=0.5)
    batch = _run(target, PROMPTS, max_new_tokens=24, **options).stats
    alone = [_run(target, [prompt], max_new_tokens=24, **options).stats for prompt in PROMPTS]
    assert len(set(batch.row_drafted)) > 1  # rows really drafted different amounts
    assert batch.row_drafted == [stats.row_drafted[0] for stats in alone]
    assert batch.row_accepted == [stats.row_accepted[0] for stats in alone]


def test_default_policy_is_the_goodput_controller_and_the_tuned_heuristic_stays():
    """The default is the core goodput controller; the heuristic measured best on held-out text before
    it (benchmarks/results/draft_model) is one option away, with its tuned k and floor."""
    options = DraftModelDrafter.Options()
    assert (options.schedule, options.k, options.min_k) == ("goodput", 3, 0)
    assert DraftModelDrafter(options).controlled()
    assert not DraftModelDrafter(DraftModelDrafter.Options(schedule="heuristic")).controlled()


def test_heuristic_floor_zero_decodes_plainly_then_probes(target, expected):
    schedule = HeuristicLength(initial=1, ceiling=6, floor=0, probe_after=2)
    schedule.update(0, drafted=1, accepted=0)
    assert schedule.length(0) == 0
    schedule.update(0, drafted=0, accepted=0)
    assert schedule.length(0) == 0
    schedule.update(0, drafted=0, accepted=0)
    assert schedule.length(0) == 1  # probe
    out = _run(target, PROMPTS, model=tiny_model("llama", seed=3), k=1, min_k=0, probe_after=2, schedule="heuristic")
    assert out.sequences == expected
    assert out.stats.drafted_tokens < NEW * len(PROMPTS)  # some steps drafted nothing


# -- reduced draft vocabulary (draft_vocab, drafters/token_ranking.py) ---------------------------
KEPT = [0, 3, 5, 6, 7, 8, 9, 12, 17, 33, 40, 60, 71, 88, 90, 95]


class ProposalRecorder(DraftModelDrafter):
    def __init__(self, options=None):
        super().__init__(options)
        self.proposed: set[int] = set()

    def propose(self, state):
        draft = super().propose(state)
        mask = draft.node_mask().cpu()
        self.proposed |= set(draft.tokens.cpu()[mask].tolist())
        return draft


@pytest.mark.parametrize("options", [dict(k=3), dict(k=3, fast_forward=False), dict(k=3, branches=2),
                                     dict(k=4, schedule="confidence", confidence_threshold=0.3)])
def test_reduced_draft_vocab_proposes_only_kept_tokens(target, expected, close_draft, options):
    drafter = ProposalRecorder(DraftModelDrafter.Options(model=close_draft, draft_vocab=KEPT, **options))
    out = specdec.generate(target, PROMPTS, drafter=drafter, verifier="exact", max_new_tokens=NEW, controller=False)
    assert out.sequences == expected
    assert drafter.proposed and drafter.proposed <= set(KEPT)
    assert out.stats.drafter_stats["draft_head_tokens"] == len(KEPT)


def test_reduced_vocab_q_is_zero_outside_the_kept_tokens(target, close_draft):
    sampling = SamplingParams(temperature=0.8)
    drafter = RecordingDrafter(DraftModelDrafter.Options(model=close_draft, k=3, draft_vocab=KEPT,
                                                         draft_weights="model"))
    specdec.generate(target, PROMPTS[:2], drafter=drafter, verifier="rejection", max_new_tokens=8, seed=0,
                     temperature=sampling.temperature, controller=False)
    outside = torch.ones(VOCAB, dtype=torch.bool)
    outside[KEPT] = False
    sequence, draft = drafter.drafts[0]
    with torch.no_grad():
        logits = close_draft(torch.tensor([sequence[0]])).logits[0, -1]
    torch.testing.assert_close(draft.q[0, 0, KEPT], process_logits(logits[KEPT], sampling), atol=1e-5, rtol=1e-4)
    assert float(draft.q[..., outside].abs().sum()) == 0.0


def _saved_draft(tmp_path, model):
    model.save_pretrained(tmp_path)
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tmp_path).eval()


def test_ranking_file_beside_the_draft_sets_the_default_vocab(tmp_path, target, expected, close_draft):
    from specdec.drafters.token_ranking import read_ranking_file

    from specdec.tools.rank_tokens import save_ranking_file

    draft = _saved_draft(tmp_path, close_draft)
    ranking = KEPT + [t for t in range(VOCAB) if t not in KEPT]
    save_ranking_file(tmp_path, ranking, len(KEPT), "test")
    assert read_ranking_file(draft)["ranking"] == ranking
    for choice, size in [(None, len(KEPT)), (8, 8), (0, None), (VOCAB, None)]:
        drafter = ProposalRecorder(DraftModelDrafter.Options(model=draft, draft_vocab=choice))
        out = specdec.generate(target, PROMPTS, drafter=drafter, verifier="exact", max_new_tokens=NEW)
        assert out.sequences == expected
        assert out.stats.drafter_stats["draft_head_tokens"] == size
        if size is not None:
            assert drafter.proposed <= set(ranking[:size])


def test_a_kept_drafter_reads_the_ranking_file_again_when_it_changes(tmp_path, target, expected, close_draft):
    from specdec.drafters.token_ranking import RANKING_FILE

    from specdec.tools.rank_tokens import save_ranking_file

    draft = _saved_draft(tmp_path, close_draft)
    ranking = KEPT + [t for t in range(VOCAB) if t not in KEPT]
    save_ranking_file(tmp_path, ranking, len(KEPT), "test")
    drafter = DraftModelDrafter(DraftModelDrafter.Options(model=draft))
    for _ in range(2):
        out = specdec.generate(target, PROMPTS, drafter=drafter, verifier="exact", max_new_tokens=NEW)
        assert out.stats.drafter_stats["draft_head_tokens"] == len(KEPT)
    save_ranking_file(tmp_path, ranking, 8, "test")
    stamp = (tmp_path / RANKING_FILE).stat().st_mtime_ns
    os.utime(tmp_path / RANKING_FILE, ns=(stamp + 10**9, stamp + 10**9))  # a later write
    out = specdec.generate(target, PROMPTS, drafter=drafter, verifier="exact", max_new_tokens=NEW)
    assert out.stats.drafter_stats["draft_head_tokens"] == 8 and out.sequences == expected


def test_draft_vocab_errors(tmp_path, target, close_draft):
    from specdec.tools.rank_tokens import save_ranking_file

    with pytest.raises(DrafterError, match="token ranking"):
        _run(target, PROMPTS[:1], model=close_draft, draft_vocab=8)  # no file beside an in-memory model
    with pytest.raises(DrafterError, match="distinct token ids"):
        _run(target, PROMPTS[:1], model=close_draft, draft_vocab=[1, 1])
    with pytest.raises(DrafterError, match="distinct token ids"):
        _run(target, PROMPTS[:1], model=close_draft, draft_vocab=[VOCAB])
    with pytest.raises(ValueError, match="every token id exactly once"):
        save_ranking_file(tmp_path, [0, 0, 1], 2, "test")
    draft = _saved_draft(tmp_path, close_draft)
    save_ranking_file(tmp_path, list(range(VOCAB // 2)), 8, "a ranking of another vocabulary")
    with pytest.raises(DrafterError, match="not a specdec.token_ranking/1 ranking"):
        _run(target, PROMPTS[:1], model=draft)


def test_rank_tokens_command_writes_the_file(tmp_path):
    """`specdec rank-tokens` on a model directory with a tokenizer (the bundled one, a tiny model)."""
    import collections
    import json

    from transformers import AutoTokenizer

    from specdec.cli import main
    from specdec.zoo import default_model_dir

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir() / "target")
    tokenizer.save_pretrained(tmp_path)
    tiny_model("llama", vocab=len(tokenizer)).config.save_pretrained(tmp_path)
    text = tmp_path / "train.txt"
    text.write_text("the cat sat on the mat; the cat sat.\n" * 5)
    assert main(["rank-tokens", "--model", str(tmp_path), "--vocab-files", str(text), "--draft-vocab", "64"]) == 0
    data = json.loads((tmp_path / "token_ranking.json").read_text())
    assert data["draft_vocab"] == 64 and sorted(data["ranking"]) == list(range(len(tokenizer)))
    counts = collections.Counter(tokenizer(text.read_text(), add_special_tokens=False)["input_ids"])
    assert data["ranking"][: len(counts)] == sorted(counts, key=lambda t: (-counts[t], t))


def test_fast_forward_rope_table_matches_the_rotary_module():
    """The lean forward looks cos/sin up in a table the model's rotary module filled; it must give
    the module's values at any position, including ones past the first table size."""
    from specdec.lean_forward import fast_forward_for

    model = tiny_model("llama", seed=3)
    fast = fast_forward_for(model)
    hidden = torch.zeros(1, 1, 64)
    for positions in (torch.tensor([[0, 5, 17]]), torch.tensor([[255, 300, 1000]]), torch.tensor([[2, 3, 4]])):
        cos, sin = fast._cos_sin(hidden, positions)
        ref_cos, ref_sin = model.model.rotary_emb(hidden, positions)
        torch.testing.assert_close(cos[:, :, 0], ref_cos, atol=0, rtol=0)
        torch.testing.assert_close(sin[:, :, 0], ref_sin, atol=0, rtol=0)


def slow_draft_costs() -> CostModel:
    """A cost model in which every draft_model draft has been measured at a second: never worth asking."""
    costs = CostModel("cpu")
    slow = LinearFit(DRAFT_FEATURES)
    for nodes in (1, 2, 4, 8):
        slow.update(draft_features(nodes, nodes), 1.0)
    costs.live.drafters["draft_model"] = slow
    return costs


def test_prefill_waits_for_the_first_draft(target, close_draft, expected):
    # The controller never asks a draft measured far too slow: its cache is never prefilled.
    out = specdec.generate(target, PROMPTS[2], drafter="draft_model", drafter_options=dict(model=close_draft),
                           max_new_tokens=NEW, cost_model=slow_draft_costs())
    assert out.sequences == [expected[2]]
    assert out.stats.no_draft_row_steps == out.stats.steps
    assert out.stats.drafter_stats["draft_cache_peak_bytes"] == 0
    assert out.stats.drafter_stats["draft_forwards"] == 0
    # Rows joining a batch before any draft (continuous batching) are only noted, and still never prefilled.
    out = specdec.generate(target, PROMPTS, drafter="draft_model", drafter_options=dict(model=close_draft),
                           max_new_tokens=NEW, max_batch_size=2, cost_model=slow_draft_costs())
    assert out.sequences == expected
    assert out.stats.drafter_stats["draft_cache_peak_bytes"] == 0
    # Asked to draft, it prefills at its first draft (timed as setup) and the output is the same.
    out = specdec.generate(target, PROMPTS[2], drafter="draft_model", drafter_options=dict(model=close_draft),
                           max_new_tokens=NEW, cost_model=CostModel("cpu"))
    assert out.sequences == [expected[2]]
    assert out.stats.drafter_stats["draft_cache_peak_bytes"] > 0 and out.stats.drafted_tokens > 0


def _chain_drafts(target, draft, prompts, budgets, draft_exit=None, keep=None, **options):
    """Greedy drafts of a chain draft_model over steps of per-row budgets (the controller's `draft_budget`),
    each step committing the draft as if all of it were accepted plus token 1. Returns the drafter and the
    drafts per step, as lists of tokens per row (`keep`: a list that also gets each step's Draft)."""
    from specdec.plugins import DecodeState, GenerationContext
    from specdec.rng import RowGenerators
    from specdec.sampling import SamplingParams

    drafter = DraftModelDrafter(DraftModelDrafter.Options(model=draft, k=3, **options))
    generators = RowGenerators.seeded([0] * len(prompts))
    drafter.setup(GenerationContext(model=target, tokenizer=None, sampling=SamplingParams(), generator=generators,
                                    prompts=[list(p) for p in prompts], max_new_tokens=32, vocab_size=VOCAB,
                                    device=torch.device("cpu"), max_draft_nodes=64, rows=list(range(len(prompts))),
                                    goodput=True))
    sequences = [list(p) for p in prompts]
    drafts = []
    for budget in budgets:
        state = DecodeState(row_ids=list(range(len(prompts))), sequences=[list(s) for s in sequences],
                            max_depth=torch.full((len(prompts),), 16), sampling=SamplingParams(),
                            generator=generators, target=None, draft_budget=torch.tensor(budget),
                            draft_exit=draft_exit)
        drafter.prepare(state)
        draft = drafter.propose(state)
        if keep is not None:
            keep.append(draft)
        rows = [draft.tokens[b, : int(draft.num_nodes[b])].tolist() for b in range(len(prompts))]
        drafts.append(rows)
        committed = [row + [1] for row in rows]
        path = torch.full((len(prompts), max(draft.width, 1)), -1, dtype=torch.long)
        for b, row in enumerate(rows):
            path[b, : len(row)] = torch.arange(len(row))
        drafter.observe(state, draft, Verdict(path, torch.tensor([len(r) for r in rows]),
                                              torch.ones(len(prompts), dtype=torch.long)), committed, None)
        for sequence, new in zip(sequences, committed):
            sequence.extend(new)
    return drafter, drafts


def test_rows_kept_plain_in_a_batch_are_not_prefilled_and_draft_as_alone_when_first_asked(target, close_draft):
    """A chain draft model works only on the rows asked to draft: the others are neither prefilled nor caught
    up (in a batch where one row drafted, prefilling every row cost 5% of a continuous run on this CPU). A row
    first asked later gets its prompt and every token since fed then, and drafts exactly as it would alone."""
    budgets = [[3, 0, 0], [3, 0, 0], [0, 3, 0], [3, 3, 3]]
    drafter, drafts = _chain_drafts(target, close_draft, PROMPTS, budgets)
    assert [bool(r) for r in drafts[0]] == [True, False, False] and [bool(r) for r in drafts[2]] == [False, True, False]
    for row in range(len(PROMPTS)):
        alone_budgets = [[b[row]] for b in budgets]
        _, alone = _chain_drafts(target, close_draft, [PROMPTS[row]], alone_budgets)
        assert [step[row] for step in drafts] == [step[0] for step in alone]
    assert drafter._ready == [True, True, True]
    # After the first two steps only row 0 was in the draft's cache.
    early, _ = _chain_drafts(target, close_draft, PROMPTS, budgets[:2])
    assert early._ready == [True, False, False]
    assert int(early._runner.lengths[1]) == 0 and int(early._runner.lengths[2]) == 0


class _StopAt(ChainExit):
    """An exit that stops row b after `stops[b]` drafted nodes, recording what the drafter asked."""

    def __init__(self, stops: list[int]) -> None:
        super().__init__(len(stops), lambda b: None)
        self.stops = stops
        self.asked: list[tuple[int, list[float], list[bool]]] = []

    def keep_drafting(self, depth, scores, rows=None):
        self.asked.append((depth, [float(s) for s in scores], list(rows)))
        return [depth < stop for stop in self.stops]


def test_the_controllers_exit_stops_a_chain_where_it_says_and_reads_the_drafts_confidence(target, close_draft):
    """Under the controller a chain asks the exit after every drafted depth with each row's confidence in its
    last token (the draft's probability of it), stops a row where the exit says so, never changes the tokens
    it drafts, and hands the cut each node's path confidence."""
    budgets = [[6, 6, 6]]
    _, plain = _chain_drafts(target, close_draft, PROMPTS, budgets, draft_weights="model")
    stop = _StopAt([1, 3, 6])
    drafts: list = []
    _, stopped = _chain_drafts(target, close_draft, PROMPTS, budgets, stop, drafts, draft_weights="model")
    assert [len(row) for row in plain[0]] == [6, 6, 6]
    assert stopped[0] == [plain[0][0][:1], plain[0][1][:3], plain[0][2]]
    assert [depth for depth, _, _ in stop.asked] == [1, 2, 3, 4, 5]  # never after the last depth
    assert [rows for depth, _, rows in stop.asked if depth == 2] == [[False, True, True]]  # row 0 stopped at 1
    with torch.no_grad():
        for b, prompt in enumerate(PROMPTS):
            confidences = []
            for depth, token in enumerate(stopped[0][b]):
                logits = close_draft(torch.tensor([prompt + stopped[0][b][:depth]])).logits[0, -1]
                confidences.append(float(logits.softmax(-1)[token]))
            asked = [scores[b] for depth, scores, rows in stop.asked if rows[b]]
            assert asked == pytest.approx(confidences[: len(asked)], rel=1e-4)
            paths = [math.prod(confidences[: d + 1]) for d in range(len(confidences))]
            assert drafts[0].host.scores[b] == pytest.approx(paths, rel=1e-4)
