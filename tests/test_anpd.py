"""ANPD drafter: n-gram table semantics, committed-only updates, greedy identity, options."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest
import torch
from conftest import VOCAB, hf_greedy, tiny_model
from hypothesis import given, settings
from hypothesis import strategies as st
from specdec.drafters.anpd import AnpdDrafter, AnpdOptions, draft_chain, draft_tree
from specdec.drafters.ngram_table import NGramTable

import specdec
from specdec import registry
from specdec.draft import Draft, Verdict
from specdec.errors import DrafterError, PluginOptionsError
from specdec.plugins import DecodeState
from specdec.sampling import SamplingParams

NO_EOS: frozenset[int] = frozenset()


pytestmark = pytest.mark.usefixtures("one_thread")


def reference_counts(tokens: list[int], max_n: int) -> dict[tuple[int, ...], tuple[Counter, dict[int, int]]]:
    """Brute force: every context of 1..N-1 tokens -> (counts of the next token, last position)."""
    table: dict[tuple[int, ...], tuple[Counter, dict[int, int]]] = defaultdict(lambda: (Counter(), {}))
    for position, token in enumerate(tokens):
        for width in range(1, max_n):
            if position - width < 0:
                break
            counts, last = table[tuple(tokens[position - width : position])]
            counts[token] += 1
            last[token] = position
    return dict(table)


def assert_matches_reference(table: NGramTable, tokens: list[int]) -> None:
    reference = reference_counts(tokens, table.max_n)
    assert set(table.contexts()) == set(reference)
    for context, (counts, last) in reference.items():
        entry = table.entry(context)
        assert entry.counts == dict(counts)
        ranked = sorted(counts, key=lambda t: (counts[t], last[t]), reverse=True)
        assert list(entry.top) == ranked[: table.keep]
    assert table.length == len(tokens)
    assert table.tail == tokens[-(table.max_n - 1) :]


# -- the table, on hand-made sequences ------------------------------------------------------------

def test_counts_each_level_once_without_a_boundary_ngram() -> None:
    table = NGramTable(3, tokens=[1, 2, 1, 2])
    assert table.entry((1,)).counts == {2: 2}
    assert table.entry((2,)).counts == {1: 1}
    assert table.entry((1, 2)).counts == {1: 1}
    assert table.entry((2, 1)).counts == {2: 1}
    assert len(table) == 4  # no end->start n-gram such as (2,) -> 1 counted twice


def test_a_built_table_leaves_the_garbage_collector_nothing_to_track() -> None:
    """Objects the collector tracks make every full collection of the process slower; a table is
    int-valued dicts and tuples of ints, so after one collection it adds a handful, not one per context."""
    import gc
    import random

    rng = random.Random(0)
    tokens = [rng.randrange(50) for _ in range(2000)]
    gc.collect()
    before = len(gc.get_objects())
    table = NGramTable(4, keep=2, tokens=tokens)
    table.extend(tokens[:100])
    gc.collect()
    assert len(table) > 2000
    assert len(gc.get_objects()) - before < 20
    assert table.entry(tuple(tokens[:1])).top  # still readable


def test_most_frequent_wins_and_ties_go_to_the_most_recent() -> None:
    table = NGramTable(3, tokens=[1, 2, 3, 1, 2, 4])
    assert table.predict([1, 2]) == 4  # 3 and 4 seen once each: 4 is newer
    table.extend([1, 2, 3])
    assert table.predict([1, 2]) == 3  # now 3 twice, 4 once


def test_longest_seen_context_wins() -> None:
    tokens = [7, 1, 2, 8, 9, 1, 2, 5, 7, 1, 2]
    assert NGramTable(4, tokens=tokens).predict(tokens) == 8  # 4-gram (7, 1, 2) -> 8
    assert NGramTable(3, tokens=tokens).predict(tokens) == 5  # trigram (1, 2) -> 8 or 5, 5 newer


def test_falls_back_to_shorter_contexts_then_misses() -> None:
    table = NGramTable(5, tokens=[3, 4, 5, 6, 9, 5])
    assert table.predict([4, 6, 9, 5]) == 6  # only the bigram (5,) was seen
    assert table.predict([5]) == 6  # a context shorter than N-1 uses the levels it can
    assert table.predict([6, 42]) is None  # 42 never seen
    assert table.predict([]) is None


def test_min_match_never_drafts_from_a_shorter_context() -> None:
    table = NGramTable(5, keep=2, tokens=[3, 4, 5, 6, 9, 1, 2, 7, 8, 1, 2, 7])
    assert table.predict([4, 6, 9, 5]) == 6  # only the one-token context (5,) was seen: -> 6
    assert table.predict([4, 6, 9, 5], min_width=2) is None
    assert table.predict([0, 1, 2], min_width=2) == 7  # (1, 2) -> 7 twice
    assert table.predict([0, 1, 2], min_width=3) is None
    # A chain ends where only a one-token match remains; a tree gets no node from one either.
    assert draft_chain(table, [8, 5], 3, True, 0, NO_EOS)[:1] == [6]
    assert draft_chain(table, [8, 5], 3, True, 0, NO_EOS, min_match=2) == []
    assert draft_chain(table, [8, 5], 2, False, 17, NO_EOS, min_match=2) == [17, 17]
    assert draft_chain(table, [0, 1, 2], 1, True, 0, NO_EOS, min_match=2) == [7]
    assert draft_tree(table, [8, 5], 3, 2, 6, True, 0, NO_EOS, min_match=2) == ([], [])
    assert draft_tree(table, [8, 5], 3, 2, 6, True, 0, NO_EOS)[0][:1] == [6]


def test_chained_draft_uses_the_draft_so_far() -> None:
    tokens = [1, 2, 3, 1, 2, 4, 1, 2]
    table = NGramTable(3, tokens=tokens)
    assert draft_chain(table, table.tail, 4, True, 0, NO_EOS) == [4, 1, 2, 4]


def test_chain_hops_between_passages() -> None:
    # "5 6 7" occurs in one place and "7 8 9" in another: a span copy stops at 7, ANPD keeps going.
    tokens = [5, 6, 7, 30, 31, 7, 8, 9, 40, 5, 6]
    table = NGramTable(2, tokens=tokens)
    assert draft_chain(table, table.tail, 3, True, 0, NO_EOS) == [7, 8, 9]


def test_miss_stops_or_pads_like_the_paper() -> None:
    table = NGramTable(3, tokens=[1, 2, 3])
    assert draft_chain(table, [1], 5, True, 0, NO_EOS) == [2, 3]
    assert draft_chain(table, [1], 5, False, 0, NO_EOS) == [2, 3, 0, 0, 0]
    assert draft_chain(table, [9], 3, False, 17, NO_EOS) == [17, 17, 17]


def test_draft_ends_at_eos() -> None:
    table = NGramTable(3, tokens=[1, 2, 3, 1, 2, 3])
    assert draft_chain(table, [1], 6, True, 0, frozenset([3])) == [2, 3]


def test_tree_puts_the_top_chain_first_then_siblings() -> None:
    # After 1: 2 (twice) or 5 (once); after 2: 3; after 5: 6.
    table = NGramTable(2, keep=2, tokens=[1, 2, 3, 1, 5, 6, 1, 2, 3, 1])
    tokens, parents = draft_tree(table, table.tail, 3, 2, 5, True, 0, NO_EOS)
    assert tokens[:3] == [2, 3, 1] and parents[:3] == [-1, 0, 1]  # the chain of top choices
    assert (5, -1) in list(zip(tokens, parents))  # the runner-up is a sibling of the first node
    assert len(tokens) == 5
    assert all(p < i for i, p in enumerate(parents))
    chain, _ = draft_tree(table, table.tail, 3, 1, 5, True, 0, NO_EOS)
    assert chain == draft_chain(table, table.tail, 3, True, 0, NO_EOS)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 5), max_size=60), st.integers(2, 5), st.integers(1, 3), st.integers(0, 60))
def test_incremental_table_equals_brute_force(tokens: list[int], max_n: int, keep: int, split: int) -> None:
    table = NGramTable(max_n, keep, tokens[:split])
    table.extend(tokens[split:])
    assert_matches_reference(table, tokens)


# -- the drafter: updates only with committed tokens -----------------------------------------------

def _state(row_ids: list[int], sequences: list[list[int]], budget: int = 100) -> DecodeState:
    return DecodeState(row_ids=row_ids, sequences=sequences, max_depth=torch.full((len(row_ids),), budget),
                       sampling=SamplingParams(), generator=torch.Generator(), target=None)


def test_prepare_builds_the_tables_of_rows_asked_to_draft_and_propose_only_looks_up() -> None:
    """The tables are one-off work done in `prepare` (setup time), so the draft cost the controller learns
    is the lookup's; rows the controller keeps plain get no table."""
    drafter = AnpdDrafter(AnpdOptions(n=3, k=4))
    sequences = [[1, 2, 3, 1, 2, 3, 1, 2], [4, 5, 4, 5, 4]]
    state = _state([0, 1], sequences)
    state.draft_budget = torch.tensor([4, 0])
    drafter.prepare(state)
    assert set(drafter.tables) == {0}
    assert_matches_reference(drafter.tables[0], sequences[0])
    built = drafter.tables[0]
    draft = drafter.propose(state)
    assert drafter.tables[0] is built and 1 not in drafter.tables
    assert draft.num_nodes.tolist() == [4, 0]


