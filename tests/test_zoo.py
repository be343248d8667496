"""The bundled default model pair and its training recipe."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
import torch

import specdec.zoo as zoo
from specdec.tools.zoo.train import PRESETS, per_token_macs, train


@pytest.fixture(scope="module")
def models() -> zoo.DefaultModels:
    return zoo.load_default()


def test_pair_shapes_and_vocab_agree(models):
    t, d, tok = models.target, models.draft, models.tokenizer
    assert t.config.vocab_size == d.config.vocab_size == len(tok) == 8192
    assert t.config.num_hidden_layers >= 8
    assert t.config.max_position_embeddings >= 1024
    assert t.config.eos_token_id == d.config.eos_token_id == tok.eos_token_id
    for m in (t, d):
        assert not m.training
        assert next(m.parameters()).dtype == torch.float32
    ids = tok("x = 1\n", return_tensors="pt").input_ids
    with torch.no_grad():
        assert t(ids).logits.shape == d(ids).logits.shape == (1, ids.shape[1], len(tok))


def test_public_load_default_unpacks_as_documented(models):
    target, draft, tokenizer = models  # the README's form
    assert (target, draft, tokenizer) == (models.target, models.draft, models.tokenizer)


def test_draft_is_at_most_a_fifth_of_target_compute(models):
    assert per_token_macs(models.draft.config) * 5 <= per_token_macs(models.target.config)
    assert 15e6 <= models.target.num_parameters() <= 30e6


def test_shipped_size_under_60mb():
    total = sum(p.stat().st_size for p in zoo.default_model_dir().rglob("*") if p.is_file())
    assert total < 60 * 2**20


@pytest.mark.parametrize(
    "text",
    [
        'def f(a, b=2):\n    """Doc."""\n\tif a:\n        return  b\n\n\n# ünïcode — ok\n',
        "Question: Tom has 3 apples.\nAnswer: 3 * 2 = <<3*2=6>>6\n#### 6",
        "   leading spaces and trailing   \n\n",
    ],
)
def test_tokenizer_round_trip(models, text):
    tok = models.tokenizer
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids, clean_up_tokenization_spaces=False) == text


def test_greedy_generation_is_deterministic_and_pythonic(models):
    tok = models.tokenizer
    ids = tok("def parse_args(", return_tensors="pt").input_ids
    outs = [
        models.target.generate(ids, do_sample=False, max_new_tokens=32, pad_token_id=tok.eos_token_id)
        for _ in range(2)
    ]
    assert torch.equal(outs[0], outs[1])
    text = tok.decode(outs[0][0, ids.shape[1] :])
    assert re.search(r"[A-Za-z_]\w*", text) and (")" in text or ":" in text or "," in text)
    draft_outs = [
        models.draft.generate(ids, do_sample=False, max_new_tokens=16, pad_token_id=tok.eos_token_id)
        for _ in range(2)
    ]
    assert torch.equal(draft_outs[0], draft_outs[1])


def _losses(log: list[dict]) -> list[float]:
    return [row["loss"] for row in log]


def test_recipe_is_reproducible_and_resumable(tmp_path):
    cfg = dataclasses.replace(PRESETS["tiny"], steps=24, ckpt_every=6)
    first = train(cfg, tmp_path / "a", progress=False)
    second = train(cfg, tmp_path / "b", progress=False)
    assert len(first) == 24
    assert _losses(first) == _losses(second)
    assert first[-1]["loss"] < first[0]["loss"]

    partial = train(cfg, tmp_path / "c", stop_at=12, progress=False)
    assert _losses(partial) == _losses(first)[:12]
    resumed = train(cfg, tmp_path / "c", progress=False)
    assert _losses(resumed) == _losses(first)
    assert (tmp_path / "c" / "final" / "model.safetensors").is_file()


def test_distillation_moves_the_student_towards_the_teacher(tmp_path):
    """The same student run with the teacher's KL term ends closer to the teacher (on held-back blocks)
    than with next-token loss alone, and `init_from` starts it from the given weights."""
    from transformers import LlamaForCausalLM

    from specdec.tools.zoo.train import distillation_loss, prepare_data

    base = dataclasses.replace(PRESETS["tiny"], steps=24, ckpt_every=24)
    train(base, tmp_path / "teacher", progress=False)
    teacher_dir = str(tmp_path / "teacher" / "final")
    student = dataclasses.replace(base, steps=12, seed=5, lr=1e-2)
    train(student, tmp_path / "plain", progress=False)
    train(dataclasses.replace(student, teacher=teacher_dir, kd_weight=1.0), tmp_path / "kd", progress=False)
    _, blocks, _ = prepare_data(base, tmp_path / "teacher", None)
    ids = blocks.batch(1000, 8, seed=99)
    teacher = LlamaForCausalLM.from_pretrained(teacher_dir).eval()
    with torch.no_grad():
        target = teacher(input_ids=ids).logits
        gaps = {name: float(distillation_loss(
            LlamaForCausalLM.from_pretrained(tmp_path / name / "final").eval()(input_ids=ids).logits, target))
            for name in ("plain", "kd")}
    assert gaps["kd"] < 0.8 * gaps["plain"]

    warm = dataclasses.replace(student, steps=1, lr=1e-9, warmup_steps=1, init_from=teacher_dir)
    train(warm, tmp_path / "warm", progress=False)
    started = LlamaForCausalLM.from_pretrained(tmp_path / "warm" / "final").eval()
    with torch.no_grad():
        assert float(distillation_loss(started(input_ids=ids).logits, target)) < 1e-3
    meta = json.loads((tmp_path / "warm" / "meta.json").read_text())
    assert len(meta["init_from_sha256"]) == 64

    # A distillation run resumed from its checkpoint follows the uninterrupted one exactly.
    mixed = dataclasses.replace(student, steps=8, ckpt_every=4, teacher=teacher_dir, init_from=teacher_dir,
                                kd_weight=0.5)
    whole = train(mixed, tmp_path / "mixed", progress=False)
    train(mixed, tmp_path / "resumed", stop_at=4, progress=False)
    resumed = train(mixed, tmp_path / "resumed", progress=False)
    assert _losses(resumed) == _losses(whole)
    assert all("next_token_loss" in row for row in resumed)
    assert json.loads((tmp_path / "resumed" / "meta.json").read_text())["init_from_sha256"] == meta["init_from_sha256"]


def test_missing_weights_raise_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(zoo, "default_model_dir", lambda: tmp_path)
    with pytest.raises(FileNotFoundError, match="default model weights are missing"):
        zoo.load_default()


def test_corpus_holds_out_its_evaluation_modules():
    from specdec.tools.zoo.corpus import HELDOUT_MODULES, build_corpus

    corpus = build_corpus()
    man = corpus.manifest
    assert "argparse.py" in man["heldout_stdlib_files"] and "json/decoder.py" in man["heldout_stdlib_files"]
    assert len(HELDOUT_MODULES) >= 10 and corpus.heldout_code and corpus.heldout_prose
    train = set(corpus.train)
    assert not train.intersection(corpus.heldout_code) and not train.intersection(corpus.heldout_prose)
    assert man["gsm8k_file"].endswith("gsm8k/train.jsonl")
    assert build_corpus().manifest == man  # deterministic


def test_corpus_reads_the_shipped_gsm8k_file_the_default_model_was_trained_on():
    """The recipe's corpus hash stays valid: the GSM8K text ships in the package, byte for byte."""
    from specdec.data import data_dir
    from specdec.tools.zoo.corpus import build_corpus

    recipe = json.loads((zoo.default_model_dir() / "recipe.json").read_text())["manifest"]
    man = build_corpus().manifest
    assert man["gsm8k_file"] == recipe["gsm8k_file"] == "specdec/data/gsm8k/train.jsonl"
    assert (data_dir() / "gsm8k" / "train.jsonl").is_file()
    assert (man["gsm8k_lines"], man["gsm8k_bytes"]) == (recipe["gsm8k_lines"], recipe["gsm8k_bytes"])
    same_stdlib = ("python", "stdlib_file_list_sha256", "stdlib_bytes")
    if any(man[key] != recipe[key] for key in same_stdlib):
        pytest.skip(f"this interpreter's stdlib differs from the recipe's (Python {recipe['python']})")
    assert man["content_sha256"] == recipe["content_sha256"]


def test_corpus_names_a_missing_gsm8k_file(tmp_path):
    from specdec.tools.zoo.corpus import build_corpus

    with pytest.raises(FileNotFoundError, match="GSM8K train file .*nope.jsonl"):
        build_corpus(gsm8k_path=tmp_path / "nope.jsonl")
