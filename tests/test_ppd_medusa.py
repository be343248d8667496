"""The Medusa-1 baseline of the PPD benchmark: same label as PPD, trains, and the comparison script runs
end to end on a tiny saved model."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import VOCAB, hf_greedy, tiny_model, tiny_tokenizer
from specdec.benchmarks.medusa_baseline import (
    MedusaConfig,
    MedusaHeads,
    _label_window,
    medusa_predictor,
    train_medusa,
)
from specdec.benchmarks.ppd_vs_medusa import main as compare_main

from specdec.tools.ppd.anchors import greedy_chains
from specdec.tools.ppd.data import eval_windows, sample_windows
from specdec.tools.ppd.evaluate import accuracies_from_counts, anchored_rank_counts
from specdec.tools.ppd.train import pick_anchors

pytestmark = pytest.mark.usefixtures("one_thread")


def _stream(length: int = 3000, seed: int = 0) -> torch.Tensor:
    """Text with structure a tiny model's heads can pick up: a few repeated phrases in random order."""
    generator = torch.Generator().manual_seed(seed)
    phrases = [torch.randint(0, VOCAB, (n,), generator=generator) for n in (5, 7, 9, 4)]
    order = torch.randint(0, len(phrases), (length // 5,), generator=generator)
    return torch.cat([phrases[i] for i in order.tolist()])[:length]


def test_medusa_labels_are_ppds_labels() -> None:
    """The heads train on y_{k+1}(t): the model's own greedy token k + 1 ahead of the anchor, the very
    tokens PPD's prompt k is trained and scored on."""
    model = tiny_model("llama", seed=3)
    stream = _stream()
    config = MedusaConfig(window=16, anchors=5, seed=2)
    teacher, labels, states = _label_window(model, stream, config, torch.Generator().manual_seed(2), model.device)
    generator = torch.Generator().manual_seed(2)  # replay the sampler to know which window and anchors
    ids = sample_windows(stream, 1, 16, generator).to(model.device)
    anchors = pick_anchors(16, 5, generator).to(model.device)
    _, ppd_teacher, ppd_greedy, _ = greedy_chains(model, ids, anchors, 3)
    assert torch.equal(labels, ppd_greedy[:, :, 1:]) and torch.equal(teacher, ppd_teacher)
    for a, t in enumerate(anchors.tolist()):
        continuation = hf_greedy(model, ids[0, : t + 1].tolist(), 4)
        assert labels[0, a].tolist() == continuation[1:]
    with torch.no_grad():
        assert torch.allclose(model.get_output_embeddings()(states[0]), model(ids).logits[0, anchors], atol=1e-4)


def test_zero_initialised_heads_start_as_the_next_token_distribution() -> None:
    model = tiny_model("llama", seed=3)
    heads = MedusaHeads(64, 3).to(model.device)
    hidden = torch.randn(2, 4, 64).to(model.device)
    logits = heads(hidden, model.get_output_embeddings())
    bias = torch.stack([torch.nn.functional.silu(block.bias) for block in heads.blocks])
    expected = model.get_output_embeddings()(hidden[:, :, None] + bias)
    assert logits.shape == (2, 4, 3, VOCAB) and torch.allclose(logits, expected, atol=1e-5)


@pytest.mark.parametrize("protocol,loss", [("cached", "ce"), ("online", "kl")])
def test_medusa_training_raises_accuracy(protocol: str, loss: str) -> None:
    model = tiny_model("llama", seed=3)
    stream = _stream()
    windows = eval_windows(stream, 6, 24)
    config = MedusaConfig(time_budget=120.0, protocol=protocol, loss=loss, window=24, max_steps=60, label_windows=30,
                          minibatch=64, seed=1)

    def score(heads: MedusaHeads) -> float:
        counts = anchored_rank_counts(model, windows, {"m": medusa_predictor(model, heads)}, 3)["m"]
        return sum(row[0] for row in accuracies_from_counts(counts))

    before = score(MedusaHeads(64, 3).to(model.device))
    heads, log = train_medusa(model, stream, config)
    assert log["steps"] > 5 and log["windows_labelled"] >= 1
    after = score(heads)
    assert log["steps"] == 60 and after > before + 0.2
    # every anchor with >= 8 tokens of context of each labelled window (positions 7..23: 17 per window)
    assert log["anchors_labelled"] == 17 * log["windows_labelled"]
    with pytest.raises(ValueError, match="hard labels"):
        train_medusa(model, stream, MedusaConfig(protocol="cached", loss="kl", time_budget=1.0))


def test_comparison_script_end_to_end(tmp_path) -> None:
    model = tiny_model("llama", seed=3)
    model_dir = tmp_path / "model"
    model.save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    text = " ".join(f"t{i}" for i in _stream(4000).tolist())
    (tmp_path / "train.txt").write_text(text)
    (tmp_path / "heldout.txt").write_text(" ".join(f"t{i}" for i in _stream(800, seed=0).tolist()))
    out = tmp_path / "out"
    code = compare_main(["--model", str(model_dir), "--data", str(tmp_path / "train.txt"), "--eval-data",
                         str(tmp_path / "heldout.txt"), "--time-budget", "3", "--eval-windows", "3",
                         "--eval-length", "24", "--ppd-args", "--window 24 --num-ept 2", "--out", str(out)])
    assert code == 0
    report = json.loads((out / "ppd_vs_medusa.json").read_text())
    assert report["ppd"]["num_ept"] == 2
    assert sum(report["ppd"]["counts"][0]) == sum(report["medusa"]["counts"][0]) == 3 * (24 - 7)  # same anchors
    assert set(report["targets"]) == {"d1_top10", "d1_top1_0.9x", "d2_top10", "d3_top10"}
    assert "| ppd |" in (out / "ppd_vs_medusa.md").read_text()
