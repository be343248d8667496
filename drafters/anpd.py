"""ANPD: Adaptive N-gram Parallel Decoding (Ou, Chen, Tian, NAACL 2024 Industry).

A model-free drafter. Per request it keeps n-gram counts (n = 2..N) over the prompt's token ids and
every committed token (accepted drafts and the bonus, never rejected drafts). A draft of up to K
tokens is built one token at a time: each lookup takes the longest context (N-1 tokens down to 1)
of (committed tokens + draft so far) that has been seen, and proposes its most frequent
continuation. Unlike prompt lookup it can hop between places in the text mid-draft.

Beyond the paper, `branches > 1` makes a token tree: the top few continuations of each lookup
become sibling nodes, expanded best-first (paths that deviate least from the top choices first)
until `max_nodes`. Drafts are deterministic, so q is None.

Match length (`min_match`, beyond the paper): a continuation found after a one-token context is
often wrong (on the default model about 30% of such drafted tokens were accepted, against 50-90%
after 2-4 tokens of context). On a CPU every verified token costs compute, alone and more so in a
batch (benchmarks/results/batching), so `min_match=2` ends a draft where only a one-token match
remains (docs/anpd.md has the measurements). The default stays the paper's.
"""

from __future__ import annotations

import heapq
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from specdec.draft import Draft
from specdec.errors import DrafterError
from specdec.plugins import DecodeState, Drafter, GenerationContext

from .draft_schedule import HeuristicLength
from .ngram_table import NGramTable


class AnpdOptions(BaseModel):
    """Defaults are the paper's recommended N = 5, K = 7 (its Figures 3-5 and case study)."""

    model_config = ConfigDict(extra="forbid")

    n: int = Field(5, ge=2, le=16, description="largest n-gram order N; levels n = N..2 (context N-1..1 tokens)")
    k: int = Field(7, ge=1, le=64, description="draft length K (tree depth in tree mode)")
    stop_on_miss: bool = Field(True, description="end the draft at the first lookup miss; False pads with "
                                                 "filler_token up to K like the paper")
    filler_token: int = Field(0, ge=0, description="token id padded in after a miss when stop_on_miss is False")
    branches: int = Field(1, ge=1, le=16, description="continuations per lookup: 1 = chain, >1 = token tree")
    max_nodes: int | None = Field(None, ge=1, le=1024, description="node budget of a tree (default k * branches)")
    schedule: Literal["goodput", "constant", "heuristic"] = Field(
        "goodput", description="goodput: the core controller sets each row's draft length (up to k) from measured "
                               "step costs and acceptance, 0 = decode plainly; constant: draft up to k every step "
                               "(the paper); heuristic: per row, +2 after a fully accepted draft, else -1, between 0 "
                               "and k (a row whose drafts keep failing decodes plainly and probes every probe_after "
                               "steps)")
    probe_after: int = Field(4, ge=1, le=64, description="heuristic: plain steps before a row drafts 1 token again")
    min_match: int = Field(1, ge=1, le=15, description="shortest matched context (tokens) a lookup may draft from; "
                                                       "1 = the paper's fallback down to bigrams, 2 = never draft "
                                                       "from a one-token match (see 'Match length' above)")

    @model_validator(mode="after")
    def _check_budget(self) -> AnpdOptions:
        if self.branches == 1 and self.max_nodes is not None and self.max_nodes != self.k:
            raise ValueError("max_nodes is the tree budget; with branches=1 (a chain) set k instead")
        if self.min_match > self.n - 1:
            raise ValueError(f"min_match={self.min_match} can never match: the longest context is n - 1 = {self.n - 1}")
        if self.branches > 1 and self.schedule == "heuristic":
            raise ValueError('schedule="heuristic" adapts a chain\'s length; a tree (branches > 1) keeps depth k')
        return self

    @property
    def node_budget(self) -> int:
        return self.max_nodes if self.max_nodes is not None else self.k * self.branches


#: Prior chance that a continuation found after a context of w tokens is accepted (the docstring's
#: measurements: ~30% after one token, 50-90% after 2-4); times its share of that context's counts, it
#: scores a node for the goodput controller, which calibrates the scale per row online.
MATCH_RELIABILITY = (0.0, 0.3, 0.55, 0.7, 0.85)