def test_committed_tokens_are_counted_when_the_row_next_drafts_never_rejected_drafts() -> None:
    drafter = AnpdDrafter(AnpdOptions(n=3, k=4))
    sequences = [[1, 2, 3, 1, 2, 3, 1, 2], [4, 5, 4, 5, 4]]
    draft = drafter.propose(_state([0, 1], sequences))
    assert draft.q is None
    assert draft.num_nodes.tolist() == [4, 4]
    assert draft.tokens[0].tolist() == [3, 1, 2, 3] and draft.tokens[1].tolist() == [5, 4, 5, 4]
    # row 0 accepts one node then gets bonus 9; row 1 accepts none, bonus 7.
    verdict = Verdict(torch.tensor([[0], [-1]]), torch.tensor([1, 0]), torch.tensor([9, 7]))
    committed = [[3, 9], [7]]
    for sequence, new in zip(sequences, committed):
        sequence.extend(new)
    drafter.observe(_state([0, 1], sequences), draft, verdict, committed, None)
    assert [drafter.tables[row].length for row in (0, 1)] == [8, 5]  # counted when the row next drafts
    sequences[1] += [4, 5]  # row 1 commits two more tokens without drafting (the controller rests it)
    drafter.propose(_state([0, 1], sequences))
    for row, sequence in enumerate(sequences):
        assert_matches_reference(drafter.tables[row], sequence)
    assert drafter.tables[0].entry((3,)).counts == {1: 2, 9: 1}  # the rejected 3 -> 1 was not counted
    assert drafter.tables[0].entry((9, 1)) is None and drafter.tables[1].entry((7, 5)) is None


