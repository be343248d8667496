"""`compile=True`: the verification forward runs under torch.compile with static shapes (a fixed cache
capacity, widths padded to powers of two) and stays greedy-identical to eager decoding, on chains at batch 1
and on wrong-branch trees in a ragged batch."""

from __future__ import annotations

import pytest
from conftest import RandomTreeDrafter, hf_greedy, tiny_model

import specdec
from specdec.target import static_width

NEW = 16


def test_static_widths_are_powers_of_two():
    assert [static_width(w) for w in (1, 2, 3, 4, 5, 9, 16, 17)] == [1, 2, 4, 4, 8, 16, 16, 32]


def test_compiled_verification_is_greedy_identical():
    model = tiny_model("qwen2")
    prompts = [[5, 6, 7, 5, 6, 7, 5, 6], [1, 2, 3]]
    expected = [hf_greedy(model, p, NEW) for p in prompts]
    chain = specdec.generate(model, prompts[0], drafter="anpd", max_new_tokens=NEW, compile=True, controller=False)
    assert chain.sequences[0] == expected[0] and chain.stats.drafted_tokens > 0
    trees = specdec.generate(model, prompts, drafter=RandomTreeDrafter(model.config.vocab_size, seed=1, max_nodes=6),
                             max_new_tokens=NEW, compile=True, controller=False)
    assert trees.sequences == expected


def test_compile_refuses_the_padded_mode():
    with pytest.raises(ValueError, match="compile=True"):
        specdec.generate(tiny_model("llama"), [1, 2, 3], max_new_tokens=2, compile=True, batch_mode="padded")
