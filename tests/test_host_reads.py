"""A decoding step reads device data into Python at most twice (issue 20's budget): on a GPU every read is
a synchronisation that stalls the step. Counted at the dispatch and Python levels (`host_reads`) for
everything a step runs: engine, runtime, controller, drafter and verifier."""

from __future__ import annotations

import pytest
from conftest import tiny_model
from specdec.benchmarks.host_reads import counting_host_reads, reads_per_step

BUDGET = 2
PROMPTS = [[5, 6, 7, 5, 6, 7, 5, 6], [1, 2, 3, 4, 1, 2, 3, 4, 1, 2], [9, 8, 9, 8, 9, 8], [40, 41, 42, 40, 41],
           [3, 4, 5, 6, 3, 4], [7, 7, 7, 7, 8], [10, 11, 12, 10, 11, 12], [20, 21, 20, 21, 20]]


@pytest.fixture(scope="module")
def target():
    return tiny_model("llama")


@pytest.mark.parametrize("controller", [True, False], ids=["controller", "own rule"])
@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("drafter", ["none", "anpd", "draft_model"])
def test_a_chain_step_reads_the_device_at_most_twice(target, drafter, batch, controller):
    # A draft model equal to the target drafts perfectly, so its chains run at full length; under the controller
    # without its exit (which reads once a depth: below).
    options = {"model": tiny_model("llama"), "goodput_exit": False} if drafter == "draft_model" else None
    per_step, _, out = reads_per_step(target, PROMPTS[:batch], drafter, options, controller, 24, eos_token_id=95)
    assert per_step and max(per_step) <= BUDGET, f"reads per step: {per_step}"
    if drafter != "none" and not controller:  # the drafting path really ran
        assert out.stats.drafted_tokens > 0


def test_the_counter_sees_the_reads_a_step_used_to_make(target):
    """The counter is not blind: the reads the engine made before issue 20 are all counted."""
    import torch

    t = torch.arange(6)
    with counting_host_reads() as counts:
        t.tolist()
        t.cpu()
        int(t[0])
        bool(t.any())
        torch.equal(t, t)
        t.nonzero()
        t[t > 2]
    assert sum(counts.values()) == 7, dict(counts)
    with torch.inference_mode(), counting_host_reads() as counts:  # the engine runs under inference mode
        int(t.max())
        t.tolist()
    assert sum(counts.values()) == 2, dict(counts)


@pytest.mark.parametrize("batch", [1, 8])
def test_auto_keeps_its_members_drafts_on_the_host_view(target, batch):
    """drafter="auto" merges its members' drafts row by row; the merged draft keeps their host views, so
    auto's steps stay within the budget too (before: 9.8 reads a step on average at batch 1, at most 14; 4.0 and
    11 at batch 8). Its draft_model member without the controller's exit, which reads once a depth (below)."""
    options = {"draft": tiny_model("llama"), "options": {"draft_model": {"goodput_exit": False}}}
    per_step, _, _ = reads_per_step(target, PROMPTS[:batch], "auto", options, True, 24, eos_token_id=95)
    assert per_step and max(per_step) <= BUDGET, f"reads per step: {per_step}"


@pytest.mark.parametrize("schedule", ["goodput", "own"])
@pytest.mark.parametrize("batch", [1, 8])
def test_layer_skip_chains_read_the_device_at_most_twice(target, schedule, batch):
    """layer_skip without an exit (neither its own rule's adaptive one, nor the controller's, `goodput_exit`):
    the host knows each row's length limit, eos is applied on the device, and the draft's sizes (with its
    scores) come back in one read. With an exit it reads which rows go on after every depth (exempt: it
    decides per drafted token; below)."""
    from specdec.drafters.layerskip.drafter import LayerSkipDrafter, LayerSkipOptions

    drafter = LayerSkipDrafter(LayerSkipOptions(skip={"mlp": [0]}, max_draft=4, schedule=schedule, adaptive=False,
                                                goodput_exit=False))
    per_step, _, out = reads_per_step(target, PROMPTS[:batch], drafter, None, schedule == "goodput", 24,
                                      eos_token_id=95)
    assert per_step and max(per_step) <= BUDGET, f"reads per step: {per_step}"
    if schedule == "own":
        assert out.stats.drafted_tokens > 0 and drafter.draft_forwards >= 3 * len(per_step) // 2


@pytest.mark.parametrize("batch", [1, 8])
def test_layer_skips_goodput_exit_reads_once_a_depth_more(target, batch):
    """The controller's exit (the default under it) reads the depth's confidences once per drafted depth
    but the last: at most max_draft - 1 reads more than the budget."""
    from specdec.drafters.layerskip.drafter import LayerSkipDrafter, LayerSkipOptions

    drafter = LayerSkipDrafter(LayerSkipOptions(skip={"mlp": [0]}, max_draft=4, adaptive=False))
    per_step, _, _ = reads_per_step(target, PROMPTS[:batch], drafter, None, True, 24, eos_token_id=95)
    assert per_step and max(per_step) <= BUDGET + 3, f"reads per step: {per_step}"


@pytest.mark.parametrize("batch", [1, 8])
def test_a_draft_models_goodput_exit_reads_once_a_depth_more(target, batch):
    """A draft model's chains under the controller's exit read the depth's confidences (and which rows drafted
    eos) once per drafted depth but the last: at most k_max - 1 reads more than the budget (`k_max` is 4 here)."""
    options = {"model": tiny_model("llama"), "k": 1, "k_max": 4}
    per_step, _, _ = reads_per_step(target, PROMPTS[:batch], "draft_model", options, True, 24, eos_token_id=95)
    assert per_step and max(per_step) <= BUDGET + 3, f"reads per step: {per_step}"


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("drafter, verifier", [
    ("none", "exact"), ("anpd", "exact"), ("anpd", "rejection"), ("anpd", "typical"),
    ("draft_model", "rejection"), ("draft_model", "exact"), ("ppd", "rejection"), ("ppd", "typical"), ("ppd", "exact"),
    ("layer_skip", "rejection"), ("layer_skip", "exact")])
def test_a_sampled_step_reads_the_device_at_most_twice(target, drafter, verifier, batch):
    """Sampling keeps the budget too (before: 6 reads a step for plain sampled decoding, 28 for PPD's trees under
    rejection sampling, 43-50 for a draft model's sampled chains): the rows that draw are known on the host, so the
    per-row random streams need no read; a sampled distribution without mass shows as a token outside the
    vocabulary, judged in the step's read-back; rejection sampling draws each node's coin up front and runs its
    levels and siblings as the draft's host view says. Each drafter's own rule, so that every step drafts."""
    from specdec.drafters.layerskip.drafter import LayerSkipDrafter, LayerSkipOptions

    options = {"model": tiny_model("llama", seed=1)} if drafter == "draft_model" else (
        {"random_init": True, "tree_size": 12} if drafter == "ppd" else None)
    if drafter == "layer_skip":  # without an exit (which reads once a depth: above)
        drafter = LayerSkipDrafter(LayerSkipOptions(skip={"mlp": [0]}, max_draft=4, schedule="own", adaptive=False,
                                                    goodput_exit=False))
    per_step, where, out = reads_per_step(target, PROMPTS[:batch], drafter, options, False, 16, verifier=verifier,
                                          temperature=0.8, seed=3)
    assert per_step and max(per_step) <= BUDGET, f"reads per step: {per_step}, {where.most_common(5)}"
    assert len(per_step) > 1 and (drafter == "none" or out.stats.drafted_tokens > 0)