def test_rows_leaving_the_batch_are_dropped() -> None:
    drafter = AnpdDrafter()
    drafter.propose(_state([0, 1, 2], [[1, 2], [3, 4], [5, 6]]))
    drafter.propose(_state([0, 2], [[1, 2], [5, 6]]))
    assert set(drafter.tables) == {0, 2}


class RecordingAnpd(AnpdDrafter):
    """Keeps each row's table after every propose, so a test can inspect it after generate() returns
    (a row's table is dropped once the row leaves the batch)."""

    final_tables: dict[int, NGramTable]

    def propose(self, state):
        draft = super().propose(state)
        self.final_tables = getattr(self, "final_tables", {})
        self.final_tables.update({row: self.tables[row] for row in state.row_ids if row in self.tables})
        return draft


def test_table_after_generation_is_prompt_plus_output() -> None:
    model = tiny_model("llama")
    prompts = [[5, 6, 7, 8, 5, 6, 7, 8, 9], [10, 11, 10, 11, 12, 10]]
    drafter = RecordingAnpd(AnpdOptions(n=4, k=5))
    out = specdec.generate(model, prompts, drafter=drafter, max_new_tokens=20)
    for row, prompt in enumerate(prompts):
        # What the table counted by its last draft is a prefix of the committed text: with the rest counted,
        # it is exactly the table of prompt + output (never a rejected draft).
        table, full = drafter.final_tables[row], prompt + out.sequences[row]
        assert len(prompt) < table.length <= len(full)
        table.extend(full[table.length :])
        assert_matches_reference(table, full)


# -- greedy identity --------------------------------------------------------------------------------

REPETITIVE = [[5, 6, 7, 8, 5, 6, 7, 8, 9, 10, 5, 6], [40, 41, 42, 40, 41, 43, 40, 41, 42, 44, 40, 41, 42, 40]]


@pytest.mark.parametrize(("arch", "options"), [
    ("llama", {}), ("llama", {"branches": 3}), ("llama", {"stop_on_miss": False, "filler_token": 1}),
    ("llama", {"n": 2, "k": 3}), ("llama", {"branches": 2, "max_nodes": 20, "k": 9}),
    ("gpt2", {}), ("gpt2", {"branches": 3}), ("qwen2", {}),
])
def test_greedy_identical_to_transformers(arch: str, options: dict) -> None:
    model = tiny_model(arch)
    for prompt in REPETITIVE:
        expected = hf_greedy(model, prompt, 32)
        out = specdec.generate(model, prompt, drafter="anpd", drafter_options=options, max_new_tokens=32)
        assert out.sequences[0] == expected
        assert out.stats.new_tokens == 32


@pytest.mark.parametrize("options", [{}, {"branches": 3}, {"schedule": "heuristic"},
                                     {"schedule": "heuristic", "min_match": 2}, {"branches": 2, "min_match": 3}])
