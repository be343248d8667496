"""PPD drafter: token identity with greedy decoding, prompt-slot semantics, trees, training, checkpoints,
hardware profiles. Tiny random models only (untrained prompts accept rarely, which is fine here)."""

from __future__ import annotations

import argparse
import json
import re
import warnings

import numpy as np
import pytest
import torch
from conftest import ARCHS, VOCAB, hf_greedy, tiny_model
from specdec.drafters.ppd.draft_model import (
    INNER_SIZES,
    PPDDraftModelDrafter,
    PPDDraftModelOptions,
    size_inner_loop,
)
from specdec.drafters.ppd.drafter import GOODPUT_TREE_SIZE, PPDDrafter, PPDOptions
from specdec.drafters.ppd.prompts import PPDCheckpointError, PromptCheckpoint, random_checkpoint
from specdec.drafters.ppd.trees import (
    build_dynamic_trees,
    build_static_tree,
    expected_tau,
    prior_accuracies,
    stationary,
)

import specdec
from specdec.errors import PluginOptionsError
from specdec.tools.ppd.anchors import anchored_student_logits, greedy_chains
from specdec.tools.ppd.data import eval_windows, token_stream
from specdec.tools.ppd.distill import student_logits, teacher_continuation
from specdec.tools.ppd.evaluate import accuracies_from_counts, anchored_rank_counts, ppd_predictor
from specdec.tools.ppd.profile import (
    device_key,
    goodput_candidates,
    measure_goodput,
    plot_profile,
    run_profile,
    save_profile,
)
from specdec.tools.ppd.train import default_args, objective, read_texts, train

pytestmark = pytest.mark.usefixtures("one_thread")


def _prompts(seed: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (n,), generator=generator).tolist() for n in (5, 11)]


# -- greedy identity ------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_identical_dynamic_tree(arch: str) -> None:
    model = tiny_model(arch)
    prompts = _prompts(len(arch))
    out = specdec.generate(model, prompts, drafter="ppd", verifier="exact", max_new_tokens=20,
                           drafter_options={"random_init": True, "tree_size": 24})
    for prompt, got in zip(prompts, out.sequences):
        assert got == hf_greedy(model, prompt, 20)


@pytest.mark.parametrize("options", [
    {"random_init": True, "tree_size": 40, "num_ept": 3},  # ensemble prompt tokens
    {"random_init": True, "tree": "static", "tree_size": 16},
    {"random_init": True, "tree_size": 12, "num_prompts": 2},
    {"random_init": True, "tree_size": 30, "num_prompts": 4, "num_ept": 2},
])
def test_greedy_identical_variants(options: dict) -> None:
    model = tiny_model("llama", seed=3)
    for prompt in _prompts(7):
        out = specdec.generate(model, prompt, drafter="ppd", verifier="exact", max_new_tokens=18,
                               drafter_options=options)
        assert out.sequences[0] == hf_greedy(model, prompt, 18)


def test_budget_and_context_pruning() -> None:
    """Near the token budget and the context end the engine prunes nodes and prompt slots; the
    drafter must cope with fewer (or no) predictions."""
    model = tiny_model("llama", seed=1)
    for prompt, budget in (([3, 4, 5], 1), ([3, 4, 5], 2), (list(range(1, 95)) * 3, 14)):
        prompt = prompt[: 256 - 6] if len(prompt) > 250 else prompt  # context 256: leaves 6 tokens
        out = specdec.generate(model, prompt, drafter="ppd", verifier="exact", max_new_tokens=budget,
                               drafter_options={"random_init": True, "tree_size": 30})
        expected = hf_greedy(model, prompt, min(budget, 256 - len(prompt)))
        assert out.sequences[0] == expected


def test_cutting_a_draft_narrows_its_prompt_slots_to_the_widest_row() -> None:
    """A cut draft's extra slots are compacted and narrowed like its nodes: at batch 1 every input is
    computed, so slots left as padding made a 4-input PPD step cost a 13-input forward."""
    from specdec.draft import Draft, ExtraSlots
    from specdec.validation import keep_nodes

    # Row 0: nodes 0 <- 1, 2 (children of the root); slots: 2 under the root, 2 under node 0, 2 under node 2.
    # Row 1: one node and one root slot.
    tokens = torch.tensor([[5, 6, 7], [8, 0, 0]])
    parents = torch.tensor([[-1, 0, -1], [-1, 0, 0]])
    embeds = torch.arange(2 * 6 * 4, dtype=torch.float32).view(2, 6, 4)
    slot_parents = torch.tensor([[-1, -1, 0, 0, 2, 2], [-1, 0, 0, 0, 0, 0]])
    draft = Draft(tokens, parents, torch.tensor([3, 1]), extra=ExtraSlots(embeds, slot_parents, torch.tensor([6, 1])))
    cut = keep_nodes(draft, torch.tensor([[True, False, False], [False, False, False]]))
    assert cut.width == 1 and cut.num_nodes.tolist() == [1, 0]
    assert cut.extra.num_slots.tolist() == [4, 1]
    assert cut.extra.embeds.shape[1] == 4  # not the 6 slots proposed
    assert torch.equal(cut.extra.embeds[0], embeds[0, :4])
    assert cut.extra.parents[0].tolist() == [-1, -1, 0, 0]
    assert torch.equal(cut.extra.embeds[1, :1], embeds[1, :1]) and cut.extra.parents[1, 0].item() == -1


