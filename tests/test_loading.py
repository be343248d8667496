"""What specdec loads goes where the user asks, by default where the target is: a model given as a path takes
`device` and `dtype`; a draft model given as a path follows the target's device and dtype; a model passed
in is never moved or cast."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_model
from specdec.drafters.draft_model import DraftModelDrafter, DraftModelOptions

import specdec
from specdec.api import load_model

PROMPT = [5, 6, 7, 5, 6, 7]


def test_a_model_path_loads_in_the_dtype_asked(tmp_path):
    tiny_model("llama").save_pretrained(tmp_path / "target")
    model, _ = load_model(str(tmp_path / "target"), dtype="bfloat16", device="cpu")
    assert model.get_input_embeddings().weight.dtype == torch.bfloat16
    out = specdec.generate(str(tmp_path / "target"), PROMPT, drafter="anpd", max_new_tokens=8, dtype="bfloat16")
    assert len(out.sequences[0]) == 8
    with pytest.raises(ValueError, match="dtype must be one of"):
        load_model(str(tmp_path / "target"), dtype="float8")


def test_a_model_passed_in_is_never_moved_or_cast():
    model = tiny_model("llama")
    dtype = model.get_input_embeddings().weight.dtype
    with pytest.raises(ValueError, match="never modifies the user's model"):
        specdec.generate(model, PROMPT, max_new_tokens=4, dtype="bfloat16")
    assert model.get_input_embeddings().weight.dtype == dtype


def test_a_draft_path_follows_the_targets_dtype_unless_told(tmp_path):
    target = tiny_model("llama").to(torch.bfloat16)
    tiny_model("llama", layers=1, seed=1).save_pretrained(tmp_path / "draft")
    drafter = DraftModelDrafter(DraftModelOptions(model=str(tmp_path / "draft")))
    specdec.generate(target, PROMPT, drafter=drafter, max_new_tokens=6, controller=False)
    assert drafter.model.get_input_embeddings().weight.dtype == torch.bfloat16
    told = DraftModelDrafter(DraftModelOptions(model=str(tmp_path / "draft"), dtype="float32"))
    specdec.generate(target, PROMPT, drafter=told, max_new_tokens=6, controller=False)
    assert told.model.get_input_embeddings().weight.dtype == torch.float32
