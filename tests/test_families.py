"""Every model family specdec claims, served exactly or refused by name, past its windows and chunks.

Each family of `tests/families.py` (tiny random models; every window and chunk is 16 tokens, shorter than the
prompts plus 24 new tokens) runs with drafters `none`, `anpd`, a random-tree test drafter and `draft_model`
(a 1-layer draft of the same family), verifiers `exact` and `typical` at temperature 0, solo, in a ragged
batch of 3 prompts, and with continuous batching (`max_batch_size=2`). Every row must equal transformers'
solo greedy `generate` of its prompt with the same attention implementation; or the family is refused with
`UnsupportedModelError` naming a feature, before any token is generated.

The README's supported-models table is this module's verdicts: `test_readme_table_is_these_results` fails
when they drift; `python tests/test_families.py` prints the table to paste.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import ForwardCounter, RandomTreeDrafter, hf_greedy
from families import FAMILIES, VOCAB, random_prompt

import specdec
from specdec import UnsupportedModelError
from specdec.layer_attention import layer_attention
from specdec.model_support import check_model_supported

#: Served, not refused: the families the issue tracker's users run (issue 19's list).
MUST_SERVE = ("llama", "llama3_128k", "mistral", "mixtral", "qwen2", "qwen2_windows", "qwen3", "gemma", "gemma2",
              "gemma3", "phi3", "cohere2", "starcoder2", "olmo2", "smollm3", "gpt2")
PROMPTS = [random_prompt(20, seed=1), random_prompt(9, seed=2), random_prompt(26, seed=3)]
NEW_TOKENS = 24
README = Path(__file__).resolve().parents[1] / "README.md"
TABLE_START, TABLE_END = "<!-- families table: tests/test_families.py -->", "<!-- end of families table -->"


def verdict(model) -> UnsupportedModelError | None:
    try:
        check_model_supported(model)
    except UnsupportedModelError as error:
        return error
    return None


def _drafters(draft):
    """(label, generate's drafter arguments): random trees are verified as drafted (controller=False), since the
    controller would cut most of them."""
    yield "none", {"drafter": "none"}
    yield "anpd", {"drafter": "anpd"}
    yield "random-tree", {"drafter": RandomTreeDrafter(VOCAB, seed=5, max_nodes=8), "controller": False}
    yield "draft_model", {"drafter": "draft_model", "drafter_options": {"model": draft, "k": 3}}


@pytest.mark.parametrize("name", list(FAMILIES))
def test_family_is_exact_or_refused(name: str) -> None:
    family = FAMILIES[name]
    model = family.build()
    refusal = verdict(model)
    if name in MUST_SERVE:
        assert refusal is None, f"{name} must be served: {refusal}"
    if refusal is not None:
        assert refusal.feature, str(refusal)
        with pytest.raises(UnsupportedModelError) as raised:
            specdec.generate(model, PROMPTS[0], drafter="none", max_new_tokens=NEW_TOKENS)
        assert raised.value.feature == refusal.feature
        return
    _assert_exact(name, model, family.build_draft())


def _assert_exact(name: str, model, draft) -> None:
    assert max(len(p) for p in PROMPTS) + NEW_TOKENS > layer_attention(model.config).longest_span
    expected = [hf_greedy(model, prompt, NEW_TOKENS) for prompt in PROMPTS]
    for label, drafting in _drafters(draft):
        for verifier in ("exact", "typical"):
            where = f"{name} {label} {verifier}"
            run = {**drafting, "verifier": verifier, "max_new_tokens": NEW_TOKENS, "temperature": 0.0}
            for prompt, want in zip(PROMPTS, expected):
                assert specdec.generate(model, prompt, **run).sequences[0] == want, f"{where} solo"
            assert specdec.generate(model, PROMPTS, **run).sequences == expected, f"{where} ragged"
            assert specdec.generate(model, PROMPTS, max_batch_size=2, **run).sequences == expected, \
                f"{where} continuous"



def _llama4_without_temperature_tuning():
    family = FAMILIES["llama4"]
    return replace(family, config_kwargs={**family.config_kwargs, "attn_temperature_tuning": False})


#: Other configurations of the families above: attention implementations that cannot be exact (refused from
#: the config, without a forward), and Llama 4 with its temperature tuning off (its chunked layers served).
VARIANTS = {
    "gemma2 on sdpa": lambda: FAMILIES["gemma2"].build(attn_implementation="sdpa"),
    "gpt_oss on sdpa": lambda: FAMILIES["gpt_oss"].build(attn_implementation="sdpa"),
    "llama on flash_attention_2": lambda: FAMILIES["llama"].build(attn_implementation="flash_attention_2"),
    "llama4, attn_temperature_tuning=False": lambda: _llama4_without_temperature_tuning().build(),
}


@pytest.mark.parametrize("name", [name for name in VARIANTS if "tuning" not in name])
def test_inexact_implementations_are_refused_without_a_forward(name: str) -> None:
    model = VARIANTS[name]()
    counter = ForwardCounter(model)
    with pytest.raises(UnsupportedModelError, match="attn_implementation=\"(eager|sdpa)\""):
        specdec.generate(model, PROMPTS[0], drafter="none", max_new_tokens=NEW_TOKENS)
    assert counter.calls == 0


def test_llama4_chunked_attention_is_exact_without_temperature_tuning() -> None:
    family = _llama4_without_temperature_tuning()
    _assert_exact("llama4 without tuning", family.build(), family.build_draft())


def _architecture(model) -> str:
    layers = layer_attention(model.config)
    kinds = ", ".join(kind.name.replace("_attention", "") + (f" {kind.window}" if kind.window else "")
                      + (f" {kind.chunk}" if kind.chunk else "") for kind in layers.kinds)
    return f"{type(model).__name__} ({model.config._attn_implementation}; {kinds})"


def family_table() -> str:
    """The README's table: one row per family with what this module found."""
    rows = ["| family | tried as (attention; layer kinds, window/chunk) | specdec |", "|---|---|---|"]
    builders = {name: family.build for name, family in FAMILIES.items()} | VARIANTS
    for name, build in builders.items():
        model = build()
        refusal = verdict(model)
        status = "served, exact" if refusal is None else f"refused: {refusal.feature}"
        rows.append(f"| {name} | {_architecture(model)} | {status} |")
    return "\n".join(rows)


def test_readme_table_is_these_results() -> None:
    text = README.read_text(encoding="utf-8")
    assert TABLE_START in text and TABLE_END in text, "README.md lost its families table markers"
    table = text.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0].strip()
    assert table == family_table(), "README's families table is stale: run `python tests/test_families.py`"


if __name__ == "__main__":  # print the README table
    torch.set_num_threads(1)
    sys.stdout.write(family_table() + "\n")