class _RecordingPPD(PPDDrafter):
    """Records the predictions the drafter derived after each step."""

    def __init__(self, options) -> None:
        super().__init__(PPDOptions(**options))
        self.history: list[tuple[list[int], torch.Tensor]] = []

    def observe(self, state, draft, verdict, committed, extra_logits) -> None:
        super().observe(state, draft, verdict, committed, extra_logits)
        row = state.row_ids[0]
        if row in self._predictions:
            self.history.append((list(state.sequences[0]), self._predictions[row].clone()))


@pytest.mark.parametrize("num_ept", [1, 3])
def test_prompt_slots_match_appended_prompt_forward(num_ept: int) -> None:
    """The logits PPD reads from its extra slots equal a plain forward of [committed tokens before the
    bonus ; prompt chain of group j] averaged over groups: positions, masks and aggregation are right."""
    model = tiny_model("llama", seed=2)
    drafter = _RecordingPPD({"random_init": True, "tree_size": 24, "num_ept": num_ept})
    specdec.generate(model, [7, 8, 9, 10], drafter=drafter, verifier="exact", max_new_tokens=12,
                     controller=False)  # every step with its slots: this checks their logits, not the cut
    table = random_checkpoint(model, 3, num_ept).embeddings  # same seed, same init
    embed = model.get_input_embeddings()
    assert len(drafter.history) >= 5
    for sequence, predictions in drafter.history:
        anchor_prefix = torch.tensor([sequence[:-1]], device=model.device)  # the bonus token's slot is prompt token 1's
        reference = []
        for group in range(num_ept):
            inputs = torch.cat([embed(anchor_prefix), table[None, :, group]], dim=1)
            with torch.no_grad():
                reference.append(model(inputs_embeds=inputs).logits[0, -3:])
        expected = torch.stack(reference).mean(dim=0)[: predictions.shape[0]]  # accepted node may carry < m
        assert 1 <= predictions.shape[0] <= 3
        assert torch.allclose(predictions, expected, atol=1e-4)


def test_runs_with_every_verifier_kind_at_temperature() -> None:
    model = tiny_model("llama")
    for verifier in ("exact", "rejection", "typical"):
        try:
            out = specdec.generate(model, [1, 2, 3], drafter="ppd", verifier=verifier, temperature=0.8, seed=0,
                                   max_new_tokens=12, drafter_options={"random_init": True, "tree_size": 16})
        except specdec.PluginNotFoundError:
            continue  # the verifier is not installed yet in this checkout
        assert len(out.sequences[0]) == 12


def test_options_are_validated() -> None:
    model = tiny_model("llama")
    with pytest.raises(PluginOptionsError):
        specdec.generate(model, [1, 2], drafter="ppd", drafter_options={"tree_size": 1})
    with pytest.raises(PluginOptionsError):
        specdec.generate(model, [1, 2], drafter="ppd", drafter_options={"bogus": 1})
    with pytest.raises(specdec.DrafterError, match="either checkpoint"):
        specdec.generate(model, [1, 2], drafter="ppd", verifier="exact",
                         drafter_options={"random_init": True, "checkpoint": "x.safetensors"})
    with pytest.raises(specdec.DrafterError, match="train-ppd|different model"):
        specdec.generate(model, [1, 2], drafter="ppd", verifier="exact")  # not the default model


# -- trees ----------------------------------------------------------------------------------------
VICUNA_LIKE = [[0.483, 0.143, 0.074, 0.04, 0.03, 0.02, 0.015, 0.012, 0.01, 0.009],
               [0.25, 0.1, 0.06, 0.04, 0.03, 0.02, 0.015, 0.012, 0.01, 0.009],
               [0.15, 0.08, 0.05, 0.04, 0.03, 0.02, 0.015, 0.012, 0.01, 0.009]]


@pytest.mark.parametrize("size", [2, 5, 10, 40, 105])
def test_dynamic_trees_are_well_formed(size: int) -> None:
    trees = build_dynamic_trees(VICUNA_LIKE, 3, size)
    assert set(trees.trees) == {0, 1, 2, 3}
    assert trees.trees[0].paths == ()
    for state, tree in trees.trees.items():
        assert tree.size <= size
        assert all(1 <= len(p) <= max(state, 1) for p in tree.paths)
        assert all(1 <= i <= 3 for i in tree.prompts)
        seen = set()
        for path in tree.paths:  # prefix-closed, parents first
            assert len(path) == 1 or path[:-1] in seen
            seen.add(path)
        layout = tree.layout(2)
        assert len(layout["embed_row"]) == 2 * (3 + sum(tree.prompts))
    assert trees.expected_tau == pytest.approx(expected_tau(VICUNA_LIKE, trees))


def test_bigger_trees_accept_more_and_prune_prompts_of_unlikely_nodes() -> None:
    taus = [build_dynamic_trees(VICUNA_LIKE, 3, n).expected_tau for n in (10, 40, 105, 200)]
    assert taus == sorted(taus) and taus[0] > 1.0
    tree = build_dynamic_trees(VICUNA_LIKE, 3, 105).trees[3]
    first = tree.prompts[tree.paths.index((0,))]
    assert first == 3 and min(tree.prompts) < 3  # likely nodes keep m prompts, unlikely ones lose some
    static = build_static_tree(VICUNA_LIKE, 3, 105)
    assert all(i == 3 for t in static.trees.values() for i in t.prompts)
    assert build_dynamic_trees(VICUNA_LIKE, 3, 105).expected_tau >= static.expected_tau


