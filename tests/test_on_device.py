"""The runtime where the suite's models are put (conftest's TEST_DEVICE / TEST_DTYPE): what a user gets on a GPU
in bf16 when the suite runs there (`SPECDEC_TEST_DEVICE=cuda SPECDEC_TEST_DTYPE=bfloat16`), and the same checks on
the CPU in float32 in CI.

Greedy decoding with the exact verifier is compared with transformers' own greedy `generate` on the same model.
In float32 the two agree token for token. In a half precision they may part where the reference's two best tokens
are a near tie: a verification forward of k+1 inputs rounds a position's logits differently from a one-token
decoding step, as any speculative decoder's does. The check allows exactly that: at the first difference, the
token specdec chose must be within the dtype's rounding of the reference's best logit at that position, read from
a fresh forward of the reference's own prefix; a token that is clearly worse fails.
"""

from __future__ import annotations

import time

import pytest
import torch
from conftest import TEST_DTYPE, hf_greedy, tiny_model
from specdec.benchmarks.ties import parting

import specdec
from specdec.registry import known_names

PROMPTS = [[5, 6, 7, 5, 6, 7, 5, 6, 7, 5], [11, 12, 13], [40, 41, 42, 43, 40, 41, 42, 43]]
NEW_TOKENS = 24
ARCHS = ["llama", "qwen2"]


def drafter_options(drafter: str) -> dict | None:
    """Test-sized options, with the draft models on the test device (from `tiny_model`)."""
    from test_composition import DRAFTER_OPTIONS_FOR_TINY_MODEL

    if drafter == "auto":
        return {"draft": tiny_model("llama", seed=1)}
    return DRAFTER_OPTIONS_FOR_TINY_MODEL.get(drafter, lambda _: None)(None)


#: Units in the last place a tie may span here (`benchmarks.ties`, whose bench default is 4): random tiny models
#: round more of their small logits away than a trained one.
TIE_UNITS = 16


def assert_greedy_up_to_ties(model, prompt: list[int], ours: list[int], reference: list[int]) -> None:
    assert len(ours) == len(reference)
    parted = parting(model, prompt, ours, reference, units=TIE_UNITS)
    assert parted is None or parted["tie"], (
        f"token {parted['position']}: specdec chose {ours[parted['position']]}, transformers "
        f"{reference[parted['position']]}; the chosen token's logit is {parted['gap']} below the best ({TEST_DTYPE}, "
        f"tolerance {parted['tolerance']:.3g}): not a rounding tie")


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("drafter", known_names("drafter"))
def test_greedy_matches_transformers_on_the_test_device(arch: str, drafter: str) -> None:
    model = tiny_model(arch)
    out = specdec.generate(model, PROMPTS, drafter=drafter, drafter_options=drafter_options(drafter),
                           verifier="exact", max_new_tokens=NEW_TOKENS)
    references = [hf_greedy(model, prompt, NEW_TOKENS) for prompt in PROMPTS]
    for prompt, ours, reference in zip(PROMPTS, out.sequences, references):
        assert_greedy_up_to_ties(model, prompt, ours, reference)
    if TEST_DTYPE == torch.float32:
        assert out.sequences == references


def test_the_tie_check_fails_a_wrong_token() -> None:
    """The tolerance is not so loose that any token passes: the reference's worst token fails it."""
    model = tiny_model("llama")
    reference = hf_greedy(model, PROMPTS[0], 4)
    with torch.no_grad():
        logits = model(torch.tensor([PROMPTS[0]], device=model.device)).logits[0, -1]
    worst = int(logits.argmin())
    with pytest.raises(AssertionError, match="not a rounding tie"):
        assert_greedy_up_to_ties(model, PROMPTS[0], [worst, *reference[1:]], reference)


def test_phase_timings_add_up_on_the_test_device() -> None:
    """Draft, verify and other time (CUDA events on a GPU) are each measured and sum to no more than the call."""
    model = tiny_model("llama")
    options = {"model": tiny_model("llama", seed=1), "k": 3, "schedule": "constant"}
    wall = time.perf_counter()
    out = specdec.generate(model, PROMPTS, drafter="draft_model", drafter_options=options, verifier="exact",
                           max_new_tokens=NEW_TOKENS)
    wall = time.perf_counter() - wall
    stats = out.stats
    assert stats.draft_time > 0 and stats.verify_time > 0 and stats.other_time >= 0
    assert stats.wall_time <= wall * 1.01
    assert stats.prefill_time + stats.draft_time + stats.verify_time + stats.other_time <= stats.wall_time * 1.01