def match_score(entry, width: int, token: int) -> float:
    """P(accept) prior of `token` continuing a context matched over `width` tokens (`entry` = its counts)."""
    if entry is None:
        return 0.0
    reliability = MATCH_RELIABILITY[min(width, len(MATCH_RELIABILITY) - 1)]
    return reliability * entry.counts.get(token, 0) / max(entry.total, 1)


def draft_chain(
    table: NGramTable, context: list[int], depth: int, stop_on_miss: bool, filler: int, eos: frozenset[int],
    min_match: int = 1, scores: list[float] | None = None,
) -> list[int]:
    """Alg. 1's draft loop: `depth` chained lookups, each on the committed context plus the draft so far.
    With `scores` (a list), each node's path score is appended to it."""
    context = list(context)
    draft: list[int] = []
    path = 1.0
    for _ in range(depth):
        entry, width = table.lookup_width(context, min_match)
        token = entry.top[0] if entry is not None else None
        if token is None:
            if stop_on_miss:
                break
            token = filler
        if scores is not None:
            path *= match_score(entry, width, token)
            scores.append(path)
        draft.append(token)
        if token in eos:  # nothing after an end-of-sequence token can be emitted
            break
        context.append(token)
    return draft


def draft_tree(
    table: NGramTable,
    context: list[int],
    depth: int,
    branches: int,
    budget: int,
    stop_on_miss: bool,
    filler: int,
    eos: frozenset[int],
    min_match: int = 1,
    scores: list[float] | None = None,
) -> tuple[list[int], list[int]]:
    """Best-first token tree: a candidate's cost is the sum of its path's continuation ranks (0 =
    most frequent), so the chain of top choices comes first, then one-deviation paths, shallow
    before deep. Returns (tokens, parents) with parents before children; path scores are appended
    to `scores` when it is a list."""
    tokens: list[int] = []
    parents: list[int] = []
    order = 0  # unique tie-breaker so the heap never compares contexts
    heap: list[tuple[int, int, int, int, int, list[int], float]] = []

    def push_children(parent: int, cost: int, node_depth: int, path_context: list[int], path: float) -> None:
        nonlocal order
        if node_depth >= depth:
            return
        entry, width = table.lookup_width(path_context, min_match)
        if entry is None:
            choices = [] if stop_on_miss else [filler]
        else:
            choices = entry.top[:branches]
        for rank, token in enumerate(choices):
            score = path * match_score(entry, width, token)
            heapq.heappush(heap, (cost + rank, node_depth + 1, order, token, parent, path_context, score))
            order += 1

    push_children(-1, 0, 0, list(context), 1.0)
    while heap and len(tokens) < budget:
        cost, node_depth, _, token, parent, parent_context, score = heapq.heappop(heap)
        tokens.append(token)
        parents.append(parent)
        if scores is not None:
            scores.append(score)
        if token not in eos:
            push_children(len(tokens) - 1, cost, node_depth, parent_context + [token], score)
    return tokens, parents