def test_expected_tau_of_single_chain_matches_closed_form() -> None:
    acc = [[0.5], [0.4], [0.3]]
    trees = build_static_tree(acc, 3, 12)  # 3 candidates: the chain (0), (0, 0), (0, 0, 0)
    assert trees.trees[3].paths == ((0,), (0, 0), (0, 0, 0))
    assert trees.expected_tau == pytest.approx(1 + 0.5 + 0.5 * 0.4 + 0.5 * 0.4 * 0.3)


def test_stationary_distribution() -> None:
    pi = stationary(np.array([[0.5, 0.5], [0.2, 0.8]]))
    assert pi.sum() == pytest.approx(1.0)
    assert pi == pytest.approx([2 / 7, 5 / 7])


def test_bad_accuracies_rejected() -> None:
    with pytest.raises(ValueError):
        build_dynamic_trees([[0.9, 0.5]], 1, 10)
    with pytest.raises(ValueError):
        build_dynamic_trees(prior_accuracies(2), 3, 10)


# -- training and checkpoints ---------------------------------------------------------------------
class _CharTokenizer:
    eos_token_id = None

    def __call__(self, text: str) -> dict:
        return {"input_ids": [ord(c) % VOCAB for c in text]}


def _train_args(tmp_path, **overrides) -> argparse.Namespace:
    data = tmp_path / "train.jsonl"
    data.write_text("\n".join(json.dumps({"question": f"q {i} " * 20, "answer": f"a {i * 7} " * 30})
                              for i in range(20)))
    values = dict(data=[str(data)], out=str(tmp_path / "p.safetensors"), steps=6, window=24, num_prompts=3,
                  num_ept=2, eval_windows=2, eval_length=24, save_every=3, quiet=True)
    values.update(overrides)
    return default_args(**values)


def test_training_checkpoint_roundtrip_and_wrong_model(tmp_path) -> None:
    model = tiny_model("llama", seed=4)
    args = _train_args(tmp_path)
    before = random_checkpoint(model, 3, 2).embeddings
    checkpoint = train(args, model, _CharTokenizer())
    loaded = PromptCheckpoint.load(args.out)
    assert loaded.embeddings.shape == (3, 2, 64)
    assert not torch.equal(loaded.embeddings, before)  # it trained
    assert torch.equal(loaded.embeddings, checkpoint.embeddings)
    assert len(loaded.accuracies) == 3 and all(0 <= sum(row) <= 1 for row in loaded.accuracies)
    assert (tmp_path / "p.safetensors.train.pt").is_file()
    assert all(p.requires_grad is False for p in model.parameters())

    prompt = [4, 5, 6, 7]
    out = specdec.generate(model, prompt, drafter="ppd", verifier="exact", max_new_tokens=10,
                           drafter_options={"checkpoint": args.out, "tree_size": 20})
    assert out.sequences[0] == hf_greedy(model, prompt, 10)

    other = tiny_model("llama", seed=5)  # same shapes, different weights
    with pytest.raises(PPDCheckpointError, match="different model"):
        specdec.generate(other, prompt, drafter="ppd", verifier="exact", max_new_tokens=4,
                         drafter_options={"checkpoint": args.out, "tree_size": 20})
    narrow = PromptCheckpoint(torch.zeros(3, 1, 32), checkpoint.fingerprint)
    with pytest.raises(PPDCheckpointError, match="hidden size"):
        narrow.check_model(model)
    with pytest.raises(PPDCheckpointError, match="does not exist"):
        PromptCheckpoint.load(tmp_path / "missing.safetensors")


