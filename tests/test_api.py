"""Public API behaviour: input forms, stopping, streaming, context limits, dtypes and clear errors."""

from __future__ import annotations

import pytest
import torch
from conftest import VOCAB, OracleDrafter, hf_greedy, tiny_model, tiny_tokenizer

import specdec
from specdec import Draft, Drafter, PluginNotFoundError, PluginOptionsError
from specdec.registry import unregister


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama")


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def test_prompt_forms_agree(model, tokenizer) -> None:
    text = "t5 t6 t7 t8"
    ids = tokenizer(text)["input_ids"]
    expected = hf_greedy(model, ids, 10)
    forms = [text, [text], ids, [ids], torch.tensor([ids]), torch.tensor(ids)]
    for form in forms:
        out = specdec.generate(model, form, tokenizer=tokenizer, drafter="none", max_new_tokens=10)
        assert out.sequences == [expected]
        assert out.text == [tokenizer.decode(expected, skip_special_tokens=True)]


def test_batch_of_texts_each_matches_alone(model, tokenizer) -> None:
    texts = ["t1 t2", "t3 t4 t5 t6 t7 t8", "t9"]
    out = specdec.generate(model, texts, tokenizer=tokenizer, drafter="none", max_new_tokens=8)
    for text, sequence in zip(texts, out.sequences):
        assert sequence == hf_greedy(model, tokenizer(text)["input_ids"], 8)


def test_eos_ids_stop_and_nothing_follows(model) -> None:
    prompt = [3, 4, 5]
    reference = hf_greedy(model, prompt, 30)
    stop_token = reference[7]
    first = reference.index(stop_token)
    # one of several eos ids; an oracle drafter proposes tokens past the stop, which must be dropped
    out = specdec.generate(model, prompt, drafter=OracleDrafter({0: reference}, k=8), verifier="exact",
                           max_new_tokens=30, eos_token_id=[VOCAB - 1, stop_token])
    assert out.sequences[0] == reference[: first + 1]
    assert out.finish_reasons == ["eos"]


def test_stop_strings(model, tokenizer) -> None:
    prompt = "t1 t2 t3"
    ids = tokenizer(prompt)["input_ids"]
    reference = hf_greedy(model, ids, 20)
    stop_word = tokenizer.decode([reference[5]])
    first = reference.index(reference[5])
    out = specdec.generate(model, prompt, tokenizer=tokenizer, drafter=OracleDrafter({0: reference}, k=6),
                           verifier="exact", max_new_tokens=20, stop=[stop_word])
    assert out.sequences[0] == reference[: first + 1]
    assert out.finish_reasons == ["stop"]


def test_max_new_tokens_never_exceeded_with_long_drafts(model) -> None:
    reference = hf_greedy(model, [1, 2], 13)
    out = specdec.generate(model, [1, 2], drafter=OracleDrafter({0: reference + [0] * 20}, k=10),
                           verifier="exact", max_new_tokens=13)
    assert out.sequences[0] == reference
    assert out.stats.new_tokens == 13


def test_context_length_is_never_exceeded() -> None:
    model = tiny_model("llama", max_position_embeddings=24)
    prompt = list(range(1, 19))
    out = specdec.generate(model, prompt, drafter="none", max_new_tokens=50)
    assert len(prompt) + len(out.sequences[0]) == 24
    assert out.finish_reasons == ["context_length"]
    assert out.sequences[0] == hf_greedy(model, prompt, 6)


def test_streamer_receives_prompt_then_each_commit(model, tokenizer) -> None:
    class Recorder:
        def __init__(self) -> None:
            self.calls: list[list[int]] = []
            self.ended = False

        def put(self, value: torch.Tensor) -> None:
            self.calls.append(value.reshape(-1).tolist())

        def end(self) -> None:
            self.ended = True

    recorder = Recorder()
    out = specdec.generate(model, [4, 5, 6], drafter="none", max_new_tokens=6, streamer=recorder)
    assert recorder.calls[0] == [4, 5, 6]
    assert sum(recorder.calls[1:], []) == out.sequences[0]
    assert recorder.ended


def test_text_streamer_works(model, tokenizer, capsys) -> None:
    from transformers import TextStreamer

    out = specdec.generate(model, "t1 t2", tokenizer=tokenizer, drafter="none", max_new_tokens=5,
                           streamer=TextStreamer(tokenizer, skip_prompt=True))
    assert capsys.readouterr().out.strip() == out.text[0].strip()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_models_keep_their_dtype(dtype) -> None:
    model = tiny_model("llama").to(dtype)
    out = specdec.generate(model, [1, 2, 3], drafter="none", max_new_tokens=6)
    assert model.dtype == dtype
    assert len(out.sequences[0]) == 6 and all(0 <= t < VOCAB for t in out.sequences[0])


def test_in_process_registration(model) -> None:
    class RepeatLast(Drafter):
        name = "repeat-last"
        description = "test"

        def propose(self, state):
            return Draft.from_rows([([seq[-1]] * 2, [-1, 0]) for seq in state.sequences])

    specdec.register_drafter("repeat-last", RepeatLast)
    try:
        out = specdec.generate(model, [1, 2, 3], drafter="repeat-last", verifier="exact", max_new_tokens=9)
        assert out.sequences[0] == hf_greedy(model, [1, 2, 3], 9)
        assert any(p.name == "repeat-last" and p.origin == "registered in-process" for p in specdec.list_plugins())
    finally:
        unregister("drafter", "repeat-last")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(drafter="nonee"), "unknown drafter 'nonee'.*Did you mean 'none'"),
        (dict(verifier="exactt"), "unknown verifier 'exactt'.*Known verifiers: .*exact"),
        (dict(prompt=[]), "prompt is empty"),
        (dict(prompt=[[1, 2], []]), "row 1 is empty"),
        (dict(max_new_tokens=0), "max_new_tokens must be a positive integer"),
        (dict(prompt="t1 t2"), "needs a tokenizer"),
        (dict(prompt=list(range(1, 90)) * 3), "context is 256"),
    ],
)
def test_bad_input_errors(model, kwargs, message) -> None:
    args = dict(prompt=[1, 2, 3], drafter="none", max_new_tokens=4)
    args.update(kwargs)
    prompt = args.pop("prompt")
    with pytest.raises((ValueError, PluginNotFoundError)) as info:
        specdec.generate(model, prompt, **args)
    import re

    assert re.search(message, str(info.value)), str(info.value)


def test_invalid_plugin_options_fail_before_model_work() -> None:
    with pytest.raises(PluginOptionsError, match="invalid options for drafter 'none'"):
        specdec.generate("/nonexistent/path", [1, 2], drafter="none", drafter_options={"k": 3})