class AnpdDrafter(Drafter):
    name = "anpd"
    description = "ANPD: multi-level n-gram lookup over prompt + output, no model (chain, or tree with branches>1)."
    Options = AnpdOptions

    def __init__(self, options: AnpdOptions | None = None) -> None:
        super().__init__(options)
        self.options: AnpdOptions
        self.tables: dict[int, NGramTable] = {}  # per row id
        self.eos: frozenset[int] = frozenset()
        self.engine_node_limit: int | None = None
        self.lengths: HeuristicLength | None = None  # per-row draft length (schedule="heuristic")
        self._stats: dict[str, Any] = {}

    def setup(self, context: GenerationContext) -> None:
        if not self.options.stop_on_miss and self.options.filler_token >= context.vocab_size:
            raise DrafterError(f"anpd: filler_token {self.options.filler_token} is outside the target's "
                               f"vocabulary of {context.vocab_size}")
        self.tables = {}
        self._stats = {"propose_seconds": 0.0, "observe_seconds": 0.0, "table_build_seconds": 0.0,
                       "empty_drafts": 0, "contexts_at_end": 0}
        self.engine_node_limit = context.max_draft_nodes
        self.lengths = (HeuristicLength(self.options.k, self.options.k, floor=0, probe_after=self.options.probe_after)
                        if self.options.schedule == "heuristic" else None)
        config = getattr(context.model, "generation_config", None)
        eos = getattr(config, "eos_token_id", None)
        self.eos = frozenset([eos] if isinstance(eos, int) else (eos or ()))

    def _table(self, row: int, sequence: list[int]) -> NGramTable:
        """The row's table, caught up with the tokens committed since the row last drafted (a row's committed
        sequence only grows), or built from the whole sequence when missing."""
        table = self.tables.get(row)
        if table is None or table.length > len(sequence):  # (longer than the sequence: not this row's)
            started = time.perf_counter()
            table = NGramTable(self.options.n, self.options.branches, sequence)
            self.tables[row] = table
            self._count("table_build_seconds", time.perf_counter() - started)
        elif table.length < len(sequence):
            table.extend(sequence[table.length :])
        return table

    def _count(self, key: str, value: float) -> None:
        if self._stats:  # empty when used without setup() (direct calls in tests)
            self._stats[key] += value

    def prepare(self, state: DecodeState) -> None:
        """Build the n-gram tables of rows asked to draft for the first time, from their committed tokens
        (the prompt): one-off work (~2 ms per 1000 tokens) that counts as setup, like a draft model's
        prefill, so that what the goodput controller learns as anpd's cost per step is the lookup alone.
        Built lazily in `propose` instead, a first look behind a long prompt cost 10 plain steps of a small
        model; anpd then read as a costly drafter whose probes, priced with that catch-up, never looked
        worth it, and it stayed off for the rest of the process."""
        budgets = state.draft_budgets()
        for b, (row, sequence) in enumerate(zip(state.row_ids, state.sequences)):
            if row not in self.tables and (budgets is None or budgets[b] > 0):
                self._table(row, sequence)

    def propose(self, state: DecodeState) -> Draft:
        started = time.perf_counter()
        options = self.options
        if len(self.tables) > state.batch_size:  # rows that left the batch are never seen again
            live = set(state.row_ids)
            self.tables = {row: table for row, table in self.tables.items() if row in live}
        max_depth = state.max_depths()
        budgets = state.draft_budgets()
        rows = []
        row_scores: list[list[float]] | None = [] if budgets is not None else None  # for the controller
        for b, (row, sequence) in enumerate(zip(state.row_ids, state.sequences)):
            wanted = options.k if self.lengths is None else self.lengths.length(row)
            depth = max(0, min(wanted, max_depth[b], self.engine_node_limit or options.k))
            if budgets is not None:  # the controller verifies no more than this many nodes of the row
                depth = min(depth, budgets[b])
            scores: list[float] | None = [] if row_scores is not None else None
            if depth == 0:  # nothing asked of this row: no lookup (nor a table to build for it)
                rows.append(([], []))
                if row_scores is not None:
                    row_scores.append([])
                continue
            table = self._table(row, sequence)
            if options.branches == 1:
                tokens = draft_chain(table, table.tail, depth, options.stop_on_miss, options.filler_token, self.eos,
                                     options.min_match, scores)
                parents = list(range(-1, len(tokens) - 1))
            else:
                budget = options.node_budget
                if self.engine_node_limit is not None:
                    budget = min(budget, self.engine_node_limit)
                if budgets is not None:
                    budget = min(budget, budgets[b])
                tokens, parents = draft_tree(table, table.tail, depth, options.branches, budget,
                                             options.stop_on_miss, options.filler_token, self.eos, options.min_match,
                                             scores)
            rows.append((tokens, parents))
            if row_scores is not None:
                row_scores.append(scores)
            if not tokens:
                self._count("empty_drafts", 1)
        draft = Draft.from_rows(rows, scores=row_scores)
        self._count("propose_seconds", time.perf_counter() - started)
        return draft

    def observe(self, state, draft, verdict, committed, extra_logits) -> None:
        """The heuristic schedule's per-row lengths learn the verdict. The committed tokens (accepted drafts,
        then the bonus) are counted when the row next drafts (`_table`): in a batch the goodput controller
        keeps most rows from drafting on most steps, and counting every row's token every step cost ~1% of a
        batch-8 step on this CPU where anpd did not draft."""
        started = time.perf_counter()
        if self.lengths is not None:
            drafted = draft.sizes()
            for row, count, kept in zip(state.row_ids, drafted, state.accepted_counts(verdict)):
                self.lengths.update(row, count, kept)
        self._count("observe_seconds", time.perf_counter() - started)

    def finish(self) -> None:
        self._count("contexts_at_end", sum(len(t) for t in self.tables.values()))
        self.tables = {}

    def stats(self) -> dict[str, Any]:
        """The drafter's own wall time (propose includes the lazy table build from the prompt, also
        reported alone), how many drafts were empty (miss at the first lookup), table size."""
        return dict(self._stats)
