"""Greedy + exact verifier must be token-identical to transformers' greedy generate."""

from __future__ import annotations

import pytest
import torch
from conftest import ARCHS, VOCAB, OracleDrafter, RandomTreeDrafter, hf_greedy, synthetic_costs, tiny_model

import specdec


def _prompts(seed: int, count: int = 2) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (int(torch.randint(3, 14, (1,), generator=generator)),),
                          generator=generator).tolist() for _ in range(count)]


def _flat_costs():
    """A cost table on which a wider verification costs next to nothing more (5 ms, +0.05 ms an input): the
    controller keeps an oracle's whole draft whatever this machine's timings say (measured, a curve read while
    another process shared the CPU once cut the 6-token drafts to 3)."""
    return synthetic_costs((0, 1, 2, 4, 8), (5e-3, 5.05e-3, 5.1e-3, 5.2e-3, 5.4e-3))


def _stats_add_up(out) -> None:
    stats = out.stats
    assert stats.accepted_tokens + stats.steps >= stats.new_tokens  # truncation at stops can only drop
    assert stats.new_tokens == sum(len(s) for s in out.sequences)
    # Per-row counts (what the harness reports per sample at batch > 1) add up to the totals.
    assert stats.row_new_tokens == [len(s) for s in out.sequences]
    assert sum(stats.row_steps) == stats.steps and sum(stats.row_accepted) == stats.accepted_tokens
    assert sum(stats.row_drafted) == stats.drafted_tokens and len(stats.row_tau) == len(out.sequences)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("drafter_kind", ["none", "random", "oracle"])
def test_greedy_matches_transformers(arch: str, drafter_kind: str) -> None:
    model = tiny_model(arch)
    for prompt in _prompts(seed=len(arch)):
        expected = hf_greedy(model, prompt, 24)
        if drafter_kind == "none":
            drafter = "none"
        elif drafter_kind == "random":
            drafter = RandomTreeDrafter(VOCAB, seed=3)
        else:
            drafter = OracleDrafter({0: expected}, k=6)
        # controller=False for random trees: verified as drafted (the controller would cut most of them)
        out = specdec.generate(model, prompt, drafter=drafter, verifier="exact", max_new_tokens=24,
                               controller=drafter_kind != "random",
                               cost_model=_flat_costs() if drafter_kind == "oracle" else None)
        assert out.sequences[0] == expected
        _stats_add_up(out)
        if drafter_kind == "random":
            assert out.stats.drafted_tokens > 0
        if drafter_kind == "none":
            assert out.stats.steps == 24
        if drafter_kind == "oracle":
            # every step accepts the whole 6-token guess plus a bonus, except at the budget's end
            assert out.stats.mean_accepted > 5.0
            assert out.stats.accepted_tokens + out.stats.steps == 24


def test_stats_add_up_exactly_without_stops() -> None:
    model = tiny_model("llama")
    out = specdec.generate(model, [5, 6, 7], drafter=RandomTreeDrafter(VOCAB, seed=1), verifier="exact",
                           max_new_tokens=40)
    stats = out.stats
    assert stats.accepted_tokens + stats.steps == stats.new_tokens == 40
    assert sum(stats.accepted_per_step) == stats.accepted_tokens
    assert len(stats.drafted_per_step) == stats.batch_steps