def test_batch_of_different_lengths_identical_per_row(options: dict) -> None:
    model = tiny_model("llama", seed=1)
    generator = torch.Generator().manual_seed(0)
    prompts = REPETITIVE + [torch.randint(0, VOCAB, (n,), generator=generator).tolist() for n in (3, 20, 7)]
    # The drafter's own rule drafts every step: the goodput controller rightly stops verifying drafts this
    # random model rejects in a static batch, and this test is about ragged rows that do verify drafts.
    out = specdec.generate(model, prompts, drafter="anpd", drafter_options=options, max_new_tokens=28,
                           controller=False)
    for row, prompt in enumerate(prompts):
        assert out.sequences[row] == hf_greedy(model, prompt, 28), f"row {row}"
    assert out.stats.accepted_tokens > 0  # drafts were really used, not all empty


def test_heuristic_schedule_stops_drafting_for_failing_rows() -> None:
    """Per row: a row whose drafts keep failing decodes plainly (probing now and then), so it drafts
    less than with the paper's constant K, while a row whose drafts pass keeps drafting; the output
    is unchanged and each row drafts exactly as it does alone."""
    model = tiny_model("llama", seed=1)
    generator = torch.Generator().manual_seed(0)
    prompts = REPETITIVE + [torch.randint(0, VOCAB, (12,), generator=generator).tolist()]
    runs = {schedule: specdec.generate(model, prompts, drafter="anpd", drafter_options={"schedule": schedule},
                                       max_new_tokens=40) for schedule in ("constant", "heuristic")}
    assert runs["heuristic"].sequences == runs["constant"].sequences
    constant, heuristic = runs["constant"].stats, runs["heuristic"].stats
    assert heuristic.drafted_tokens < constant.drafted_tokens
    assert heuristic.acceptance_rate > constant.acceptance_rate
    alone = [specdec.generate(model, p, drafter="anpd", drafter_options={"schedule": "heuristic"},
                              max_new_tokens=40).stats.row_drafted[0] for p in prompts]
    assert heuristic.row_drafted == alone


def test_rows_with_different_budgets_finish_apart() -> None:
    model = tiny_model("llama")
    model.config.max_position_embeddings = 40  # the long prompt hits the context limit early
    prompts = [[3, 4, 3, 4, 3] * 6, [7, 8, 9, 7, 8]]
    out = specdec.generate(model, prompts, drafter="anpd", max_new_tokens=20)
    assert [len(s) for s in out.sequences] == [10, 20]
    for row, prompt in enumerate(prompts):
        assert out.sequences[row] == hf_greedy(model, prompt, len(out.sequences[row]))


def test_reports_its_own_stats() -> None:
    out = specdec.generate(tiny_model("llama"), REPETITIVE[0], drafter="anpd", max_new_tokens=12)
    own = out.stats.drafter_stats
    assert own["propose_seconds"] >= own["table_build_seconds"] > 0
    assert own["observe_seconds"] > 0 and own["contexts_at_end"] > 0


def test_is_the_default_drafter() -> None:
    out = specdec.generate(tiny_model("llama"), [1, 2, 3, 1, 2], max_new_tokens=4)
    assert out.drafter == "anpd"
    assert registry.load_class("drafter", "anpd") is AnpdDrafter


# -- options ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [{"n": 1}, {"k": 0}, {"branches": 0}, {"max_nodes": 0, "branches": 2},
                                 {"max_nodes": 9}, {"nn": 3}, {"k": "many"}, {"filler_token": -1},
                                 {"schedule": "heuristic", "branches": 2}, {"schedule": "sometimes"},
                                 {"min_match": 0}, {"n": 3, "min_match": 3}])
def test_bad_options_are_rejected_before_model_work(bad: dict) -> None:
    with pytest.raises(PluginOptionsError):
        specdec.generate(object(), [1, 2], drafter="anpd", drafter_options=bad)


def test_filler_outside_vocabulary_is_reported() -> None:
    with pytest.raises(DrafterError, match="filler_token"):
        specdec.generate(tiny_model("llama"), [1, 2], drafter="anpd",
                         drafter_options={"stop_on_miss": False, "filler_token": VOCAB}, max_new_tokens=2)


def test_engine_node_limit_is_respected() -> None:
    model = tiny_model("llama")
    prompt = REPETITIVE[0]
    out = specdec.generate(model, prompt, drafter="anpd", drafter_options={"branches": 4, "k": 8},
                           max_new_tokens=16, max_draft_nodes=5)
    assert max(out.stats.drafted_per_step) <= 5
    assert out.sequences[0] == hf_greedy(model, prompt, 16)


def test_draft_from_rows_is_a_chain() -> None:
    drafter = AnpdDrafter(AnpdOptions(k=3))
    draft: Draft = drafter.propose(_state([0], [[1, 2, 3, 1, 2]]))
    assert draft.parents[0].tolist() == [-1, 0, 1]