def test_training_resumes_where_it_stopped(tmp_path, monkeypatch) -> None:
    """An interrupted run resumed with --resume ends exactly where the uninterrupted run ends."""
    import specdec.tools.ppd.train as train_module

    model = tiny_model("llama", seed=4)
    full = train(_train_args(tmp_path, out=str(tmp_path / "a.safetensors"), num_ept=1), model, _CharTokenizer())
    original, calls = train_module.pick_anchors, []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:  # step 4 of 6: after the state saved at step 3
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(train_module, "pick_anchors", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train(_train_args(tmp_path, out=str(tmp_path / "b.safetensors"), num_ept=1), model, _CharTokenizer())
    monkeypatch.setattr(train_module, "pick_anchors", original)
    assert torch.load(tmp_path / "b.safetensors.train.pt", weights_only=False)["step"] == 3
    resumed = train(_train_args(tmp_path, out=str(tmp_path / "b.safetensors"), num_ept=1, resume=True),
                    model, _CharTokenizer())
    state = torch.load(tmp_path / "b.safetensors.train.pt", weights_only=False)
    assert state["step"] == 6 and len(state["losses"]) == 6
    assert resumed.info["steps_done"] == 6
    assert torch.allclose(resumed.embeddings, full.embeddings, atol=1e-6)


def test_training_shows_a_progress_bar_with_the_running_accuracy(tmp_path, capsys) -> None:
    train(_train_args(tmp_path, steps=3, num_ept=1, save_every=0, quiet=False), tiny_model("llama", seed=4),
          _CharTokenizer())
    bar = capsys.readouterr().err
    assert "train-ppd" in bar and "3/3" in bar
    assert re.search(r"top1=\d\.\d\d/\d\.\d\d/\d\.\d\d", bar)  # one running accuracy per distance


def test_train_ppd_defaults_are_the_ablations_recipe() -> None:
    """The recipe chosen in benchmarks/results/ppd/ablation: KD, 4 EPTs, every anchor of one window per step."""
    args = default_args()
    assert (args.num_ept, args.batch_size, args.anchors, args.loss, args.steps) == (4, 1, 0, "kl", 400)
    assert args.data == ["stdlib"] and not args.quiet


def test_training_raises_accuracy_on_its_windows(tmp_path) -> None:
    """A few dozen steps on a tiny random model lift the prompts' accuracy on the training windows."""
    model = tiny_model("llama", seed=4)
    args = _train_args(tmp_path, steps=40, window=32, num_ept=1, save_every=0)
    docs = read_texts(args.data)
    windows = eval_windows(token_stream(docs, _CharTokenizer()), 8, 32)

    def score(embeddings: torch.Tensor) -> float:
        counts = anchored_rank_counts(model, windows, {"ppd": ppd_predictor(model, embeddings)}, 3)["ppd"]
        accuracies = accuracies_from_counts(counts)
        return sum(row[0] + sum(row) for row in accuracies)  # top-1 + top-10 over the distances

    before = score(random_checkpoint(model, 3, 1).embeddings)
    after = score(train(args, model, _CharTokenizer()).embeddings)
    assert after > before + 0.3


# -- many anchors per window: the same numbers as one prefix at a time ----------------------------
@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_anchored_forwards_match_one_prefix_at_a_time(arch: str) -> None:
    model = tiny_model(arch, seed=6)
    ids = torch.randint(0, VOCAB, (2, 20), generator=torch.Generator().manual_seed(0)).to(model.device)
    anchors = torch.tensor([3, 11, 19], device=model.device)
    embeddings = random_checkpoint(model, 3, 2).embeddings
    cache, teacher, greedy, hidden = greedy_chains(model, ids, anchors, 3, keep_hidden=True)
    student = anchored_student_logits(model, cache, ids.shape[1], anchors, embeddings)
    assert cache.get_seq_length() == ids.shape[1]  # slots never stay in the cache
    for a, t in enumerate(anchors.tolist()):
        prefix = ids[:, : t + 1]
        single_cache, single_teacher, single_greedy = teacher_continuation(model, prefix, 3)
        assert torch.equal(greedy[:, a], single_greedy)
        for row in range(2):  # label at distance k = the model's own greedy token k + 1 ahead
            assert greedy[row, a].tolist() == hf_greedy(model, prefix[row].tolist(), 4)
        assert torch.allclose(teacher[:, a], single_teacher, atol=1e-4)
        assert torch.allclose(student[:, a], student_logits(model, single_cache, t + 1, embeddings), atol=1e-4)
        with torch.no_grad():
            last = model(prefix).logits[:, -1]
        assert torch.allclose(model.get_output_embeddings()(hidden[:, a]), last, atol=1e-4)  # the LM head's input


def test_evaluation_scores_the_greedy_token_k_plus_1_ahead() -> None:
    """An oracle that predicts hf greedy token k+1 for distance k scores 1.0 everywhere; the off-by-one
    oracle (token k) does not."""
    model = tiny_model("llama", seed=7)
    windows = torch.randint(0, VOCAB, (2, 14), generator=torch.Generator().manual_seed(1))

    def oracle(shift: int):
        def predict(cache, length, anchors, hidden):
            out = torch.zeros(windows.shape[0], anchors.numel(), 3, VOCAB)
            for b in range(windows.shape[0]):
                for a, t in enumerate(anchors.tolist()):
                    continuation = hf_greedy(model, windows[b, : t + 1].tolist(), 4)
                    for k in range(3):
                        out[b, a, k, continuation[k + shift]] = 1.0
            return out
        return predict

    counts = anchored_rank_counts(model, windows, {"right": oracle(1), "off_by_one": oracle(0)}, 3, batch=2,
                                  min_context=4)
    assert all(row[0] == 1.0 for row in accuracies_from_counts(counts["right"]))
    assert sum(row[0] for row in accuracies_from_counts(counts["off_by_one"])) < 2.5


def test_objective_kl_is_zero_at_the_teacher_and_ce_uses_the_greedy_token() -> None:
    teacher = torch.randn(5, 3, 11)
    labels = teacher.argmax(dim=-1)
    assert objective(teacher, teacher, labels, 0.8, "kl").abs() < 1e-6
    assert objective(torch.randn(5, 3, 11), teacher, labels, 0.8, "kl") > 0
    sharp = torch.nn.functional.one_hot(labels, 11).float() * 50
    assert objective(sharp, teacher, labels, 0.8, "ce") < 1e-6 < objective(-sharp, teacher, labels, 0.8, "ce")


def test_training_refuses_evaluation_sets(tmp_path) -> None:
    bad = tmp_path / "humaneval"
    bad.mkdir()
    (bad / "x.txt").write_text("def f(): pass")
    with pytest.raises(ValueError, match="evaluation set"):
        read_texts([bad])


def test_checkpoint_check_is_kept_only_while_the_model_is_unchanged(tmp_path) -> None:
    """A drafter reused across calls checks its checkpoint once per model, and again once the weights
    change in place (a fine-tuning step) or another model comes: the mismatch is still refused."""
    model = tiny_model("llama", seed=4)
    path = tmp_path / "p.safetensors"
    random_checkpoint(model, 3, 1).save(path)
    drafter = PPDDrafter(PPDOptions(checkpoint=str(path), tree_size=8))
    loads: list[int] = []
    original = drafter._load_checkpoint
    drafter._load_checkpoint = lambda m: loads.append(1) or original(m)
    for _ in range(2):
        out = specdec.generate(model, [1, 2, 3], drafter=drafter, verifier="exact", max_new_tokens=4)
        assert out.sequences[0] == hf_greedy(model, [1, 2, 3], 4)
    assert len(loads) == 1
    with torch.no_grad():
        model.lm_head.weight.mul_(1.5)  # in place: same storage, new version
    with pytest.raises(PPDCheckpointError, match="different model"):
        specdec.generate(model, [1, 2, 3], drafter=drafter, verifier="exact", max_new_tokens=4)
    with pytest.raises(PPDCheckpointError, match="different model"):
        specdec.generate(tiny_model("llama", seed=5), [1, 2, 3], drafter=drafter, verifier="exact",
                         max_new_tokens=4)
    assert len(loads) == 3


def test_checkpoint_check_is_kept_per_model_across_drafters(tmp_path, monkeypatch) -> None:
    """`drafter="ppd"` makes a new drafter at every call: the checkpoint's check is kept per model (weakly, so
    it never keeps the model alive), taken again once the weights change in place, which is still refused."""
    import gc
    import weakref

    import specdec.drafters.ppd.prompts as prompts_module

    model = tiny_model("llama", seed=6)
    path = tmp_path / "p.safetensors"
    random_checkpoint(model, 3, 1).save(path)
    fingerprints: list[int] = []
    original = prompts_module.model_fingerprint
    monkeypatch.setattr(prompts_module, "model_fingerprint", lambda m: fingerprints.append(1) or original(m))
    run = {"drafter": "ppd", "drafter_options": {"checkpoint": str(path), "tree_size": 8}, "verifier": "exact",
           "max_new_tokens": 4}
    for _ in range(3):
        assert specdec.generate(model, [1, 2, 3], **run).sequences[0] == hf_greedy(model, [1, 2, 3], 4)
    assert len(fingerprints) == 1
    with torch.no_grad():
        model.lm_head.weight.mul_(1.5)  # in place: same storage, new version
    with pytest.raises(PPDCheckpointError, match="different model"):
        specdec.generate(model, [1, 2, 3], **run)
    assert len(fingerprints) == 2
    alive = weakref.ref(model)
    del model
    gc.collect()
    assert alive() is None


# -- hardware profile -----------------------------------------------------------------------------
def test_profile_is_used_only_on_its_own_device(tmp_path) -> None:
    model = tiny_model("llama")
    checkpoint = random_checkpoint(model)
    path = tmp_path / "ppd_prompts.safetensors"
    checkpoint.save(path)
    entry = run_profile(model, checkpoint, [4, 8, 16], "dynamic", context=16, repeats=2, prompt_counts=[2, 3])
    assert entry["best_size"] in (4, 8, 16) and entry["best_num_prompts"] in (2, 3)
    assert set(entry["curves"]) == {"2", "3"} and len(entry["curves"]["3"]["latency_s"]) == 3
    plot_profile(entry, tmp_path / "profile.png", "test")
    assert (tmp_path / "profile.png").stat().st_size > 1000
    profile = tmp_path / "ppd_prompts.profile.json"
    save_profile(profile, checkpoint.fingerprint, device_key(model.device), dict(entry, best_size=8, best_num_prompts=2))
    drafter = PPDDrafter(PPDOptions(checkpoint=str(path), schedule="profile"))
    out = specdec.generate(model, [1, 2, 3], drafter=drafter, verifier="exact", max_new_tokens=6)
    assert drafter.tree_size == 8 and drafter.num_prompts == 2
    assert out.sequences[0] == hf_greedy(model, [1, 2, 3], 6)
    # profiles are read once per file version (setup runs every call): a rewritten one is read again
    save_profile(profile, checkpoint.fingerprint, device_key(model.device), dict(entry, best_size=16, best_num_prompts=3))
    specdec.generate(model, [1, 2, 3], drafter=drafter, verifier="exact", max_new_tokens=3)
    assert drafter.tree_size == 16 and drafter.num_prompts == 3

    foreign = tmp_path / "foreign.json"
    save_profile(foreign, checkpoint.fingerprint, "cuda:Some GPU", dict(entry, best_size=16))
    drafter = PPDDrafter(PPDOptions(checkpoint=str(path), profile=str(foreign), schedule="profile"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        specdec.generate(model, [1, 2, 3], drafter=drafter, verifier="exact", max_new_tokens=3)
    assert drafter.tree_size != 16
    assert any("not reusing another device" in str(w.message) for w in caught)


def test_goodput_choice_of_the_profile_sets_prompts_and_ensemble_width(tmp_path) -> None:
    """The profile times the goodput controller with each (m, n_ept) and stores the fastest; the drafter
    uses it under the goodput schedule only, and options still win."""
    model = tiny_model("llama")
    checkpoint = random_checkpoint(model, 3, 4, 0)
    path = tmp_path / "ppd_prompts.safetensors"
    checkpoint.save(path)
    assert goodput_candidates(3, 4) == [(m, e) for m in (1, 2, 3) for e in (1, 2, 4)]
    assert goodput_candidates(1, 3) == [(1, 1), (1, 2), (1, 3)]
    choice = measure_goodput(model, path, [[1, 2, 3, 4], [5, 6, 7]], [(1, 1), (3, 4)], max_new_tokens=4, rounds=1)
    assert set(choice["seconds"]) == {"none", "1x1", "3x4"} and all(v > 0 for v in choice["seconds"].values())
    assert (choice["num_prompts"], choice["num_ept"]) in {(1, 1), (3, 4)}
    faster = min(("1x1", "3x4"), key=choice["seconds"].__getitem__)
    assert f"{choice['num_prompts']}x{choice['num_ept']}" == faster
    save_profile(tmp_path / "ppd_prompts.profile.json", checkpoint.fingerprint, device_key(model.device),
                 {"best_size": 8, "best_num_prompts": 3, "goodput": dict(choice, num_prompts=2, num_ept=2)})
    prompt = [1, 2, 3]
    expected = hf_greedy(model, prompt, 6)
    # Under the goodput schedule the tree is the profile's size for the prompt count used (the controller cuts it),
    # GOODPUT_TREE_SIZE where the profile has no curve for that count.
    cases = [({}, (2, 2), GOODPUT_TREE_SIZE), ({"num_ept": 4}, (2, 4), GOODPUT_TREE_SIZE),
             ({"num_prompts": 1}, (1, 2), GOODPUT_TREE_SIZE), ({"num_prompts": 3}, (3, 2), 8),
             ({"schedule": "profile"}, (3, 4), 8)]
    for options, (m, ept), size in cases:
        drafter = PPDDrafter(PPDOptions(checkpoint=str(path), **options))
        out = specdec.generate(model, prompt, drafter=drafter, max_new_tokens=6)
        assert (drafter.num_prompts, drafter._num_ept, drafter.tree_size) == (m, ept, size), options
        assert out.sequences[0] == expected
    drafter = PPDDrafter(PPDOptions(checkpoint=str(path)))
    specdec.generate(model, prompt, drafter=drafter, max_new_tokens=6, controller=False)
    assert drafter._num_ept == 4  # without the controller: the profile schedule's sizes, all ensemble tokens


# -- PPD + draft model ----------------------------------------------------------------------------
class _RecordingPPDDraftModel(PPDDraftModelDrafter):
    def __init__(self, options) -> None:
        super().__init__(PPDDraftModelOptions(**options))
        self.log: list[tuple[list[int], list[int]]] = []

    def propose(self, state):
        draft = super().propose(state)
        self.log.append((list(state.sequences[0]), draft.tokens[0, : int(draft.num_nodes[0])].tolist()))
        return draft


def test_ppd_draft_model_drafts_the_drafts_greedy_chain_and_stays_identical() -> None:
    target = tiny_model("llama", seed=0)
    draft = tiny_model("llama", seed=1, layers=1)
    for prompt in ([5, 6, 7], list(range(3, 20))):
        drafter = _RecordingPPDDraftModel({"model": draft, "random_init": True, "k": 4, "tree_size": 12})
        out = specdec.generate(target, prompt, drafter=drafter, verifier="exact", max_new_tokens=24)
        assert out.sequences[0] == hf_greedy(target, prompt, 24)
        # PPD inside the draft is lossless for the draft: each chain is the draft's own greedy continuation
        for sequence, tokens in drafter.log:
            if tokens:
                assert tokens == hf_greedy(draft, sequence, len(tokens))


@pytest.mark.parametrize("plain", [False, True])  # the inner tree, or plain forwards (no tree pays)
def test_ppd_draft_model_prefills_a_rows_prompt_and_drafts_its_greedy_chain_past_a_window(plain, monkeypatch) -> None:
    """A row's first feed of the draft (its whole prompt) runs as a prefill, not a chain scratch forward scored
    on every input (twice the time on a 900-token prompt); the draft's chains stay its greedy continuation on
    Gemma 2 (soft-capping, a 16-token window) with a prompt longer than the window."""
    from families import build, build_draft
    from specdec.drafters.ppd import draft_model as module

    from specdec.runner import TargetRunner

    if plain:
        monkeypatch.setattr(module, "row_forward_seconds", lambda model: lambda width: 1e-3 * width)
        monkeypatch.setattr(module, "plain_forward_seconds", lambda draft, plan, repeats=9: 1e-3)  # no tree pays
    target, draft = build("gemma2", seed=0), build_draft("gemma2", seed=1)
    prefills, prefill = [], TargetRunner.prefill
    monkeypatch.setattr(TargetRunner, "prefill", lambda self, ids, lengths: prefills.append(
        (self.model is draft, ids.shape[1])) or prefill(self, ids, lengths))
    prompt = list(range(3, 33))
    drafter = _RecordingPPDDraftModel({"model": draft, "random_init": True, "k": 4} | ({} if plain else {"tree_size": 12}))
    out = specdec.generate(target, prompt, drafter=drafter, verifier="exact", max_new_tokens=24, controller=False)
    assert out.sequences[0] == hf_greedy(target, prompt, 24)
    assert (drafter.inner is None) == plain
    # the draft's prefill: the prompt but its last token (the first step's root) and the one before it (fed by a
    # scratch forward, for its logits)
    assert (True, len(prompt) - 2) in prefills
    for sequence, tokens in drafter.log:
        if tokens:
            assert tokens == hf_greedy(draft, sequence, len(tokens))


def test_ppd_draft_model_with_the_target_as_draft_accepts_everything() -> None:
    target = tiny_model("llama", seed=0)
    drafter = PPDDraftModelDrafter(PPDDraftModelOptions(model=target, random_init=True, k=4, tree_size=12))
    out = specdec.generate(target, [5, 6, 7], drafter=drafter, verifier="exact", max_new_tokens=30,
                           controller=False)  # every draft verified (a draft as costly as the target is cut)
    assert out.sequences[0] == hf_greedy(target, [5, 6, 7], 30)
    assert out.stats.mean_accepted == pytest.approx(5.0)


def test_inner_loop_sizing_takes_a_tree_where_width_is_cheap_and_plain_forwards_where_it_is_not() -> None:
    accuracies = prior_accuracies(3, 10)
    flat = size_inner_loop(accuracies, 4, lambda width: 1e-3)  # a GPU at small widths: wide costs as narrow
    assert flat.tree_size == max(INNER_SIZES) and flat.num_prompts >= 1
    assert flat.tokens_per_second > flat.plain_tokens_per_second
    steep = size_inner_loop(accuracies, 4, lambda width: 1e-3 * width)  # every input a forward's worth
    assert (steep.tree_size, steep.num_prompts) == (0, 0)
    assert steep.tokens_per_second == steep.plain_tokens_per_second == pytest.approx(1e3)
    mild = size_inner_loop(accuracies, 1, lambda width: 1e-3 * (1 + 0.02 * width))
    assert 0 < mild.tree_size < max(INNER_SIZES)  # a tree, but not the widest: its last inputs cost more than they win
    # The plain loop's own forward (int8 copies on a CPU) three times faster than the curve's one input: plain wins
    cheap_plain = size_inner_loop(accuracies, 1, lambda width: 1e-3 * (1 + 0.02 * width), plain_seconds=1e-3 / 3)
    assert (cheap_plain.tree_size, cheap_plain.plain_tokens_per_second) == (0, pytest.approx(3e3))


def test_the_plain_loops_forward_is_timed_as_it_runs_and_leaves_the_draft_as_it_was(monkeypatch) -> None:
    """Timed through the plan the plain loop runs (one token a forward behind a short cache), the median of the
    repeats by the cost model's clock; the draft's weights are untouched."""
    from specdec.drafters.ppd import draft_model as module

    from specdec.runner import LayerPlan, TargetRunner, lean_forward_supports

    ticks = iter(range(1000))
    monkeypatch.setattr(module, "cost_clock", lambda device: lambda: float(next(ticks)) ** 3)  # growing gaps
    plans, forward = [], TargetRunner.scratch_forward
    monkeypatch.setattr(TargetRunner, "scratch_forward",
                        lambda self, ids, offset=0, plan=None, **kw: plans.append((ids.shape[1], plan))
                        or forward(self, ids, offset, plan=plan, **kw))
    draft = tiny_model("llama", seed=3)
    before = {name: tensor.clone() for name, tensor in draft.state_dict().items()}
    plan = LayerPlan.build(draft, lean=lean_forward_supports(draft))
    seconds = module.plain_forward_seconds(draft, plan, repeats=5)
    assert seconds == 5.0 ** 3 - 4.0 ** 3  # repeat i spans ticks 2i, 2i + 1: the median (i = 2), not the mean
    assert [width for width, _ in plans] == [16] + [1] * 5 and all(used is plan for _, used in plans)
    assert all(torch.equal(before[name], tensor) for name, tensor in draft.state_dict().items())


@pytest.mark.parametrize("arch", ["llama", "gpt2"])  # specdec's fused forward, and transformers' (gpt2)
def test_ppd_draft_model_drafts_with_plain_forwards_where_no_tree_pays(arch, monkeypatch) -> None:
    from specdec.drafters.ppd import draft_model as module

    sized = []
    monkeypatch.setattr(module, "row_forward_seconds", lambda model: sized.append(model) or (lambda width: 1e-3 * width))
    # The plain loop's token priced like one input of the tree's forward (measured, it read slower than 1 ms while
    # another test process shared the CPU, and a 2-node tree won): a tree's tau never reaches its input count.
    monkeypatch.setattr(module, "plain_forward_seconds", lambda draft, plan, repeats=9: 1e-3)
    target = tiny_model(arch, seed=0)
    drafter = PPDDraftModelDrafter(PPDDraftModelOptions(model=target, random_init=True, k=4))
    for prompt in ([5, 6, 7], list(range(3, 20))):
        out = specdec.generate(target, prompt, drafter=drafter, verifier="exact", max_new_tokens=30,
                               controller=False)  # every step drafts k
        assert out.sequences[0] == hf_greedy(target, prompt, 30)
        stats = out.stats.drafter_stats
        assert stats["inner_tree_size"] == 0 and stats["inner_sizing"]["tree_size"] == 0
        # one forward per drafted token: the committed tokens the draft lacks ride in each step's first forward
        # (the prompt's prefill is the one other forward)
        assert stats["draft_forwards"] == stats["drafted_tokens"] + 1
        assert out.stats.mean_accepted > 2  # the target as its own draft (int8 copies on a CPU for llama)
    # rows joining mid-run (continuous batching) and rows of a ragged batch keep their own draft caches
    prompts = [[5, 6, 7], list(range(3, 20)), [9, 8], list(range(30, 41)), [4]]
    out = specdec.generate(target, prompts, drafter=drafter, verifier="exact", max_new_tokens=12, max_batch_size=2,
                           controller=False)
    assert out.sequences == [hf_greedy(target, prompt, 12) for prompt in prompts]
    assert out.stats.drafter_stats["drafted_tokens"] > 0
    assert len(sized) == 1  # sized once per drafter, like its draft is loaded once


def test_ppd_draft_model_settles_its_inner_loop_once_per_draft_model(monkeypatch) -> None:
    """The inner loop is sized from measured costs, and its two arms propose differently where the plain one
    runs int8 copies: sized anew per call from noisy timings, identical calls would draft differently
    (`drafter="ppd_draft_model"` makes a drafter per call). The size is settled once per draft model and
    device, whatever later timings say; a draft model of its own is measured, and settled, anew. (A call whose
    output must be reproduced sizes from nominal costs instead: `tests/test_nominal_costs.py`.)"""
    from specdec.drafters.ppd import draft_model as module

    curves = iter([lambda width: 1e-3, lambda width: 1e-3 * width] * 4)  # flat (a tree pays), steep (none does)
    read = []
    monkeypatch.setattr(module, "row_forward_seconds", lambda model: read.append(model) or next(curves))
    monkeypatch.setattr(module, "plain_forward_seconds", lambda model, plan: 1e-3)  # as both curves' one input
    target, draft = tiny_model("llama"), tiny_model("llama", seed=1)

    def run(draft_model):
        out = specdec.generate(target, [5, 6, 7, 5, 6], drafter="ppd_draft_model",
                               drafter_options={"model": draft_model, "random_init": True, "k": 3},
                               max_new_tokens=16)
        return out.sequences[0], out.stats.drafter_stats["inner_tree_size"]

    first = run(draft)
    assert first[1] > 0  # the flat curve: a tree
    assert [run(draft) for _ in range(3)] == [first] * 3  # the steep curve is never read for this draft
    assert read == [draft]
    assert run(tiny_model("llama", seed=1))[1] == 0  # another draft model: the next (steep) curve, plain forwards


def test_stdlib_data_keeps_the_zoos_heldout_modules_out_of_training() -> None:
    from specdec.tools.ppd.data import stdlib_documents

    heldout = stdlib_documents(heldout=True)
    training = read_texts(["stdlib"])
    assert len(heldout) >= 10 and len(training) > 100
    assert not set(heldout) & set(training)
    with pytest.raises(ValueError, match="evaluation set"):
        read_texts(["stdlib", "/somewhere/spec_bench/question.jsonl"])


def test_ppd_draft_model_loads_its_draft_once_per_drafter(tmp_path, monkeypatch) -> None:
    """setup runs on every generate call; a drafter kept across calls (as the benchmark and a server keep it)
    must not load its draft model again inside each timed call."""
    from specdec.drafters.ppd import draft_model as module

    target = tiny_model("llama", seed=0)
    tiny_model("llama", seed=1, layers=1).save_pretrained(tmp_path / "draft")
    loads = []
    real = module._resolve_draft
    monkeypatch.setattr(module, "_resolve_draft", lambda spec, *target: loads.append(spec) or real(spec, *target))
    drafter = PPDDraftModelDrafter(PPDDraftModelOptions(model=str(tmp_path / "draft"), random_init=True, k=3,
                                                        tree_size=8))
    for prompt in ([5, 6, 7], [9, 8]):
        out = specdec.generate(target, prompt, drafter=drafter, verifier="exact", max_new_tokens=12)
        assert out.sequences[0] == hf_greedy(target, prompt, 12)
    assert loads == [str(tmp_path / "draft")]


def test_ppd_draft_model_default_draft_loads_only_the_draft(monkeypatch) -> None:
    from specdec.drafters.ppd.draft_model import _resolve_draft

    import specdec.zoo

    monkeypatch.setattr(specdec.zoo, "load_default", lambda: pytest.fail("loaded the default target too"))
    draft = _resolve_draft("default")
    assert draft is _resolve_draft("default") and draft.config.num_hidden_layers == 2
    assert next(draft.parameters()).dtype == torch.float32 and not draft.training


class _ScoredPPD(PPDDrafter):
    """Records each draft with its candidates' tokens and host scores, and the predictions it was made from."""

    def __init__(self, options) -> None:
        super().__init__(PPDOptions(**options))
        self.drafts: list[tuple[torch.Tensor, list[int], list[float], list[int]]] = []

    def propose(self, state):
        row = state.row_ids[0]
        prediction = self._predictions.get(row)
        draft = super().propose(state)
        if prediction is not None and draft.host.sizes[0]:
            n = draft.host.sizes[0]
            self.drafts.append((prediction.clone(), draft.tokens[0, :n].tolist(), draft.host.scores[0],
                                draft.host.parents_of(0)))
        return draft


def test_goodput_drafts_are_scored_by_this_steps_predicted_probabilities() -> None:
    """Under the goodput schedule a candidate's score is the probability its prompt predictions give its path
    (the product over its tokens), so the controller's cut sees this step's confidence, not a fixed prior."""
    model = tiny_model("llama", seed=5)
    drafter = _ScoredPPD({"random_init": True, "num_prompts": 2, "tree_size": 12})
    specdec.generate(model, _prompts(2)[1], drafter=drafter, verifier="exact", max_new_tokens=24)
    assert drafter.goodput and drafter.drafts
    for prediction, tokens, scores, parents in drafter.drafts:
        probs = torch.softmax(prediction, dim=-1)
        expected: list[float] = []
        for node, (token, parent) in enumerate(zip(tokens, parents)):
            row = _depth(parents, node) - 1  # the prediction of the node's depth
            expected.append(float(probs[row, token]) * (expected[parent] if parent >= 0 else 1.0))
        assert scores == pytest.approx(expected, rel=1e-5)


def _depth(parents: list[int], node: int) -> int:
    """Depth of `node` below the root (a child of the root: 1)."""
    depth = 1
    while parents[node] >= 0:
        node, depth = parents[node], depth + 1
    return depth
