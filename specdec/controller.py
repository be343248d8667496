"""The goodput controller: each step, how much of each row's draft to verify (possibly nothing), and with
`drafter="auto"` which drafter drafts it, so as to maximise expected committed tokens per second.

    rate = sum over rows of weight * (1 + sum of p over the row's verified nodes)
           / (drafters' own cost + verify cost(batch, inputs) + engine overhead)

p comes from `specdec.acceptance` (per row: conditional by node position, read against the drafter's
scores), the costs from `specdec.costs` (measured on this device). Nodes are added best-first across
rows (the likeliest token per input first), every prefix of that order is priced and the best one is
kept, so the step-shaped cost curves of real hardware (on this CPU through MKL 2-5 inputs cost ~1.35x
one and 8 ~1.6x; through the runtime's oneDNN layers 1-6 inputs cost about the same and 16 ~1.5x) are
handled exactly. Weights are 1 while prompts wait (continuous batching); in a static batch
tokens of the row expected to finish last count most (`row_weights`).

Three times per step:
* `plan`, before drafting, from the estimates by position: each row's drafter and draft budget
  (`DecodeState.draft_budget`), so drafters whose drafting costs (draft_model, layer_skip) stop early.
  With it an exit (`Plan.exit`, `DecodeState.draft_exit`, specdec/chain_exit.py), which a chain drafter
  that scores its nodes (layer_skip) asks after each depth whether a row should draft deeper.
  A drafter whose draft costs almost nothing (anpd's lookup) proposes all it can: deciding after
  seeing it is free. A row whose best option is no draft decodes plainly; its drafter is probed again
  later, never sooner than what keeps probes' expected loss under `probe_share` of the row's time (the
  loss against what the row does instead: a plain step, or with drafter="auto" its best other drafter),
  the wait doubling as well while probes fail, except a costly chain's in a row priced alone, whose steady
  share is `chain_probe_share` while its probes pay now and then (`_probe_wait`, `_probe_share`).
  A drafter's one-off `prepare` in a row (a draft model's prefill) is priced into its probe there, and into
  its first pick spread over the row's tokens left.
  Rows that all stay plain form a quiet run: one plan and cut serve its steps, observed at its end.
  A drafter whose predictions ride in the forward as extra slots under the root (PPD's prompts) has none
  after a plain step; a row alone that drafted with it stays *engaged* (`_slot_look`): it keeps the root
  slots every step, so each step's draft is there for the cut to judge by its scores, until the slots'
  steps have lost a plain step's worth at the table's prices (a request starts engaged);
* `cut`, after drafting: a deterministic draft (q None) is cut to its best prefix in best-first order
  (scores when given, else node order; a prefix of that order is a connected subtree; extra slots
  follow their nodes). A sampled draft (q given) is only cut to the budget fixed before drafting, by node
  order: choosing which sampled nodes to verify by their own values would make the verified ones no
  longer draws from q and bias rejection sampling. So every cut here is lossless.
  With a verifier that accepts a node exactly when it is the target's choice (`exact`), the verdict also
  judges the nodes a deterministic draft's cut dropped below accepted ones (`hindsight`), and the estimates
  learn from them too: otherwise what a cut keeps dropping is never corrected.

Determinism. Decisions read timings, so they must not decide a sampled output that a seed promises to
fix. Decisions are *live* (current costs, learning from this call, the batch priced as a whole) when
the output cannot depend on them, i.e. greedy decoding with a lossless verifier, or when nothing is to
be reproduced (sampling without a seed). Otherwise (sampling with a seed, or a lossy verifier) they are
*frozen*: every row is planned as if it ran alone (batch 1), from nominal costs (`specdec.nominal_costs`: the
models' shapes and the device's type, never a timing), or from a snapshot of the cost model the caller passed
(`generate(cost_model=...)`: theirs to keep the same), and the call leaves the cost model as it found it; a
row's decisions, and so its random draws, depend only on its own history: the same prompt and seed give the
same output in any batch, batch mode, repeat and process. (Until stop 78 frozen calls read a snapshot of the
costs measured in the process, measured anew by each: one script run three times with one seed drew three
different texts.)
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from .acceptance import DECAY, PRIOR_WEIGHT, RowAcceptance
from .chain_exit import ChainExit, ExitRow
from .costs import CostModel, CostTable, batch_bucket
from .draft import Draft, Verdict
from .validation import keep_nodes, narrow_draft

#: Prompts waiting to take finished rows' places in a continuous batch: their token budgets in the order they
#: join, or True when some wait and their sizes are not known (False: nobody waits).
Waiting = bool | Sequence[int]

#: Pooled (drafter-level) estimates forget more slowly than a row's: they are a prior, not a reading.
POOLED_DECAY = 0.98
#: A live call in which no verdict on a drafter reached its pooled estimate hands the next call that estimate moved
#: back towards where an estimate without verdicts starts (`RowAcceptance.relaxed`): this share of the way per
#: RELAX_STEPS steps of the call (evidence ages with time; a call of a few steps says little more than none).
#: Otherwise a pessimistic pooled estimate never changes once rows stop drafting on it: in static batches of 2
#: (each call a new batch of 64 steps), after a failed probe in the fourth (mt_bench and translation prompts, then
#: summarization) no later call drafted, and draft_model ran level with batched plain decoding where drafting every
#: step ran 1.33x. With several members (drafter="auto") only upwards: a member without verdicts there was beaten by
#: another, not judged against plain decoding, and relaxed down, layer_skip's pooled [1.0, 1.0, ...] read
#: [0.74, 0.48, 0.36, ...] after three math calls that drafted with anpd and draft_model, so the first RAG call
#: drafted with those two (50 steps; layer_skip alone 23). A lone drafter's optimism, kept, bought probes that lose
#: where the rows stay plain: on the second model pair draft_model drafted on 4-5% of row-steps instead of 0-1%,
#: 0.92-1.02x of `none` against 0.95-1.03x.
POOLED_RELAX = 0.5
RELAX_STEPS = 64
#: A drafter whose drafts cost at most this share of a plain step proposes all it can every step, and the cut
#: decides after seeing its scores. At 0.1, anpd's lookups (0.15 ms) on a small model's 1.5 ms step
#: flickered across the line; priced then by its average acceptance before drafting, which mixes its hits
#: and misses, it drafted on half the steps its constant rule drafts on and ran 13-30% behind that rule.
#: The drafts of a draft model or layer_skip cost a third of a step or more.
CHEAP_DRAFT = 0.25
#: Most steps a row priced as plain stays plain before it is priced again (sooner when a probe is due);
#: BATCH_QUIET_STEPS when the batch's joint pricing, not the row's own, made it plain (the batch changes).
QUIET_STEPS = 64
BATCH_QUIET_STEPS = 4
#: Each time the same live batch is priced again and no row's draft pays, its rows stay plain twice as long, up
#: to BATCH_QUIET_MAX steps: nothing of theirs moves while none drafts but their paces and tokens left. Priced
#: every fifth step, a static batch of 16 that never drafted spent 0.3-0.4 ms a step on it, 1.2% of its steps.
BATCH_QUIET_MAX = 16
#: Steps whose timings are kept before the cost model learns from them in one go (live calls). Learning
#: right after a forward runs cold (the forward evicted the caches): ~50 us a step on this CPU, 0.5% of a
#: plain step, against a few us per step in a batch. A drafter's first timing is learnt at once.
LEARN_EVERY = 8
#: Of the steps where every row is quiet (plain without being priced), the cost model learns the timings of one
#: in QUIET_SAMPLE: learning from each cost ~7 us a step on this CPU, 0.7% of the 1 ms plain step of a small
#: model whose drafter the controller keeps off, and those steps all look alike.
QUIET_SAMPLE = 4
#: Looks of a free drafter in a row whose drafts were all cut to nothing before the row rests from it, and
#: its rests (a look that finds nothing to propose is not counted: it costs next to nothing).
FRUITLESS_LOOKS = 4
FIRST_REST = 4
MAX_REST = 16
#: Live batches: how fast the balance of what the free drafter's looking steps gained against plain steps
#: forgets (per looking step), and the longest rest the whole batch takes from it when the balance runs
#: negative (`_judge_looks`).
LOOK_BALANCE_DECAY = 0.8
MAX_BATCH_REST = 32
#: Static batches: how fast the learnt worth of their accepted tokens (`CostTable.static_worth`, steps their end
#: moved over steps the weights claimed, both summed over calls) forgets, per call, and the least the weights must
#: have claimed in a call (in steps) for it to teach anything.
STATIC_WORTH_DECAY = 0.7
STATIC_WORTH_CLAIM = 2.0
#: Below this learnt worth a static batch's looking steps are credited with the fall of its end (`_credit`).
STATIC_WORTH_FLOOR = 0.35
#: The plain reason (`GenerationOutput.stats`) of a row-step in a batch's rest.
BATCH_REST_REASON = "batch resting from the free drafter: its looks did not pay"
#: A row engaged with a slot drafter (`GoodputController._slot_look`) lets its slots go once its steps have lost,
#: on balance, more than SLOT_LOOK_LOSS plain steps' worth of time; gains count up to SLOT_LOOK_CREDIT plain steps
#: (an old burst buys no lasting credit, so a steady loss, however small, ends the run). Behind a short prompt on
#: this CPU the slots cost ~4% of a step and an accepted token gains a whole one, so a row waits through 25-50
#: rejections for the next burst; behind a 1000-token document they cost ~20%: 5-10 steps.
SLOT_LOOK_LOSS = 1.0
SLOT_LOOK_CREDIT = 1.0
#: Probes of a costly drafter that failed in a row (the row stayed plain) before its probes come twice as
#: rarely (`_probe_discount`, up to `ControllerOptions.max_probe_discount` times).
PROBE_STREAK = 2
#: Least budget of a free drafter's look (`_free_budget`).
FREE_NODES = 16
#: A drafter kept from looking by what its last looks cost looks once more in a call when they cost at most this
#: many times what a free look may (`_cheap_drafters`).
LOOK_RETRY = 2.0
#: Most of a request's remaining time a plain row's first probe of a drafter may be expected to lose (`plan`).
FIRST_PROBE_SHARE = 0.02
#: Most steps before a costly drafter's early first probe in a plain row (short answers end before it); sooner
#: where even an answer that ends right after the probe loses at most FIRST_PROBE_SHORT_SHARE of its steps to it.
FIRST_PROBE_STEPS = 12
FIRST_PROBE_SHORT_SHARE = 0.1
#: In a batch, how much more (relative) than a plain step a draft must promise to be verified (`_solve`). The
#: best of many noisy estimates is an optimistic one, and a batch adds costs the estimate leaves out (a draft
#: model's prefill of every row it drafts, rows joining). Near break-even, where a batch's drafts sit on this
#: CPU, verifying them lost: draft_model 0.93x of plain at batch 2, anpd 0.93x at batch 8.
BATCH_MARGIN = 0.05
#: In a batch, a drafter's one-off prepare in a row (a draft model's prefill) must pay for itself within this many
#: of the row's drafted steps (`_solve`), not over all its tokens left: whether a batch's rows draft is decided
#: again every step, as rows join and leave and estimates move, and at batch 8 on this CPU rows that started a
#: draft model stopped after a few drafted steps, having paid prefills that took draft_model to 0.93x of plain
#: decoding (continuous batches).
BATCH_PREPARE_STEPS = 8
#: How far a static batch's rows' ends spread over the steps they have left (`last_chances`): the standard deviation
#: of a row's steps to finish, per square root of them. Committing 1 + a geometric count of a 3-token chain's
#: tokens a step at acceptance 0.5 (mean 1.9, sd 1.05 tokens), n steps end within 0.56 * sqrt(n) steps.
LAST_SPREAD = 0.55
_LOGISTIC_SD = math.sqrt(3.0) / math.pi  # a logistic's scale per unit of its standard deviation


class ControllerOptions(BaseModel):
    """Options of the goodput controller (`generate(controller=...)`)."""

    model_config = ConfigDict(extra="forbid")

    probe_after: int = Field(4, ge=1, le=1024, description="steps without a drafter before a row tries it again")
    probe_share: float = Field(0.01, gt=0.0, le=1.0, description="most of a row's time spent probing drafters "
                               "that do not pay (shared among them): a probe's expected loss sets its least wait")
    chain_probe_share: float = Field(0.03, gt=0.0, le=1.0, description="probe_share of a costly chain drafter "
                                     "(a draft model, layer_skip) in a row priced alone, whose wait after failed "
                                     "probes does not double: the steady share of its time such probes may lose, "
                                     "back to probe_share as they keep failing across rows and calls")
    max_probe_interval: int = Field(64, ge=1, le=4096, description="longest wait between probes (the wait "
                                    "doubles after each probe that did not pay, except a costly chain's in "
                                    "a row priced alone, whose wait grows with its probes' expected loss "
                                    "alone)")
    max_probe_discount: float = Field(8.0, ge=1.0, le=1024.0, description="most times rarer than probe_share "
                                      "allows the probes of a drafter whose probes keep failing come (twice as "
                                      "rare per 2 failed in a row, across calls; 1 = off)")
    switch_margin: float = Field(0.03, ge=0.0, le=1.0, description="auto: another drafter must promise this "
                                 "much more (relative) than a row's current one to take it over")
    max_budget: int = Field(64, ge=1, le=1024, description="most nodes per row the controller verifies")
    trace: bool = Field(False, description="record every step's decision in stats (for plots)")


@dataclass
class Member:
    """One drafter the controller can choose (one, or several with drafter="auto")."""

    name: str
    stochastic: bool  # drafts carry q (sampled): cut only to the budget fixed before drafting
    follows_exit: bool = False  # stops its chains where the plan's exit says (`Drafter.follows_exit`)
    catches_up: bool = True  # its draft feeds the tokens committed since it last drafted (`Drafter.catches_up`)


@dataclass
class _Items:
    """One row's candidate nodes in the order they may be added (prefixes are connected subtrees)."""

    probs: list[float]
    sizes: list[int]  # inputs each node adds (itself + its extra slots)
    base: int  # inputs the row adds as soon as it keeps anything beyond the root (root extra slots)
    forced: int = 0  # nodes that must be kept (a probe)
    member: str | None = None
    weight: float = 1.0  # what this row's tokens are worth (static batches: rows behind count most)
    context: float | None = None  # tokens in the row's cache: extra inputs cost more behind a long one
    lag: float = 0.0  # tokens committed since the drafter last drafted this row (its catch-up)
    prepare: float = 0.0  # tokens the drafter's one-off `prepare` feeds first (not asked in this row yet)
    left: float = 0.0  # tokens the row may still commit (what a prepare is spread over)
    sunk: int = 0  # inputs the row adds whatever it keeps (a slot look's root slots, `_SlotLook`)


class LiveBatch(NamedTuple):
    """A live batch's step as a row's probe is priced in it (`GoodputController._probe_wait`)."""

    rows: int
    context: float | None  # mean tokens in the rows' caches
    row_seconds: float  # a row's share of the batch's plain step
    plain_verify: float  # the batch's plain verification forward (what a probe's inputs add to)


@dataclass
class Plan:
    """Before drafting: per row the drafter (None: plain step), the node budget, whether it is a probe."""

    choice: list[str | None]
    budget: list[int]
    probe: list[bool]
    forced: list[int] = field(default_factory=list)  # nodes the cut must keep (a probe)
    free: list[bool] = field(default_factory=list)  # a cheap drafter's open budget (not an estimate)
    # drafter="auto": a free drafter to look at first (its draft may beat the costly choice), its budget,
    # and the costly choice's expected rate to beat.
    look: list[str | None] = field(default_factory=list)
    look_budget: list[int] = field(default_factory=list)
    rate: list[float] = field(default_factory=list)
    cheap: frozenset[str] = frozenset()
    weights: list[float] = field(default_factory=list)  # live batches: what a token of each row is worth
    contexts: list[float] = field(default_factory=list)  # tokens in each row's cache
    left: list[int] = field(default_factory=list)  # tokens each row may still commit (`plan`'s max_depth)
    # a continuous batch's last wave: the token budgets of the prompts waiting to take finished rows' places
    queued: list[int] = field(default_factory=list)
    lags: dict[str, float] = field(default_factory=dict)  # per drafter: its rows' catch-up tokens this step
    # per drafter: tokens of the rows it is asked to draft for the first time (its `prepare` feeds them)
    prepares: dict[str, float] = field(default_factory=dict)
    base: float | None = None  # what a plain step is worth in the weights' unit (None: one token a row)
    marginal: float = 0.0  # the part of each row's weight that is its own place in the step (`row_weights`)
    quiet: bool = False  # every row plain without being priced again (`_all_quiet`, `_resting_run`)
    exit: ChainExit | None = None  # where a scoring chain drafter stops a row before its budget
    _budget: torch.Tensor | None = field(default=None, repr=False, compare=False)

    def budget_tensor(self) -> torch.Tensor:
        """`budget` as `DecodeState.draft_budget`, made once per plan (a quiet plan serves many steps). Only as
        planned: `GoodputController.propose` may change `budget` afterwards and sets the state's afresh."""
        if self._budget is None:
            self._budget = torch.tensor(self.budget, dtype=torch.long)
        return self._budget

    @property
    def plain(self) -> bool:
        """No row drafts this step (nor looks with a free drafter): the drafter is not asked."""
        return not any(self.budget) and not any(self.look_budget)


@dataclass
class Cut:
    """After the cut: per row the kept nodes (indices into the cut draft) in position order, with each
    one's parent position (-1: the root); and the proposal's size."""

    order: list[list[int]]
    up: list[list[int] | None]  # parent positions of the kept nodes
    proposed: list[int]
    root_extras: list[int]
    node_extras: list[float]
    engaged: list[bool] = field(default_factory=list)  # the row kept its root's extra slots
    expected: list[float] = field(default_factory=list)  # expected committed tokens of each row
    inputs: int = 0
    # the kept nodes' score bins and estimates, for the score calibration (`RowAcceptance.node_estimates`)
    readings: list[list[tuple[int | None, float]] | None] = field(default_factory=list)
    # hindsight (verifiers that accept the target's choice): per row the nodes cut away, or None
    spare: list[Spare | None] = field(default_factory=list)
    by_score: list[bool] = field(default_factory=list)  # rows whose readings are `RowAcceptance.by_score`'s
    widths: list[int] = field(default_factory=list)  # inputs each row puts in the forward (its root included)


@dataclass
class Spare:
    """A row's nodes the cut dropped from a deterministic draft, in position order after the kept ones: their
    indices in the uncut draft, their parent positions (below the kept count: a kept node) and readings."""

    nodes: list[int]
    up: list[int]
    readings: list[tuple[int | None, float]]


@dataclass
class _SlotLook:
    """A row that keeps its drafter's root slots in every step (`GoodputController._slot_look`), so that it has
    this step's predictions to judge: the balance (seconds at the cost table's prices, at most SLOT_LOOK_CREDIT
    plain steps) of what its steps gained over plain ones, and the draft tokens they accepted."""

    balance: float = 0.0
    accepted: int = 0


@dataclass
class _Row:
    estimates: dict[str, RowAcceptance] = field(default_factory=dict)
    since: dict[str, int] = field(default_factory=dict)  # steps since the drafter was last verified here
    interval: dict[str, int] = field(default_factory=dict)
    due: dict[str, float] = field(default_factory=dict)  # `since` at which a probe is next due (last priced)
    root_extras: dict[str, float] = field(default_factory=dict)
    node_extras: dict[str, float] = field(default_factory=dict)
    member: str | None = None  # chosen by rate at the last plan
    pending: str | None = None  # a drafter whose first step had only extra slots: give it its second
    discarded: dict[str, int] = field(default_factory=dict)  # drafts cut to nothing in a row, per drafter
    fruitless: dict[str, int] = field(default_factory=dict)  # a free drafter's looks in a row that verified nothing
    rest: dict[str, int] = field(default_factory=dict)  # steps a free drafter is not asked to look
    rest_wait: dict[str, int] = field(default_factory=dict)  # its next rest (doubles while looks stay fruitless)
    largest: dict[str, int] = field(default_factory=dict)  # most nodes the drafter proposed here so far
    explored: set[str] = field(default_factory=set)  # drafters probed here because nothing was known of them
    # Tokens committed since the drafter last drafted this row (at first, the whole prompt): what a drafter
    # that keeps a cache of its own (a draft model) must feed before it drafts again.
    lag: dict[str, float] = field(default_factory=dict)
    prepared: set[str] = field(default_factory=set)  # drafters asked to draft here already (prepare done)
    right: set[str] = field(default_factory=set)  # drafters with a draft token accepted in this row
    probed: str | None = None  # a costly drafter probed at the last plan, whose outcome the next plan judges
    looking: dict[str, _SlotLook] = field(default_factory=dict)  # a slot drafter kept engaged (`_slot_look`)
    pace: float = 1.0  # recent tokens committed per step (static batches weigh rows by steps left)
    quiet: int = 0  # steps left in which the row decodes plainly without being priced again
    quiet_reason: str = "expected rate below plain decoding"


@dataclass
class _QuietRun:
    """Steps in which the same rows all stay quiet: planned and observed in bulk (`_all_quiet`), or all rest
    from the free drafter with the batch (`_resting_run`)."""

    row_ids: list[int]
    rows: list[_Row]
    left: int  # steps it may still last (the least `quiet` of its rows, or what is left of the batch's rest)
    plan: Plan  # what each of its steps takes
    cut: Cut
    resting: bool = False  # the batch's rest from its free drafter (`_resting_run`), not the rows' own quiet
    taken: int = 0  # steps planned as one more of the run, not yet counted down in its rows (`_settle`)
    observed: int = 0  # plain steps observed, not yet applied to the rows (`_settle`)


class GoodputController:
    """Per call: plans budgets, cuts drafts, learns from verdicts. Holds per-row state keyed by row id."""

    def __init__(self, members: Sequence[Member], model_costs: CostModel, table: CostTable, live: bool,
                 packed: bool, options: ControllerOptions | None = None,
                 clock: Callable[[], float] = time.perf_counter, name: str | None = None,
                 hindsight: bool = False) -> None:
        self.members = {m.name: m for m in members}
        self.order = [m.name for m in members]
        self.name = name or "+".join(self.order)  # the call's drafter: its engine overhead is its own
        self.model_costs = model_costs
        self.table = table  # the live table (live), or a nominal one or the caller's snapshot (frozen)
        self.live = live
        self.packed = packed
        self.options = options or ControllerOptions()
        self.clock = clock  # what the engine times steps with for this controller (specdec.costs.cost_clock)
        # The verifier accepts a node exactly when it is the target's choice (`Verifier.accepts_target_choice`):
        # verdicts then also say whether the nodes cut away would have been accepted (`hindsight`).
        self.hindsight = hindsight
        self.rows: dict[int, _Row] = {}
        self.counts: dict[str, Any] = {"plain_row_steps": 0, "row_steps": 0, "probes": 0, "switches": 0,
                                       "drafted_row_steps": {name: 0 for name in self.order},
                                       "plain_reasons": {}, "expected_tokens": 0.0, "verified_nodes": 0}
        self.trace: list[dict[str, Any]] = []
        # Per drafter, the extra slots its proposals carried (at the root, per node), for new rows.
        self.pooled_extras: dict[str, tuple[float, float]] = dict(table.extras)
        self._current_ids: list[int] = []
        self._run: _QuietRun | None = None
        self._unlearnt: list[tuple[str, tuple]] = []  # timings the cost model has not learnt yet (live)
        self._unlearnt_steps = 0
        self._quiet_steps = 0
        # Live batches (`_judge_looks`): the decayed balance (seconds) of what the free drafter's looking steps
        # gained against plain steps, the looking steps since the batch last rested from it, the steps of that
        # rest still to come, and how the batch's plain steps measured against their price (a ratio, None
        # before the first). The next rest's length is kept in the live cost table (`CostTable.batch_rests`).
        self._look_balance = 0.0
        self._looks_since_rest = 0
        self._batch_rest = 0
        self._batch_quiet: tuple[tuple[int, ...], int] = ((), BATCH_QUIET_STEPS)  # (rows, next quiet length)
        self._plain_ratio: float | None = None
        # A live batch whose rows all start together (a static batch): the rows it started with (None before the
        # first step; empty once the call is known not to be one), each row's committed tokens, and how far the
        # cut's weights said the accepted tokens moved the batch's end, in steps (`_learn_static_worth`).
        self._static_rows: frozenset[int] | None = None
        self._committed: dict[int, int] = {}
        self._claimed_end = 0.0
        self._cheap: frozenset[str] | None = None  # the free drafters, until the cost model learns again
        self._free_limit = float("inf")  # most seconds a free drafter's draft may cost (set with `_cheap`)
        self._look_retry = set(self.order)  # drafters that may look once more in this call (`_cheap_drafters`)
        self.streaks = {name: table.probe_streaks.get(name, 0) for name in self.order}  # `_probe_discount`
        self._pooled_learnt: set[str] = set()  # drafters whose pooled estimate took a verdict in this call
        self._steps = 0  # steps observed in this call (`finish`: how far the other pooled estimates relax)
        pooled = table.acceptance
        self.pooled: dict[str, RowAcceptance] = {}
        for name in self.order:
            prior = pooled.get(name)
            self.pooled[name] = prior.fork(PRIOR_WEIGHT, POOLED_DECAY) if isinstance(prior, RowAcceptance) \
                else RowAcceptance(decay=POOLED_DECAY)

    # -- per-row state ---------------------------------------------------------------------------
    def _row(self, row_id: int, context: float | None = None) -> _Row:
        """Row `row_id`'s state, created on first sight; `context`: the tokens in its cache then."""
        row = self.rows.get(row_id)
        if row is None:
            row = _Row()
            for name in self.order:
                row.lag[name] = float(context or 0.0)  # every drafter has the whole prompt to catch up on
                row.estimates[name] = self.pooled[name].fork(PRIOR_WEIGHT, DECAY)
                row.since[name] = 0
                row.interval[name] = self.options.probe_after
                # What the drafter's extra slots (PPD's prompts) cost, as seen on earlier rows: a new
                # row that thought them free would start every request with a slots step that loses.
                row.root_extras[name], row.node_extras[name] = self.pooled_extras.get(name, (0.0, 0.0))
            self.rows[row_id] = row
        return row

    def forget(self, live_rows: Sequence[int]) -> None:
        self._settle()
        keep = set(live_rows)
        self.rows = {row: state for row, state in self.rows.items() if row in keep}

    # -- pricing ---------------------------------------------------------------------------------
    def _overhead(self, drafted: bool = True) -> float:
        return self.table.overhead(self.name, drafted)

    def _solve(self, rows: list[_Items], batch: int, draft_seconds: float | None, base: float | None = None,
               margin: float = 0.0) -> list[int]:
        """Nodes kept per row maximising (base + sum weight * p) / (draft + verify + overhead). `base`: what
        a plain step is worth (None: the rows' weights, one token each). `draft_seconds` None prices
        drafting per drafter from the kept counts (before drafting); a number is a cost already paid
        (after drafting). `margin`: what more (relative) than the forced nodes alone the rest must promise."""
        table, packed = self.table, self.packed
        plain_overhead, overhead = self._overhead(False), self._overhead()
        kept = [min(r.forced, len(r.probs)) for r in rows]
        tokens = (sum(r.weight for r in rows) if base is None else base) + sum(
            r.weight * sum(r.probs[:k]) for r, k in zip(rows, kept))
        widths = [1 + r.sunk + (r.base + sum(r.sizes[:k]) if k else 0) for r, k in zip(rows, kept)]
        sunk = sum(r.sunk for r in rows)  # inputs in the forward whatever is kept (`_Items.sunk`)
        levels: dict[str, int] = {}
        nodes: dict[str, int] = {}
        for r, k in zip(rows, kept):
            if k and r.member is not None:
                levels[r.member] = max(levels.get(r.member, 0), k)
                nodes[r.member] = nodes.get(r.member, 0) + k

        context = mean_context(r.context for r in rows)
        # (after drafting its cost is paid: no fit to read)
        lines = {name: table.draft_line(name, context) for name in self.order} if draft_seconds is None else {}

        def draft_cost(name: str) -> float:  # CostTable.draft at lag 0, the fit read once per search
            constant, per_level, per_node, _ = lines[name]
            return max(0.0, constant + per_level * levels[name] + per_node * nodes[name])

        drafting = {name: draft_cost(name) for name in nodes} if draft_seconds is None else {}
        # A row's first draft with a drafter pays its one-off prepare (a draft model's prefill). Alone, the start
        # rule in `plan` spreads it over the row's tokens left; priced with the batch, each step carries the
        # share of its tokens: prepare * (1 + sum p) / tokens (a drafted step of a continuous batch of 4 saved
        # ~3% here, less than the prefills it set off), the tokens being at most those of BATCH_PREPARE_STEPS
        # steps drafting all the row offers.
        prepares = [self.table.prepare(r.member, r.prepare)
                    / max(1.0, min(r.left, BATCH_PREPARE_STEPS * (1.0 + sum(r.probs))))
                    if r.prepare and r.member else 0.0 for r in rows]

        def charge(index: int, k: int) -> float:  # what keeping node k (0-based) of the row adds to it
            return prepares[index] * ((1.0 if k == 0 else 0.0) + rows[index].probs[k]) if draft_seconds is None else 0.0

        charged = sum(charge(i, j) for i, k in enumerate(kept) for j in range(k))
        # Every input count the search can reach, priced in one call (index: inputs - batch).
        full = [1 + r.sunk + r.base + sum(r.sizes) if r.probs else w for r, w in zip(rows, widths)]
        most = sum(full) if packed else batch * max(full)
        verify = table.verify_from(batch, batch, most - batch + 1, packed, context)
        total, widest = sum(widths), max(widths)
        # Least verify cost of any wider step (corrections can make the curve dip): with what is left to
        # add, it bounds every later rate, so the search stops once no later prefix can win.
        floor = list(verify)
        for index in range(len(floor) - 2, -1, -1):
            floor[index] = min(floor[index], floor[index + 1])
        left = sum(r.weight * sum(r.probs[k:]) for r, k in zip(rows, kept))

        def seconds() -> float:
            draft = draft_seconds if draft_seconds is not None else sum(drafting.values()) + charged
            return (draft + verify[(total if packed else batch * widest) - batch]
                    + (overhead if total > batch + sunk else plain_overhead))

        best_rate = tokens / max(seconds(), 1e-12)
        best_kept = list(kept)
        forced_kept, forced_rate = list(kept), best_rate
        heap: list[tuple[float, int, int]] = []
        keys = [float("inf")] * len(rows)

        def push(index: int) -> None:
            r, k = rows[index], kept[index]
            if k < len(r.probs):
                size = r.sizes[k] + (r.base if k == 0 else 0)
                keys[index] = min(keys[index], r.weight * r.probs[k] / max(size, 1))
                heapq.heappush(heap, (-keys[index], index, k))

        for index in range(len(rows)):
            push(index)
        while heap:
            _, index, k = heapq.heappop(heap)
            r = rows[index]
            tokens += r.weight * r.probs[k]
            left -= r.weight * r.probs[k]
            grown = r.sizes[k] + (r.base if k == 0 else 0)
            widths[index] += grown
            total += grown
            widest = max(widest, widths[index])
            kept[index] = k + 1
            if r.member is not None and draft_seconds is None:
                levels[r.member] = max(levels.get(r.member, 0), k + 1)
                nodes[r.member] = nodes.get(r.member, 0) + 1
                drafting[r.member] = draft_cost(r.member)
                charged += charge(index, k)
            rate = tokens / max(seconds(), 1e-12)
            if rate > best_rate:
                best_rate, best_kept = rate, list(kept)
            inputs = total if packed else batch * widest
            least = (draft_seconds or 0.0) + floor[inputs - batch] + min(overhead, plain_overhead)
            if tokens + left <= best_rate * least:
                break
            push(index)
        return best_kept if best_rate >= forced_rate * (1.0 + margin) else forced_kept

    def _solve_row(self, items: _Items, draft_seconds: float) -> int:
        """`_solve([items], 1, draft_seconds)` for one row whose draft is paid (the cut at batch 1, frozen rows):
        its nodes can only be added in order, so one pass over its prefixes finds the same best one. The general
        search's heap, bounds and per-drafter pricing took ~48 us a drafted step in Python against ~18 us here (2%
        of a small model's 1.5 ms step: anpd on the second model pair)."""
        probs, sizes, weight = items.probs, items.sizes, items.weight
        verify = self.table.verify_from(1, 1, 1 + items.sunk + items.base + sum(sizes), self.packed, items.context)
        plain_overhead, overhead = self._overhead(False), self._overhead()

        def rate(tokens: float, width: int, kept: int) -> float:
            return tokens / max(draft_seconds + verify[width - 1] + (overhead if kept else plain_overhead), 1e-12)

        kept = min(items.forced, len(probs))
        tokens = weight + weight * sum(probs[:kept])
        width = 1 + items.sunk + (items.base + sum(sizes[:kept]) if kept else 0)
        best_rate, best = rate(tokens, width, kept), kept
        for k in range(kept, len(probs)):
            tokens += weight * probs[k]
            width += sizes[k] + (items.base if k == 0 else 0)
            current = rate(tokens, width, k + 1)
            if current > best_rate:
                best_rate, best = current, k + 1
        return best

    def _prefix_rates(self, items: _Items) -> list[float]:
        """Rate of one row alone (batch 1) keeping its first k nodes, for k = 0..len: member choice,
        probes and every frozen decision."""
        table, plain_overhead, overhead = self.table, self._overhead(False), self._overhead()
        verify = table.verify_from(1, 1, 1 + items.base + sum(items.sizes), self.packed, items.context)
        count = len(items.probs)
        draft = table.draft_chain(items.member, count + 1, context=items.context) if items.member \
            else [0.0] * (count + 1)
        rates = [1.0 / max(verify[0] + plain_overhead, 1e-12)]
        tokens, inputs = 1.0, 1 + items.base
        for k, (p, size) in enumerate(zip(items.probs, items.sizes), start=1):
            tokens += p
            inputs += size
            rates.append(tokens / max(draft[k] + verify[inputs - 1] + overhead, 1e-12))
        return rates

    def _position_items(self, row: _Row, name: str, cap: int, context: float | None, explore: bool) -> _Items:
        count = max(0, min(cap, row.largest.get(name, 16) + 2))
        probs = row.estimates[name].probs(count, explore)
        size = 1 + int(round(row.node_extras[name]))
        lag = row.lag.get(name, 0.0)
        fresh = self._prepares_first(row, name)  # its `prepare` feeds the row's tokens: no catch-up in the step
        return _Items(probs, [size] * count, int(round(row.root_extras[name])), member=name, context=context,
                      lag=0.0 if fresh else self._catch_up(row, name), prepare=lag if fresh else 0.0)

    def _catch_up(self, row: _Row, name: str) -> float:
        """Tokens the drafter's next draft in `row` feeds first: those committed since it last drafted the row
        (the whole prompt in a new row), none for a drafter that reads only the target's cache and logits
        (`Drafter.catches_up`)."""
        return row.lag.get(name, 0.0) if self.members[name].catches_up else 0.0

    # -- before drafting -------------------------------------------------------------------------
    def _cheap_drafters(self) -> frozenset[str]:
        """Drafters whose drafts cost almost nothing to make, even as long as a free look's (a lookup): they
        propose all they can every step and the cut after drafting sees what they offer and decides (unless
        they add inputs of their own to the forward, which a free look would pay for). Worked out again only
        after the cost model has learnt (`_learn`)."""
        if self._cheap is not None:
            return self._cheap
        limit = self._free_limit = CHEAP_DRAFT * self.table.verify(1, 1, self.packed)
        # Judged by what its drafts cost as drafted, not by the fit's guess at a one-node draft: a drafter
        # that always drafted the same length gives the fit no slope, and its one-node extrapolation can be
        # tiny (a 12-token draft_model draft costing 0.8 of a plain step read as free, so it drafted 12
        # tokens every step). Unmeasured drafters look once; that look measures them.
        # Nor by its mean alone: a free look drafts FREE_NODES nodes or more, and a draft model asked for one
        # token a step (1.2 ms against a 9.5 ms step) read as free, was asked for 16 (9 ms, mostly rejected),
        # then priced again and cut back to one, and so on: translation prompts ran at 0.76 of its heuristic
        # rule. So what its free looks cost counts too (`CostTable.look_cost`): after one, a draft model is
        # never free again. (Reading the fit at 16 nodes instead misjudged anpd from its first few drafts:
        # costly, so planned from its estimates and never drafting, which left the fit as it was.)
        # But a drafter that no longer looks never measures its looks again: on a 3M-parameter model (a 1.4 ms
        # step, so a 0.35 ms limit) anpd's last looks cost 0.45-0.5 ms once, and for the rest of the process
        # it was planned from its estimates (plain on two steps in three; its constant rule 16% faster). So
        # once per call a drafter whose drafts are cheap and whose last looks cost at most LOOK_RETRY times the
        # limit looks again (a draft model's looks, 4x the limit and more, are not retried).
        # A sampled draft is cut only to a budget fixed before drafting (losslessness): never a free look.
        cheap = set()
        for name in self.order:
            mean, look = self.table.draft_mean(name), self.table.look_cost(name)
            retry = name in self._look_retry and look is not None and look <= LOOK_RETRY * limit
            if not self.members[name].stochastic and (mean is None or (
                    mean <= limit and (look is None or look <= limit or retry))):
                cheap.add(name)
        self._cheap = frozenset(cheap)
        return self._cheap

    def _free_lookers(self, row: _Row, cheap_names: frozenset[str]) -> list[str]:
        """The free drafters that look in `row` every step: those whose look adds no inputs of its own (PPD's
        prompt slots would be paid for by the look)."""
        return [name for name in self.order if name in cheap_names and row.root_extras[name] == 0]

    def _looks_only(self, row: _Row, cheap_names: frozenset[str]) -> bool:
        """Whether every drafter of the call is a free looker in `row`: a batch's rest from its free drafter leaves
        it nothing to price (`_resting_run`)."""
        return len(self._free_lookers(row, cheap_names)) == len(self.order)

    def _prepares_first(self, row: _Row, name: str) -> bool:
        """Whether the drafter's one-off `prepare` (timed apart: `CostTable.prepare`) feeds the row's tokens
        before it first drafts it, so that the step's own draft has no catch-up. A drafter without the hook
        catches up inside its draft (its fit's `lag` term)."""
        return name not in row.prepared and name in self.table.prepares

    def _probe_wait(self, option: tuple[_Items, int, float, int], instead: float = 0.0,
                    batch: LiveBatch | None = None, lag: float | None = None, costly: bool = True) -> float:
        """Steps to wait before probing a drafter, so that probes expected to lose cost at most
        `probe_share` of the row's time (`_probe_share`: `chain_probe_share` for a `costly` chain in a row alone;
        PPD's probe takes two steps: its prompt slots, then its tree). A probe
        loses against what the row would do instead: a plain step, or (drafter="auto") another drafter's
        expected rate `instead` when that is higher: probing draft_model in a row where anpd's chains
        commit three tokens a step costs those tokens, not a plain step's one.

        A row alone (or a frozen row, priced alone) pays the probe's draft, verify and overhead against a plain
        step. In a live `batch` the probe makes the batch's step dearer for every row: it pays its draft, what
        its inputs add to the batch's verification forward and a drafted step's overhead over a plain one's,
        against the tokens it promises at the row's share of a plain step; and B rows probing every W steps lose
        B * loss / W of a step costing B * row share, so the wait is the loss over the share times the row's
        share. Priced as the row alone (before stop 48), a probe's tokens were each worth a lone plain step, 2-4x
        a row's share at batch 2-8 on this CPU, and what its inputs add to a batch's forward was read off the
        one-row curve.

        `lag`: the catch-up to price (default: the row's current one). For a row alone where the drafter drafted
        before, and in a live batch where it was right before (a draft token accepted), `plan` prices the catch-up
        of one interval, not the row's current lag: that lag grows with every step the row waits, and so did the
        wait, faster than it ran (a draft model's fitted catch-up, ~1.1% of a plain step a token, against a 1%
        share), so a row plain after a few failed drafts never probed again: 113 plain steps on qa answers where
        transformers' heuristic commits 3-4 tokens a step; 93 steps against the heuristic's 26 on a translation
        prompt that turns repetitive after its first drafts mostly failed. Stop 40 kept that price to rows where the
        drafter had been right; for a row alone it is now every drafted row (stop 47: in an interleaved A/B over
        Spec-Bench's six categories draft_model went from 1.429x to 1.465x of plain decoding and ppd_draft_model
        from 1.423x to 1.491x, translation 1.29x to 1.60x, summarization 1.00x to 1.11x).

        For a row alone this wait is the only back-off of a costly drafter whose chain needs no prompt slots (a
        draft model, layer_skip): each failed probe lowers the row's estimates, so the next probe's expected loss
        and wait grow by themselves. Doubling its interval after each failed probe as well (still done for PPD's
        slot probes, a free drafter's looks and rows of live batches) kept a draft model, whose one-token probe
        costs ~12% of a plain step here, 16-64 steps away from answers that had turned repetitive, where
        transformers' heuristic probes every 4 steps (qa and translation traces, stop 55): without it,
        draft_model 1.363 -> 1.392x and 1.402 -> 1.444x of plain decoding in two interleaved A/Bs over
        Spec-Bench's six categories. In static batches of 2, 4 and 8 it read 0.96, 0.98 and 1.02 of the doubling
        rule's speed (one A/B, `benchmarks/results/goodput/dm_depth_s55`), so live batches keep doubling."""
        items, _, _, best_one = option
        table, packed = self.table, self.packed
        context = items.context
        plain_overhead = self._overhead(False)
        alone = table.verify(1, 1, packed, context)  # the row's plain forward, alone
        extra = items.base + sum(items.sizes[:best_one])
        # A probe pays the drafter's catch-up too (a draft model feeds every token since it last drafted),
        # and in a row not drafted yet its one-off `prepare` (a draft model's prefill of the whole prompt:
        # behind a 1000-token document ~30 plain steps of a small target, which a probe in every request paid).
        catch_up = items.lag if lag is None else lag
        drafting = table.draft(items.member, best_one, best_one, catch_up, context) + table.prepare(items.member,
                                                                                                    items.prepare)
        rows, step_context, row_seconds, plain_verify = (
            (1, context, alone + plain_overhead, alone) if batch is None else batch)
        # What the probe adds to the step: its inputs in the forward (prompt slots first: PPD's first step is a
        # forward of its slots alone), a drafted step's overhead over a plain one's.
        added = drafting + self._overhead() - plain_overhead
        for width in (extra, items.base) if items.base else (extra,):
            added += table.verify(rows, rows + width if packed or rows == 1 else rows * (1 + width), packed,
                                  step_context) - plain_verify
        # Time the row spends on the step's tokens, less what it would spend on them instead: `instead`, a rate
        # of the row alone, counts as the tokens it commits per plain step.
        tokens_instead = max(1.0, instead * (alone + plain_overhead))
        loss = row_seconds + added - (1.0 + sum(items.probs[:best_one])) * row_seconds / tokens_instead
        return max(0.0, loss) / (self._probe_share(items, batch, costly) * row_seconds)

    def _probe_share(self, items: _Items, batch: LiveBatch | None, costly: bool) -> float:
        """The share of the row's time that `_probe_wait` lets a drafter's failed probes take (split among the
        members). A costly chain's in a row priced alone (`chain_probe_share`) is a steady share, as its wait never
        doubles; every other probe's wait doubles as its probes fail (`probe_share` is where it starts)."""
        share = self.options.probe_share
        if items.base:  # a probe that needs prompt slots (PPD's) measures the device more than the text
            share /= self._probe_discount(items.member)
        elif costly and batch is None:  # back to probe_share as its probes keep failing (`_probe_discount`)
            chain = self.options.chain_probe_share
            share = max(min(share, chain), chain / self._probe_discount(items.member))
        return share * self._probe_weight(items.member)

    def _probe_weight(self, name: str | None) -> float:
        """The part of a row's probe budget that `name`'s probes may take (drafter="auto"): the members whose probes
        cost something share it by how often each may probe, 1 / `_probe_discount` (a free drafter's look, a node
        verified, costs next to nothing and takes none from the others; its own probes keep a costly member's
        part). Split evenly among all members, layer_skip's probes on RAG prompts came a quarter as often as
        alone (in one traced run the rows decoded 121 steps with anpd at 1.45 tokens a step where layer_skip alone
        commits 3.8, `benchmarks/results/goodput/checks_s68/`), and the parts of a free drafter and of PPD's slot
        probes, discounted on a device where its trees never pay, went unused."""
        if len(self.order) == 1:
            return 1.0
        cheap = self._cheap_drafters()
        costly = [member for member in self.order if member not in cheap]
        if not costly:
            return 1.0 / len(self.order)
        own = 1.0 / self._probe_discount(name)
        others = sum(1.0 / self._probe_discount(member) for member in costly if member != name)
        return own / (own + others)

    def _probe_discount(self, name: str | None) -> float:
        """How many times rarer than `probe_share` allows a drafter's probes come: its probes failed
        PROBE_STREAK times in a row (across rows and calls of this model and device), twice as rare, up to
        `max_probe_discount`. Each row starts probing afresh, so a drafter that never pays on this device
        (PPD's trees on this CPU) kept costing ~1% of every request (ppd 0.985-0.999 of plain decoding).
        Applied to drafters whose probe needs prompt slots (`_probe_wait`): whether PPD's tree pays for its
        inputs is a property of the device, the same in every request; whether a draft model's or a
        self-draft's tokens are accepted is one of the text, and with their probes made rarer across requests
        draft_model lost 3% (translation 1.25 -> 1.18x of plain decoding) in an interleaved A/B. A costly
        chain's in a row priced alone (`_probe_share`) only comes back from `chain_probe_share` to `probe_share`,
        never rarer."""
        streak = self.streaks.get(name, 0) if name is not None else 0
        return min(self.options.max_probe_discount, 2.0 ** (streak // PROBE_STREAK))

    def _judge_probe(self, name: str, paid: bool) -> None:
        """A costly drafter's probe ended: the row took the drafter up (paid) or stayed plain. Live calls
        only: frozen rows read the streaks of the call's table (none in a nominal one), so their decisions stay their
        own."""
        if self.live:
            self.streaks[name] = 0 if paid else self.streaks.get(name, 0) + 1

    def _free_budget(self, row: _Row, name: str, cap: int) -> int:
        """A cheap drafter's budget: all it has offered so far and more (never throttled to its guesses)."""
        return min(cap, max(FREE_NODES, row.largest.get(name, 0) + 2))

    def _slot_look(self, batch: int) -> bool:
        """Whether a row whose drafter hangs slots under the root (PPD's prompts) may stay engaged after drafting:
        keep the slots every step, so that each step's draft is there to be judged by its scores, and verify its
        nodes only where they pay. A drafter that puts its predictions in the forward has none after a plain step:
        re-engaging takes a slots-only step first, and its acceptance comes in bursts (on qa answers PPD's one
        candidate was accepted in runs, about every ten steps), so planned by its estimates it went plain after a
        few rejections and missed the runs: plain on 99% of qa steps where drafting every step ran 1.17x.
        The slots' own price is judged as the row goes (`_judge_slot_look`). With one drafter, for rows priced
        alone (batch 1, frozen rows); drafter="auto" and live batches keep their pricing by position."""
        return len(self.order) == 1 and self._frozen_rows(batch)

    def _engages(self, row: _Row, cap: int, context: float | None, batch: int) -> bool:
        """Whether a new row starts engaged with its slot drafter: where a draft of it is expected to pay for the
        slots at the row's context (its first nodes at the pooled estimates, the slots at the table's prices). Behind
        a 1000-token document on this CPU they cost ~20% of a step, and starting engaged there spent ~1.5 steps a
        request before the looks were let go."""
        name = self.order[0]
        if not row.root_extras[name] or not self._slot_look(batch):
            return False
        rates = self._prefix_rates(self._position_items(row, name, cap, context, explore=False))
        return max(rates[1:], default=0.0) > rates[0]

    def _judge_slot_look(self, row: _Row, name: str, width: int, verified: int, accepted: int,
                         context: float | None) -> None:
        """An engaged row's step, judged at the cost table's prices (so frozen rows judge alike in any run): the
        tokens it committed at a plain step's price, less what the step cost (its inputs, overhead and draft), into
        a balance of at most SLOT_LOOK_CREDIT plain steps. Once the balance has lost SLOT_LOOK_LOSS plain steps the
        row lets its slots go (`_end_look`): behind a long document (summarization, RAG) the slots cost more than the
        rare accepted token brings."""
        run = row.looking[name]
        table = self.table
        plain = table.verify(1, 1, self.packed, context) + self._overhead(False)
        spent = (table.verify(1, width, self.packed, context) + self._overhead(verified > 0)
                 + (table.draft_mean(name) or 0.0))
        run.balance = min(SLOT_LOOK_CREDIT * plain, run.balance + (1 + accepted) * plain - spent)
        run.accepted += accepted
        if run.balance < -SLOT_LOOK_LOSS * plain:
            self._end_look(row, name, judged=True)

    def _end_look(self, row: _Row, name: str, judged: bool) -> None:
        """The row lets its slots go (`judged`: its looks did not pay): it decodes plainly until its next probe,
        which waits twice as long as the last, and is priced by position again after it. The looks count as a probe
        that paid when any of their tokens was accepted."""
        run = row.looking.pop(name)
        if judged:
            self._judge_probe(name, paid=run.accepted > 0)
            row.since[name] = 0
            row.interval[name] = min(self.options.max_probe_interval, 2 * row.interval[name])
            row.quiet = min(QUIET_STEPS, row.interval[name]) - 1
            row.quiet_reason = "slots' steps did not pay"

    def plan(self, row_ids: Sequence[int], max_depth: Sequence[int], max_nodes: int,
             waiting: Waiting = True, contexts: Sequence[float] | None = None) -> Plan:
        """Per row: the drafter (or none) and how many nodes it may draft, from the estimates by position.
        `max_depth`: tokens each row may still commit; `waiting`: the prompts waiting to take finished rows'
        places, as their token budgets in the order they join (the first batch-size + 1 are enough; True: some
        wait, sizes unknown; see `row_weights`; live batches only); `contexts`:
        tokens in each row's cache (a row's own length, so frozen decisions still depend on its history
        alone)."""
        if self._run_goes_on(row_ids):
            return self._run.plan  # type: ignore[union-attr]
        self._settle()
        self._current_ids = list(row_ids)
        row_contexts: list[float | None] = list(contexts) if contexts is not None else [None] * len(row_ids)
        cheap_names = self._cheap_drafters()
        quiet = self._all_quiet(row_ids, cheap_names, row_contexts)
        if quiet is not None:
            return quiet
        choice: list[str | None] = []
        budgets: list[int] = []
        forced: list[int] = []
        free: list[bool] = []
        look: list[str | None] = []
        look_budget: list[int] = []
        rate: list[float] = []
        items_per_row: list[_Items | None] = []
        cap_all = min(self.options.max_budget, max_nodes)
        margin = 1.0 - self.options.switch_margin
        # A live batch's plain step, read once: what a row's probe holds up (its share) and what static-batch
        # tokens are worth (`row_weights`). Frozen and lone rows are priced alone.
        batch_resting = self._batch_rest > 0
        if batch_resting:
            self._batch_rest -= 1
            resting = self._resting_run(row_ids, max_depth, cap_all, cheap_names, row_contexts)
            if resting is not None:
                return resting
        parts = self._step_parts(len(row_ids), row_contexts) if self.live and len(row_ids) > 1 else None
        batch = None if parts is None else LiveBatch(len(row_ids), mean_context(row_contexts), parts[1] / len(row_ids),
                                                     parts[1] - self._overhead(False))
        for row_id, depth, context in zip(row_ids, max_depth, row_contexts):
            fresh = row_id not in self.rows
            row = self._row(row_id, context)
            cap = max(0, min(cap_all, int(depth)))
            if fresh and cap > 0 and self._engages(row, cap, context, len(row_ids)):
                row.looking[self.order[0]] = _SlotLook()  # a request starts engaged (`_slot_look`)
            pending, row.pending = row.pending, None
            look.append(None)
            look_budget.append(0)
            rate.append(0.0)
            if row.looking:
                name = self.order[0]
                if cap > 0 and self._slot_look(len(row_ids)):  # engaged: the cut sees this step's scores
                    row.member = name
                    choice.append(name)
                    budgets.append(self._free_budget(row, name, cap))
                    forced.append(0)
                    free.append(False)
                    items_per_row.append(None)
                    continue
                self._end_look(row, name, judged=False)
            cheap = self._free_lookers(row, cheap_names) if cap > 0 else []
            resting = [n for n in cheap if row.rest.get(n, 0) > 0]
            for name in resting:
                row.rest[name] -= 1
            if batch_resting:  # the batch's looking steps did not pay (`_judge_looks`)
                resting = cheap
            if resting and len(resting) == len(self.order):
                # A look is not free (drafting, checking and cutting cost ~2% of a plain step on this CPU):
                # after FRUITLESS_LOOKS looks whose drafts were all cut away, the row rests from its free
                # drafter.
                choice.append(None)
                budgets.append(0)
                forced.append(0)
                free.append(False)
                items_per_row.append(None)
                self._reason(BATCH_REST_REASON if batch_resting else "free drafter resting after fruitless looks")
                continue
            cheap = [n for n in cheap if n not in resting]
            if row.quiet > 0 and not cheap and pending is None:
                # Priced as plain a moment ago and nothing of the row's has changed since (its estimates
                # move only with its own verdicts): no need to price every option again every step.
                row.quiet -= 1
                choice.append(None)
                budgets.append(0)
                forced.append(0)
                free.append(False)
                items_per_row.append(None)
                self._reason(row.quiet_reason)
                continue
            if (len(self.order) == 1 and cheap and pending is None
                    and row.since[cheap[0]] < row.due.get(cheap[0], row.interval[cheap[0]])):
                # The common case, priced in a few microseconds: a lone free drafter, no probe due.
                row.member = cheap[0]
                choice.append(cheap[0])
                budgets.append(self._free_budget(row, cheap[0], cap))
                forced.append(0)
                free.append(True)
                items_per_row.append(None)
                continue
            options: dict[str, tuple[_Items, int, float, int]] = {}
            for name in self.order if cap else ():
                items = self._position_items(row, name, cap, context, explore=name not in cheap_names)
                items.left = float(depth)
                rates = self._prefix_rates(items)
                keep = max(range(len(rates)), key=rates.__getitem__)
                best_one = max(range(1, len(rates)), key=rates.__getitem__) if len(rates) > 1 else 0
                best = rates[keep]
                if keep and items.prepare:  # its one-off prepare, spread over the tokens the row has left
                    best = depth / (self.table.prepare(name, items.prepare) + depth / best)
                    if best <= rates[0]:
                        keep, best = 0, rates[0]
                options[name] = (items, keep, best, best_one)
            viable = {name: o for name, o in options.items()
                      if o[1] > 0 and (row.discarded.get(name, 0) < 2 or name in cheap)}
            pick: str | None = None
            if viable:
                pick = max(viable, key=lambda n: viable[n][2])
                current = row.member
                if current in viable and current != pick and viable[current][2] >= viable[pick][2] * margin:
                    pick = current
                if pick != row.member and row.member is not None:
                    self.counts["switches"] += 1
            row.member = pick
            for name, option in options.items():
                # A costly drafter's probe is weighed against the row's best other option; a free drafter's
                # (its first node verified) costs next to nothing whatever the row does instead. Not one whose
                # probe needs prompt slots (PPD's): its two steps take the row's place from the drafter it would
                # use instead. Priced against a plain step, auto probed PPD every 4, 8, 16... steps of every
                # request (12 of 74 steps of a summarization) where anpd commits 2-3 tokens a step; priced against
                # those, auto went 1.04-1.08x faster on mt_bench, translation, qa and math (interleaved A/B,
                # benchmarks/results/goodput/checks_s72/).
                instead = 0.0 if name in cheap_names and not option[0].base else max(
                    (o[2] for other, o in options.items() if other != name), default=0.0)
                # (the catch-up grown while the row waited priced at one interval's, `_probe_wait`: for a row
                # alone wherever the drafter drafted here before, in a live batch only where it was right here)
                interval_priced = row.right if batch is not None else row.prepared
                grown = min(option[0].lag, row.interval[name]) if name in interval_priced else None
                costly_probe = name not in cheap_names
                wait = self._probe_wait(option, instead, batch, grown, costly_probe)
                lost = wait * self._probe_share(option[0], batch, costly_probe)  # its expected loss, in row-steps
                # A row that would decode plainly probes a drafter not yet verified in it after the first
                # interval when the probe's expected loss is under FIRST_PROBE_SHARE of the request's remaining
                # time: its estimates are the pooled ones of earlier requests, which no verdict moves while
                # rows stay plain. Held to the usual wait, a layer_skip probe (~1.3 plain steps) waited 130
                # steps: after a translation prompt lowered the pooled estimate, every summarization and qa
                # request decoded plainly. (Not for a drafter whose probe needs prompt slots: PPD's takes two
                # steps, and probing it once a request took ppd from 0.99 to 0.97 of plain decoding.) A costly
                # drafter's comes after FIRST_PROBE_STEPS: the tokens left are counted up to max_new_tokens, not
                # to where the answer ends, and on translation's 9- to 11-token answers a probe at step 4 of
                # ppd_draft_model (~2 plain steps) cost 10-14% of the request. Sooner where even an answer that
                # ends right after the probe loses at most FIRST_PROBE_SHORT_SHARE of its steps to it: a draft
                # model's one-token probe behind a short prompt (~0.2 of a plain step) comes at the first interval
                # (the first qa request after summarization's documents waited 12 plain steps for a probe after
                # which it drafted every step). A free drafter's (one node verified) costs next to nothing:
                # delayed too, anpd lost 10% on Spec-Bench. The same holds for a costly drafter with nothing to
                # catch up on (layer_skip) in a row where another drafts (drafter="auto"), its loss priced against
                # that one's rate: layer_skip, whose pooled estimates came from a few one-token probes, waited 72
                # steps of the first summarization request, where it commits ~7 tokens a step and anpd and
                # draft_model ~1.6. (Not a draft model, whose first probe prefills its cache with the whole
                # prompt: probed so behind RAG's documents, it drafted 3-12 steps of requests layer_skip does
                # better, and auto read 0.91 of layer_skip there.)
                early = pick is None or (name != pick and name not in cheap_names and not self.members[name].catches_up)
                if early and not row.estimates[name].trials and not option[0].base and lost <= FIRST_PROBE_SHARE * depth:
                    wait = 0.0 if name in cheap_names else float(
                        min(FIRST_PROBE_STEPS, math.ceil(lost / FIRST_PROBE_SHORT_SHARE) - 1))
                row.due[name] = max(row.interval[name], wait)
            probed, row.probed = row.probed, None
            if probed is not None and probed != pending and probed in options and (pick is None or pick == probed):
                self._judge_probe(probed, paid=pick == probed)  # (lost to another drafter: says nothing)
            # A cheap pick is only a look: the cut may still verify none of it, so it can be due too.
            due_probes = [n for n in options if (n != pick or n in cheap) and options[n][3] > 0
                          and row.since[n] >= row.due[n]]
            unknown = self._unknown(row, options, pick)
            if pending in options and pending != pick:  # finish what a drafter's first step prepared
                probe = pending
            elif unknown is not None:
                probe = unknown
                row.explored.add(unknown)
                self.counts["probes"] += 1
            elif due_probes:  # try a drafter again: estimates of one not verified lately are stale
                probe = max(due_probes, key=lambda n: row.since[n] / row.interval[n])
                if probe in cheap or options[probe][0].base or batch is not None:  # (see `_probe_wait`)
                    row.interval[probe] = min(self.options.max_probe_interval, 2 * row.interval[probe])
                self.counts["probes"] += 1
            else:
                probe = None
            if probe is not None:
                items, _, _, best_one = options[probe]
                if probe in cheap:  # a free drafter's probe only needs its first node verified
                    best_one = min(best_one, 1)
                else:
                    row.probed = probe
                items.forced = best_one
                choice.append(probe)
                budgets.append(self._free_budget(row, probe, cap) if probe in cheap else best_one)
                forced.append(best_one)
                free.append(probe in cheap)
                items_per_row.append(items)
                continue
            if pick is None and cheap:  # nothing promises to pay, but a free look costs nothing
                pick = cheap[0]
            if pick is None:
                if options:  # stay plain until the first probe may be due (at most QUIET_STEPS)
                    due = min(row.due[n] - row.since[n] for n in options)
                    row.quiet = max(0, min(QUIET_STEPS, int(due) - 1))
                    row.quiet_reason = "expected rate below plain decoding"
                choice.append(None)
                budgets.append(0)
                forced.append(0)
                free.append(False)
                items_per_row.append(None)
                self._reason("expected rate below plain decoding" if cap else "no tokens left to draft")
                continue
            look_first = cheap[0] if pick not in cheap and cheap else None
            costly = [n for n in viable if n not in cheap]
            if pick in cheap and costly:
                # The free drafter promises most, but where it finds nothing to propose the row would decode
                # plainly: it looks first, and the best costly drafter drafts where the look is worth less.
                look_first, pick = pick, max(costly, key=lambda n: viable[n][2])
            items, keep, pick_rate, _ = options[pick]
            if parts is None and pick not in cheap and self.members[pick].follows_exit:
                # A row priced alone (a live batch's budgets come from the joint search below): a chain whose
                # drafter follows the exit reaches to every position priced here (the most the row's drafts
                # reached so far, plus two), and the exit, which reads this step's scores too, decides where it
                # ends; at the planned length it stops unless the path drafted so far is surer than the plan
                # expected. Held to its plan, a draft model accepting 3 of 3 for twenty steps of a translation
                # never drafted a fourth token: that position's estimate, from failures when the answer began,
                # was never tried again (benchmarks/results/goodput/checks_s61/).
                keep = len(items.probs)
            choice.append(pick)
            budgets.append(self._free_budget(row, pick, cap) if pick in cheap else keep)
            forced.append(0)
            free.append(pick in cheap)
            items_per_row.append(items)
            if look_first is not None:  # a free drafter's draft may beat this one: look first
                look[-1], look_budget[-1], rate[-1] = look_first, self._free_budget(row, look_first, cap), pick_rate
        if any(name is not None for name in choice) or any(name is not None for name in look):
            weights, base = self._weights(row_ids, max_depth, waiting, parts)
        else:  # (no row drafts: nothing to weigh; a static batch's weights cost ~0.15 ms on this CPU)
            weights, base = [1.0] * len(row_ids), None
        if self.live and len(row_ids) > 1 and any(
                c is not None and not f and not fo for c, f, fo in zip(choice, free, forced)):
            # The batch as a whole: one verification forward for every row, priced together.
            rows = [it or _Items([], [], 0, context=c) for it, c in zip(items_per_row, row_contexts)]
            for items, weight in zip(rows, weights):
                items.weight = weight
            joint = self._solve(rows, len(row_ids), None, base, BATCH_MARGIN)
            why = ("batch: other rows' nodes pay better" if any(joint) else
                   "batch: no row's draft pays for its inputs at this batch size")
            quiet_steps = self._batch_quiet_steps(row_ids, any(joint))
            for b, kept in enumerate(joint):
                if choice[b] is None or forced[b] or free[b]:
                    continue
                budgets[b] = kept
                if kept == 0:
                    choice_b, choice[b] = choice[b], None
                    row = self.rows[row_ids[b]]
                    # A row cut while other rows' nodes pay is priced again next step: a static batch's weights
                    # move every step (the row ahead is last once the others' drafts are accepted), and a row
                    # kept quiet after it fell behind left its place in the batch's end undrafted: in static
                    # batches of 2 the rows drafted in turn, one a step (stop 56).
                    row.quiet = 0
                    if not any(joint):
                        due = min((row.due[n] - row.since[n] for n in row.due if n != choice_b),
                                  default=quiet_steps + 1)
                        row.quiet = max(0, min(quiet_steps, int(due) - 1))
                    row.quiet_reason = why
                    self._reason(row.quiet_reason)
        lags: dict[str, float] = {}
        prepares: dict[str, float] = {}
        for row_id, name, budget, looked, look_nodes in zip(row_ids, choice, budgets, look, look_budget):
            row = self.rows[row_id]
            for drafter, asked in ((name, budget), (looked, look_nodes)):
                if drafter is not None and asked > 0:
                    if drafter not in row.prepared:
                        prepares[drafter] = prepares.get(drafter, 0.0) + row.lag.get(drafter, 0.0)
                    if not self._prepares_first(row, drafter):
                        lags[drafter] = lags.get(drafter, 0.0) + self._catch_up(row, drafter)
                    row.prepared.add(drafter)
        plan = Plan(choice, budgets, [f > 0 for f in forced], forced, free, look, look_budget, rate,
                    cheap_names, weights, [c for c in row_contexts if c is not None], [int(d) for d in max_depth],
                    [] if isinstance(waiting, bool) else [int(t) for t in waiting], lags, prepares, base)
        if base is not None and parts is not None:
            plan.marginal = parts[0]
        rows_planned = [(self.rows[row_id], items) if name is not None and not is_free and budget > 0 else None
                        for row_id, name, is_free, budget, items in zip(row_ids, choice, free, budgets, items_per_row)]
        if any(rows_planned):
            plan.exit = ChainExit(len(row_ids), lambda b: self._exit_row(rows_planned[b], plan.budget[b],
                                                                         plan.forced[b]))
        return plan

    def _exit_row(self, planned: tuple[_Row, _Items | None] | None, budget: int, forced: int) -> ExitRow | None:
        """The prices `ChainExit` reads for a row drafting a chain of at most `budget` nodes (None: no chain
        planned): its position estimates as planned (explored), its drafter's scores by position, and the
        row's draft and verify costs priced alone, as a frozen row's are."""
        if planned is None or planned[1] is None or planned[1].member is None or budget <= 0:
            return None
        row, items = planned
        count = min(budget, len(items.probs))
        probs = items.probs[:count]
        conditionals = [p / before if before > 0 else 0.0 for p, before in zip(probs, [1.0, *probs[:-1]])]
        inputs = [1 + items.base]
        for size in items.sizes[:count]:
            inputs.append(inputs[-1] + size)
        verify = self.table.verify_from(1, 1, inputs[-1], self.packed, items.context)
        estimate = row.estimates[items.member]
        return ExitRow(conditionals, list(estimate.score_mean[:count]), estimate.factors(),
                       self.table.draft_chain(items.member, count + 1, items.lag, items.context),
                       [verify[0]] + [verify[n - 1] for n in inputs[1:]],
                       (self._overhead(False), self._overhead()), forced)

    def _batch_quiet_steps(self, row_ids: Sequence[int], drafting: bool) -> int:
        """Steps the rows the batch's pricing made plain stay plain: BATCH_QUIET_STEPS, twice as long each time
        the same rows are priced again and none drafts, up to BATCH_QUIET_MAX (a row's due probe still comes on
        time)."""
        rows, steps = self._batch_quiet
        if drafting or rows != tuple(row_ids):
            steps = BATCH_QUIET_STEPS
        steps = int(min(BATCH_QUIET_MAX, steps))
        self._batch_quiet = (tuple(row_ids), steps if drafting else 2 * steps)
        return steps

    def _unknown(self, row: _Row, options: dict[str, tuple[_Items, int, float, int]], pick: str | None
                 ) -> str | None:
        """With several drafters (drafter="auto"): one this row should probe now because nothing is known
        of it, neither its cost on this model nor any verdict (this call's or earlier calls' priors), and
        the row has not probed it yet. Priced from the default prior, every unmeasured drafter looks alike
        and the first in order always won: in a fresh process auto ran anpd alone and never found that
        layer skipping commits 1.7 tokens a step on translation prompts where anpd finds nothing."""
        if len(self.order) == 1:
            return None
        for name, option in options.items():
            if (name != pick and option[3] > 0 and name not in row.explored and not row.estimates[name].trials
                    and not self.pooled[name].trials and self.table.draft_mean(name) is None):
                return name
        return None

    def _all_quiet(self, row_ids: Sequence[int], cheap_names: frozenset[str], contexts: Sequence[float | None]
                   ) -> Plan | None:
        """The plan when every row is quiet (priced as plain a moment ago, nothing pending, no free drafter
        to look with): a plain step for all, in a few microseconds. On a 1 ms step the full pricing loop's
        ~15 us cost 1.5% of every plain step of a drafter the controller keeps off. None otherwise."""
        found = [self.rows.get(row_id) for row_id in row_ids]
        # (A row kept off PPD, free to draft but not to look, is quiet too.)
        if not all(row is not None and row.quiet > 0 and row.pending is None
                   and not self._free_lookers(row, cheap_names) for row in found):
            return None
        rows = cast(list[_Row], found)
        for row in rows:
            row.quiet -= 1
            self._reason(row.quiet_reason)
        # The rows stay quiet for as many steps as the least quiet of them while the batch stays as it is:
        # those steps take this plan and cut without checks and are observed in bulk (`_QuietRun`, `_settle`).
        # On a 1.4 ms step of a small model, planning, cutting and observing each step cost ~3% of it while
        # the drafter never drafted.
        return self._start_run(row_ids, rows, min(row.quiet for row in rows), cheap_names, contexts)

    def _start_run(self, row_ids: Sequence[int], rows: list[_Row], steps: int, cheap_names: frozenset[str],
                   contexts: Sequence[float | None], resting: bool = False) -> Plan:
        """A quiet run of `rows`: this step and up to `steps` more take the returned plain plan."""
        count = len(rows)
        plan = Plan([None] * count, [0] * count, [False] * count, [0] * count, [False] * count, [None] * count,
                    [0] * count, [0.0] * count, cheap_names, [1.0] * count, [c for c in contexts if c is not None],
                    quiet=True)
        cut = Cut([[] for _ in range(count)], [None] * count, [0] * count, [0] * count, [0.0] * count,
                  [False] * count, [1.0] * count)
        self._run = _QuietRun(list(row_ids), rows, steps, plan, cut, resting=resting)
        return plan

    def _resting_run(self, row_ids: Sequence[int], max_depth: Sequence[int], cap_all: int,
                     cheap_names: frozenset[str], contexts: Sequence[float | None]) -> Plan | None:
        """The plan when the whole batch rests from its free drafter (`_judge_looks`): every row's only drafters
        free lookers, none engaged, pending or out of tokens. Its steps are then one quiet run, as long as what is
        left of the rest (and while every row has tokens to draft). Each resting step planned, cut and observed
        alone cost ~0.35 ms of host work on this CPU (the static batch's weights, the cost model's learning, the
        looks' judge), ~2% of a 17 ms step of a static batch of 8, which rested from anpd on 80% of its steps.
        None otherwise."""
        found = [self.rows.get(row_id) for row_id in row_ids]
        if not all(row is not None and not row.looking and row.pending is None and min(cap_all, depth) > 0
                   and self._looks_only(row, cheap_names) for row, depth in zip(found, max_depth)):
            return None
        rows = cast(list[_Row], found)
        _count_down_rests(rows, 1)
        self._reason(BATCH_REST_REASON, len(rows))
        # (Up to the step at which a row has a token left but none to draft: that step is priced.)
        steps = min(self._batch_rest, min(int(depth) for depth in max_depth) - 1)
        return self._start_run(row_ids, rows, steps, cheap_names, contexts, resting=True)

    def _run_goes_on(self, row_ids: Sequence[int]) -> bool:
        """Whether this step is one more of the quiet run (the same rows, none due to be priced, none with a
        free drafter to look with since the cost model last learnt); if so, counted as such."""
        run = self._run
        if run is None or run.left <= 0 or run.row_ids != row_ids:
            return False
        cheap = self._cheap_drafters()
        if run.resting:  # the cost model learnt meanwhile: its drafters must all still be free to rest from
            if not all(self._looks_only(row, cheap) for row in run.rows):
                return False
            self._batch_rest -= 1
        elif cheap and any(self._free_lookers(row, cheap) for row in run.rows):
            return False
        run.left -= 1
        run.taken += 1  # (its rows' `quiet` and reasons are counted down in bulk: `_settle`)
        return True

    def _settle(self) -> None:
        """End the quiet run, if any: the plain steps it observed go to its rows."""
        run, self._run = self._run, None
        if run is None:
            return
        if run.resting:
            _count_down_rests(run.rows, run.taken)
            self._reason(BATCH_REST_REASON, len(run.rows) * run.taken)
        else:
            for row in run.rows:
                row.quiet -= run.taken
                self._reason(row.quiet_reason, run.taken)
        if not run.observed:
            return
        for row in run.rows:
            row.pace = 1.0 + (row.pace - 1.0) * 0.8 ** run.observed  # `_observe_plain`, that many times
            for other in self.order:
                row.since[other] += run.observed
                row.lag[other] = row.lag.get(other, 0.0) + run.observed
        count = len(run.rows) * run.observed
        self.counts["row_steps"] += count
        self.counts["plain_row_steps"] += count

    def _weights(self, row_ids: Sequence[int], max_depth: Sequence[int], waiting: Waiting,
                 parts: tuple[float, float] | None) -> tuple[list[float], float | None]:
        """`row_weights` for this step; `parts`: `_step_parts` of a live batch (None: frozen or a lone row,
        whose tokens are weighted alike)."""
        if parts is None:
            return [1.0] * len(row_ids), None
        rows = [self.rows[r] for r in row_ids]
        return row_weights(max_depth, [row.pace for row in rows], waiting, *parts)

    def _step_parts(self, batch: int, contexts: Sequence[float | None]) -> tuple[float, float]:
        """(seconds a row adds to a plain step, the whole plain step): what one row leaving a static batch
        saves per step, and what finishing the whole batch a step sooner saves."""
        context = mean_context(contexts)
        table, overhead = self.table, self._overhead(False)
        full = table.verify(batch, batch, self.packed, context) + overhead
        less = table.verify(batch - 1, batch - 1, self.packed, context) + overhead if batch > 1 else 0.0
        return max(0.0, full - less), full

    def _reason(self, why: str, steps: int = 1) -> None:
        reasons = self.counts["plain_reasons"]
        reasons[why] = reasons.get(why, 0) + steps

    # -- after drafting --------------------------------------------------------------------------
    def cut(self, draft: Draft, plan: Plan, draft_seconds: float | None,
            scoring: dict[str, bool] | None = None) -> tuple[Draft, Cut]:
        """The draft to verify: each row's best prefix (deterministic drafts) or its budget (stochastic).
        `scoring`: which drafters' rows carry scores (with drafter="auto" some rows may not)."""
        batch, width = draft.batch_size, draft.width
        if width == 0 and draft.extra is None:  # nothing proposed (the common case): nothing to cut
            run = self._run
            if run is not None and plan is run.plan and not any(plan.budget):
                return draft, run.cut
            engaged = [name is not None and budget > 0 for name, budget in zip(plan.choice, plan.budget)]
            return draft, Cut([[] for _ in range(batch)], [None] * batch, [0] * batch, [0] * batch,
                              [0.0] * batch, engaged, [1.0] * batch)
        host = draft.host  # the engine's drafts carry their host view (validation reads it otherwise)
        counts = draft.sizes()
        parents = [host.parents_of(b) for b in range(batch)] if host is not None and width else (
            draft.parents.tolist() if width else [[] for _ in range(batch)])
        scores_all = None
        if draft.scores is not None and width:
            scores_all = host.scores if host is not None and host.scores is not None else draft.scores.tolist()
        anchors = _extra_anchors(draft)
        orders: list[list[int]] = []
        readings: list[list[tuple[int | None, float]] | None] = [None] * batch  # (`RowAcceptance.observe`)
        items_rows: list[_Items] = []
        ups: list[list[int] | None] = []
        by_score = [False] * batch
        looking = [False] * batch
        root_extras: list[int] = []
        node_extras: list[float] = []
        for b in range(batch):
            n = counts[b]
            name = plan.choice[b]
            if name is not None:
                row = self._row_by_index(b)
                row.largest[name] = max(row.largest.get(name, 0), n)
            per_node = [0] * n
            root = 0
            for anchor in anchors[b]:
                if anchor < 0:
                    root += 1
                elif anchor < n:
                    per_node[anchor] += 1
            root_extras.append(root)
            node_extras.append(sum(per_node) / n if n else 0.0)
            if name is None or n == 0:
                orders.append([])
                ups.append(None)
                items_rows.append(_Items([], [], root if name is not None else 0, member=name))
                continue
            explore = name not in plan.cheap
            by_score[b] = self._reads_by_score(row, name, explore)
            order, up, probs, reading = self._rank(b, name, n, parents[b], scores_all[b] if scores_all else None,
                                                   (scoring or {}).get(name, True), observe=True,
                                                   explore=explore, by_score=by_score[b])
            ups.append(up)
            readings[b] = reading
            orders.append(order)
            member = self.members[name]
            if member.stochastic:
                forced = min(plan.budget[b], n)
            else:
                forced = min(plan.forced[b] if plan.forced else 0, n)
            if member.stochastic:
                probs = probs[:forced]
            weight = plan.weights[b] if plan.weights else 1.0
            looking[b] = name in row.looking  # its root slots stay whatever is kept
            items_rows.append(_Items(probs, [1 + per_node[i] for i in order], 0 if looking[b] else root, forced, name,
                                     weight, plan.contexts[b] if plan.contexts else None,
                                     sunk=root if looking[b] else 0))
        if not any(items.probs for items in items_rows):
            kept = [0] * batch  # nothing proposed: a plain step (or a drafter's first, slots-only step)
        elif self._frozen_rows(batch):
            kept = [self._solve_row(items, self._draft_share(items, draft_seconds, batch)) if items.probs
                    else 0 for items in items_rows]
        else:
            kept = self._solve(items_rows, batch, draft_seconds or 0.0, plan.base, BATCH_MARGIN if batch > 1 else 0.0)
        expected = [1.0 + sum(items.probs[:k]) for items, k in zip(items_rows, kept)]
        keep = [[False] * width for _ in range(batch)]
        engaged = [False] * batch
        widths: list[int] = []
        kept_counts: list[int] = []
        spares: list[Spare | None] = [None] * batch
        for b in range(batch):
            k = min(kept[b], len(orders[b]))
            up, reading = ups[b], readings[b]
            if self.hindsight and k < len(orders[b]) and up is not None and reading is not None \
                    and not self.members[plan.choice[b]].stochastic:  # type: ignore[index]
                spares[b] = Spare(orders[b][k:], up[k:], reading[k:])
            if plan.choice[b] is not None and plan.budget[b] > 0 and (k > 0 or counts[b] == 0 or looking[b]):
                engaged[b] = True  # a row drafting nothing yet (PPD's first step) or looking keeps its root slots
            widths.append(1 + (root_extras[b] if engaged[b] else 0) + sum(items_rows[b].sizes[:k]))
            for node in orders[b][:k]:
                keep[b][node] = True
            orders[b] = orders[b][:k]
            kept_counts.append(k)
            if ups[b] is not None:
                ups[b] = ups[b][:k]  # parent positions (a prefix of the order is a subtree)
            if readings[b] is not None:
                readings[b] = readings[b][:k]
        prefix = draft.extra is None and all(order == list(range(len(order))) for order in orders)
        if prefix and kept_counts == counts:
            cut_draft = draft  # nothing cut
        elif prefix:  # chains and breadth-first trees: a slice, no reordering
            cut_draft = narrow_draft(draft, kept_counts)
        elif width or draft.extra is not None:
            cut_draft = keep_nodes(draft, keep, None, engaged)
        else:
            cut_draft = draft
        # Position order in the cut draft's indices (kept nodes are compacted in their original order).
        for b in range(batch):
            if orders[b]:
                rank = {node: i for i, node in enumerate(sorted(orders[b]))}
                orders[b] = [rank[node] for node in orders[b]]
        return cut_draft, Cut(orders, ups, counts, root_extras, node_extras, engaged, expected, readings=readings,
                              spare=spares, by_score=by_score, widths=widths)

    def _reads_by_score(self, row: _Row, name: str, explore: bool) -> bool:
        """Whether the row's draft of `name` is read by its scores' values (`RowAcceptance.by_score`): with
        hindsight, for a free drafter that looks every step (no slots of its own, so every proposal is judged:
        anpd, where it was measured). A drafter whose look costs its prompt slots (PPD) goes plain when its
        estimates fall and is then judged no more, so its bins would stay at their prior; it keeps the reading
        against its positions (on qa and math prompts PPD either drafts on ~97% of row steps or stays plain on
        ~99%, from one process to the next, read either way), except in a row engaged with it (`_slot_look`),
        where every step's proposal is judged as a free drafter's is."""
        return self.hindsight and not explore and (row.root_extras.get(name, 0.0) == 0 or name in row.looking)

    def _rank(self, b: int, name: str, n: int, parents: list[int], scores: list[float] | None, scored: bool,
              observe: bool = False, explore: bool = False, by_score: bool = False
              ) -> tuple[list[int], list[int], list[float], list[tuple[int | None, float]]]:
        """Row b's n proposed nodes in the order they may be kept (best score first, else node order),
        each one's parent position, their acceptance estimates (`explore`: RowAcceptance.conditional) and
        what their verdicts teach the score calibration (`RowAcceptance.node_estimates`)."""
        estimate = self._row_by_index(b).estimates[name]
        if scores is not None and scored and not self.members[name].stochastic:
            effective = _monotone(scores[:n], parents[:n])
            order = sorted(range(n), key=lambda i: (-effective[i], i))
            position = {node: i for i, node in enumerate(order)}
            up = [position[parents[node]] if parents[node] >= 0 else -1 for node in order]
            conditional = [effective[node] / effective[parents[node]]
                           if parents[node] >= 0 and effective[parents[node]] > 0 else effective[node]
                           for node in order]
            if by_score:
                probs, readings = estimate.by_score(up, conditional)
            else:
                probs, readings = estimate.node_estimates(up, conditional, explore)
            if observe:
                estimate.observe_scores(conditional)
                if self.live:
                    self.pooled[name].observe_scores(conditional)
            return order, up, probs, readings
        up = [parent if parent >= 0 else -1 for parent in parents[:n]]
        if scores is not None and scored and observe:  # a sampled draft's scores: only its exit reads them
            conditional = [score / scores[parent] if parent >= 0 and scores[parent] > 0 else score
                           for score, parent in zip(scores[:n], parents[:n])]
            estimate.observe_scores(conditional)
            if self.live:
                self.pooled[name].observe_scores(conditional)
        probs, readings = estimate.node_estimates(up, explore=explore)
        return list(range(n)), up, probs, readings

    def propose(self, drafter: Any, state: Any, plan: Plan) -> Draft:
        """The step's draft. With drafter="auto", free drafters (n-gram lookups) propose first for rows
        whose plan is a costly drafter; where that free draft promises more than the costly drafter's
        plan, the row takes it and the costly drafter is not run for it."""
        members = getattr(drafter, "propose_members", None)
        if members is None or not any(plan.look):
            return drafter.propose(state)
        batch = state.batch_size
        first = [look or (c if c in plan.cheap else None) for look, c in zip(plan.look, plan.choice)]
        budget = [lb if look else (bud if f else 0) for look, lb, bud, f in
                  zip(plan.look, plan.look_budget, plan.budget, first)]
        early = members(state, first, budget, self.clock)
        rows: list[Draft | None] = [None] * batch
        for b in range(batch):
            name, look = first[b], plan.look[b]
            if name is None:
                continue
            draft = early[name]
            if look is None:  # the free drafter was this row's own choice
                rows[b] = draft
                continue
            host = draft.host
            n = host.sizes[b] if host is not None else int(draft.num_nodes[b])
            if n == 0:
                continue
            parents = host.parents_of(b) if host is not None else draft.parents[b].tolist()
            scores = None
            if draft.scores is not None:
                scores = host.scores[b] if host is not None and host.scores is not None else draft.scores[b].tolist()
            _, _, probs, _ = self._rank(b, look, n, parents, scores, scores is not None,
                                        by_score=self._reads_by_score(self._row_by_index(b), look, False))
            sizes = [1] * n
            rates = self._prefix_rates(_Items(probs, sizes, 0, member=None,
                                              context=plan.contexts[b] if plan.contexts else None))
            if max(rates) > plan.rate[b]:  # the free draft wins: no costly draft for this row
                plan.choice[b], plan.budget[b], plan.free[b] = look, plan.look_budget[b], True
                rows[b] = draft
                self.counts["free_wins"] = self.counts.get("free_wins", 0) + 1
        later = [c if rows[b] is None and c is not None and first[b] != c else None
                 for b, c in enumerate(plan.choice)]
        if any(later):
            late = members(state, later, plan.budget, self.clock)
            for b, name in enumerate(later):
                if name is not None:
                    rows[b] = late[name]
        state.draft_choice = list(plan.choice)
        state.set_draft_budget(plan.budget)  # (a free draft's win above changed the plan's budgets)
        return drafter.merge(rows, batch)

    def _frozen_rows(self, batch: int) -> bool:
        return not self.live or batch == 1

    def _draft_share(self, items: _Items, draft_seconds: float | None, batch: int) -> float:
        """Frozen rows price their own draft from the snapshot, never from this step's clock."""
        if self.live:
            return (draft_seconds or 0.0) / max(batch, 1)
        n = len(items.probs) if items.member else 0
        return self.table.draft(items.member, n, n, context=items.context) if n and items.member else 0.0

    def _row_by_index(self, b: int) -> _Row:
        return self.rows[self._current_ids[b]]

    # -- learning ----------------------------------------------------------------------------------
    def keeps_timings(self, plan: Plan) -> bool:
        """Whether `observe` reads this step's timings: live calls learn from them, but from one quiet step in
        QUIET_SAMPLE only (`_record`), so the engine reads no clock on the others (on a CPU each read is a
        system call: ~4 us of a 2 ms plain step)."""
        return self.options.trace or self.live and (not plan.quiet or self._samples_next_quiet_step())

    def _samples_next_quiet_step(self) -> bool:
        """Whether the cost model learns from the next quiet step's timings (one in QUIET_SAMPLE)."""
        return (self._quiet_steps + 1) % QUIET_SAMPLE == 0

    def observe(self, plan: Plan, cut: Cut, verdict: Verdict, timings: dict[str, Any] | None,
                accepted: list[int] | None = None, paths: list[list[int]] | None = None,
                targets: list[list[int]] | None = None, proposed: list[list[int]] | None = None) -> None:
        """Update every row's estimates from the verdict, and (live) the cost model from the timings (None
        where `keeps_timings` said they are not read).
        `accepted` and `paths` (trees; None: chains' prefixes): the engine's host copy of the verdict.
        `targets` (each row's accepted tokens, then its bonus) and `proposed` (the uncut draft's tokens per
        row): for hindsight, where the cut dropped nodes (`Cut.spare`)."""
        self._steps += 1
        if self._run is not None and plan is self._run.plan:
            self._run.observed += 1
            counts = [0] * len(plan.choice)
        elif plan.plain:
            counts = self._observe_plain()
        else:
            counts = self._observe_rows(plan, cut, verdict, accepted, paths, targets, proposed)
        if self.options.trace:
            self.trace.append({"rows": list(self._current_ids), "choice": list(plan.choice),
                               "budget": list(plan.budget), "probe": list(plan.probe),
                               "verified": [len(o) for o in cut.order], "accepted": counts,
                               "expected": [round(e, 3) for e in cut.expected],
                               "proposed": list(cut.proposed), "inputs": cut.inputs,
                               "weights": [round(w, 6) for w in plan.weights], "base": plan.base,
                               **{k: round(v, 6) for k, v in timings.items() if isinstance(v, float)}})
        if self.live:
            self._count_static(plan, counts)
            # (a quiet step's plain-step price is read where the cost model learns from it: one in QUIET_SAMPLE)
            if len(plan.choice) > 1 and (not plan.quiet or self._samples_next_quiet_step()):
                self._judge_looks(plan, counts, cast(dict[str, Any], timings))
            self._record(plan, cut, timings)

    def _judge_looks(self, plan: Plan, accepted: list[int], timings: dict[str, Any]) -> None:
        """Whether a live batch's free drafter pays for its looks, judged by what the batch measured: each step
        in which it looked, the progress the batch made, in plain steps, at the measured price of a plain step,
        against the step's measured seconds, into a decayed balance. When the balance runs negative after
        FRUITLESS_LOOKS looking steps, every row rests from the free drafter (`plan`), the rests doubling up to
        MAX_BATCH_REST steps while the looks keep losing (learnt across calls: `CostTable.batch_rests`).
        Progress: while more prompts wait than the batch has rows (tokens weighted alike) the rows' committed tokens
        over the batch size; where the rows are weighed (a static batch, a continuous batch's last wave) one plain
        step plus what the accepted tokens are worth by the weights the cut priced the step with (`_credit`). A
        static batch's weights are checked against what its tokens did to its end in earlier calls
        (`_learn_static_worth`).

        Until stop 77 a weighed step was credited with the fall of the batch's last end (`lane_ends`). Summed over a
        call that is exactly the batch's length, but step by step it credits a row's tokens only once the row
        is the last: while the rows' ends are close, tokens accepted ahead of the last were credited nothing, the
        credit came when the last row caught up, at the batch's end, and the batch had rested by then (a
        continuous batch of 8 rested 748 of its 884 row-steps). Credited by the weights, with the static gate,
        anpd went from 0.982-0.994 to 1.000-1.027 of batched plain decoding in static batches of 4, 1.114-1.139 to
        1.174-1.191 at 2, 1.076 to 1.115 in continuous batches of 4, level at 8; 1.2-1.4 points below in the
        continuous runs at 16 (benchmarks/results/goodput/checks_s77/).
        A plain step's price is `CostTable.verify` and the plain overhead, scaled by how this batch's plain steps
        measured against it.

        A row's own rests (`_count_look`) judge only whether its looks kept anything. In a static batch of 8
        on this CPU anpd's looks kept nodes in half the steps (mostly rows ahead of the last, whose tokens the
        cut values at what their leaving saves, little here), every step looked in some row (a looking step
        cost ~0.8 ms more engine time than a plain one, 6% of the step, counted nowhere in the cut, where the
        look is already paid) and the batch ran all of plain decoding's steps at 0.90-0.93 of its speed."""
        if not (plan.plain or any(plan.free)):
            return
        count = len(plan.choice)
        spent = sum(timings.get(key) or 0.0 for key in ("draft", "verify", "other"))
        context = mean_context(plan.contexts)
        price = self.table.verify(count, count, self.packed, context) + self._overhead(False)
        if spent <= 0 or price <= 0:
            return
        if plan.plain:
            ratio = spent / price
            self._plain_ratio = ratio if self._plain_ratio is None else 0.9 * self._plain_ratio + 0.1 * ratio
            return
        if plan.base is None or not plan.weights:  # tokens weighted alike
            progress = 1.0 + sum(accepted) / count
        else:
            progress = 1.0 + self._credit(plan, accepted)
        gain = progress * price * (self._plain_ratio or 1.0) - spent
        self._look_balance = LOOK_BALANCE_DECAY * self._look_balance + gain
        self._looks_since_rest += 1
        rests, key = self.table.batch_rests, (self.name, batch_bucket(count), plan.base is not None)
        if gain > 0 and self._look_balance > 0:
            rests[key] = FIRST_REST
        elif self._look_balance < 0 and self._looks_since_rest >= FRUITLESS_LOOKS:
            self._batch_rest = rests.get(key, FIRST_REST)
            rests[key] = min(MAX_BATCH_REST, 2 * self._batch_rest)
            self._look_balance, self._looks_since_rest = 0.0, 0

    def _credit(self, plan: Plan, accepted: list[int]) -> float:
        """What a weighed step's accepted tokens saved, in plain steps, by the weights the cut priced it with: each
        token its row's own place in a step (`Plan.marginal`) and its share of the batch's end (the row's chance of
        being the last). Except in a static batch whose drafter's tokens were found, in earlier calls at this batch
        size, to move the end by less than STATIC_WORTH_FLOOR of what the weights said (`CostTable.static_worth`):
        there the credit is how much nearer the end came (the fall in the most tokens any row has left). In static
        batches of 8 anpd's tokens moved the end by ~0.15 of the weights' claim, and credited by the weights its
        looks ran at 0.98 of plain decoding against 1.01 (in batches of 4: ~0.6, 1.015 against 0.993)."""
        # (`observe` counts the step first: `_static_rows` is empty once prompts wait or a row has joined)
        if self._static_rows and self._static_worth() < STATIC_WORTH_FLOOR:
            after = [max(0, left - a - 1) for left, a in zip(plan.left, accepted)]
            return max(plan.left) - max(after) - 1.0
        return sum(weight * a for weight, a in zip(plan.weights, accepted)) / cast(float, plan.base)

    def _static_worth(self) -> float:
        """The learnt worth of this static batch's tokens (`CostTable.static_worth`); unlearnt at this batch size,
        the nearest smaller size's (the more rows a batch has, the less any one row's tokens move its end: anpd's
        read ~0.6 at 4 rows, ~0.15 at 8, ~0.2 at 16), else 1 (the weights taken at their word)."""
        bucket = batch_bucket(len(cast(frozenset, self._static_rows)))
        learnt = [(size, moved / claimed) for (name, size), (moved, claimed) in self.table.static_worth.items()
                  if name == self.name and size <= bucket and claimed > 0]
        return max(learnt)[1] if learnt else 1.0

    def _count_static(self, plan: Plan, accepted: list[int]) -> None:
        """A live batch's step, for `_learn_static_worth`: each row's committed tokens, and how far the step's
        accepted tokens moved the batch's end by the weights (each row's chance of being last)."""
        ids = self._current_ids
        rows = self._static_rows
        if rows is None:
            rows = self._static_rows = frozenset(ids) if len(ids) > 1 else frozenset()
        if not rows:
            return
        if plan.queued or not rows.issuperset(ids):  # prompts wait, or one joined: not a static batch
            self._static_rows = frozenset()
            return
        committed = self._committed
        for row_id, a in zip(ids, accepted):
            committed[row_id] = committed.get(row_id, 0) + 1 + a
        if plan.base is not None and plan.weights and any(accepted):
            ending = plan.base - len(ids) * plan.marginal
            if ending > 0:
                self._claimed_end += sum((weight - plan.marginal) * a
                                         for weight, a in zip(plan.weights, accepted)) / ending

    def _learn_static_worth(self) -> None:
        """After a static batch: how many steps its accepted tokens took off its end (the most tokens a row
        committed, which plain decoding would have taken as many steps for, less the steps taken), and how many the
        weights said they would, added to the decayed sums of `CostTable.static_worth` for its drafter and batch
        size (a ratio of sums: one call's reading swings widely, 0-0.8 for anpd's batches of 4). Calls whose
        weights claimed under STATIC_WORTH_CLAIM steps teach nothing."""
        first = self._static_rows
        if not first or self._claimed_end < STATIC_WORTH_CLAIM:
            return
        moved = max(0, max(self._committed.values()) - self._steps)
        worths = self.model_costs.live.static_worth
        key = (self.name, batch_bucket(len(first)))
        old_moved, old_claimed = worths.get(key, (0.0, 0.0))
        worths[key] = (STATIC_WORTH_DECAY * old_moved + moved, STATIC_WORTH_DECAY * old_claimed + self._claimed_end)

    def _observe_plain(self) -> list[int]:
        """A step no row drafted in: each row committed one token (the engine's plain-step path)."""
        for row_id in self._current_ids:
            row = self.rows[row_id]
            row.pace = 0.8 * row.pace + 0.2
            for other in self.order:
                row.since[other] += 1
                row.lag[other] = row.lag.get(other, 0.0) + 1
        count = len(self._current_ids)
        self.counts["row_steps"] += count
        self.counts["plain_row_steps"] += count
        return [0] * count

    def _observe_rows(self, plan: Plan, cut: Cut, verdict: Verdict, accepted: list[int] | None = None,
                      paths: list[list[int]] | None = None, targets: list[list[int]] | None = None,
                      proposal: list[list[int]] | None = None) -> list[int]:
        """Each row's estimates from a step where some row drafted; returns the accepted counts."""
        counts = list(accepted) if accepted is not None else verdict.num_accepted.tolist()
        if accepted is not None:
            paths = paths if paths is not None else [list(range(n)) for n in counts]
        else:
            paths = verdict.accepted.tolist() if verdict.accepted.numel() else [[] for _ in counts]
        batch = len(self._current_ids)
        for b, row_id in enumerate(self._current_ids):
            row = self.rows[row_id]
            name = plan.choice[b]
            self.counts["row_steps"] += 1
            row.pace = 0.8 * row.pace + 0.2 * (counts[b] + 1)
            asked = {name if plan.budget[b] > 0 else None,
                     plan.look[b] if plan.look and plan.look_budget[b] > 0 else None}
            for other in self.order:
                row.since[other] += 1
                # A drafter asked to draft caught up with every token before this step's.
                row.lag[other] = (0.0 if other in asked else row.lag.get(other, 0.0)) + counts[b] + 1
            spare = cut.spare[b] if cut.spare and targets is not None and proposal is not None else None
            # cut to nothing: the bonus says whether the draft's first nodes would have been accepted
            judged = hindsight([], [], [], [], spare, targets[b], proposal[b]) \
                if spare is not None and not cut.order[b] else None  # type: ignore[index]
            if name is not None and plan.budget[b] > 0:
                proposed, drafted_nothing = cut.proposed[b], not cut.order[b]
                row.discarded[name] = row.discarded.get(name, 0) + 1 if proposed and drafted_nothing else 0
                # Alone, a look that finds nothing to propose costs next to nothing. In a live batch it keeps
                # the whole batch off the quiet path (its plan, propose and cut: ~0.5 ms of a 17 ms step at
                # batch 8 on this CPU, where 9 looks in 10 found nothing or were cut), so it counts.
                if name in plan.cheap and (proposed or (self.live and batch > 1)):
                    self._count_look(row, name, fruitful=not drafted_nothing)
            explored = name not in plan.cheap  # its estimates are read with explore (`_position_items`)
            was_looking = name is not None and name in row.looking
            if was_looking:
                context = plan.contexts[b] if len(plan.contexts) == batch else None
                self._judge_slot_look(row, name, cut.widths[b] if cut.widths else 1, len(cut.order[b]), counts[b],
                                      context)
            if name is None or not cut.order[b]:
                if judged is not None:
                    self._learn_verdict(row, cast(str, name), *judged, explored, bool(cut.by_score and cut.by_score[b]))
                self.counts["plain_row_steps"] += 1
                if name is not None and cut.proposed[b] == 0:
                    self._reason("drafter's first step (extra slots only)" if cut.root_extras[b]
                                 else "drafter proposed nothing")
                elif name is not None and cut.proposed[b] and not cut.order[b]:
                    self._reason("draft cut to nothing (expected rate below plain decoding)")
                if name is not None and cut.root_extras[b]:
                    row.root_extras[name] = float(cut.root_extras[b])
                    if self.live:
                        self.pooled_extras[name] = (row.root_extras[name], row.node_extras[name])
                    if cut.proposed[b] == 0 and cut.engaged[b]:
                        row.pending = name  # its slots predicted the next step's draft: try that draft
                continue
            self.counts["drafted_row_steps"][name] += 1
            self.counts["verified_nodes"] += len(cut.order[b])
            self.counts["expected_tokens"] += cut.expected[b]
            on_path = set(paths[b][: counts[b]])
            accepted = [node in on_path for node in cut.order[b]]
            if any(accepted):
                row.right.add(name)
            up = cut.up[b] or [i - 1 for i in range(len(accepted))]
            if explored:  # the steps since its last verdict here (`since` counts this one too)
                row.estimates[name].fade(row.since[name] - 1)
            reading = cut.readings[b] if cut.readings else None
            known = None
            if spare is not None:
                depth = {node: d + 1 for d, node in enumerate(paths[b][: counts[b]])}
                up, accepted, reading, known = hindsight(up, accepted, [depth.get(node, 0) for node in cut.order[b]],
                                                         reading or [], spare, targets[b], proposal[b])  # type: ignore[index]
            self._learn_verdict(row, name, up, accepted, reading, known, explored, bool(cut.by_score and cut.by_score[b]))
            row.since[name] = 0
            if not plan.probe[b] and not was_looking:  # in use on its own merits: probes' waits start short again
                row.interval[name] = self.options.probe_after
            row.root_extras[name] = float(cut.root_extras[b])
            row.node_extras[name] = 0.7 * row.node_extras[name] + 0.3 * cut.node_extras[b]
            if cut.root_extras[b] and cut.engaged[b] and not was_looking and self._slot_look(batch):
                row.looking[name] = _SlotLook()  # drafted with its slots: stays engaged while that pays
                row.probed = None  # (judged when the looks end)
                row.quiet = 0
            if self.live:  # frozen rows learn from their own history only
                self.pooled_extras[name] = (row.root_extras[name], row.node_extras[name])
        return counts

    def _learn_verdict(self, row: _Row, name: str, up: list[int], accepted: list[bool],
                       readings: list[tuple[int | None, float]] | None, known: list[bool] | None,
                       explored: bool, by_score: bool = False) -> None:
        """The row's (and, live, the pooled) estimates of `name` learn one step's verdicts (`by_score`: the
        readings are `RowAcceptance.by_score`'s)."""
        row.estimates[name].observe(up, accepted, explored, readings, known, by_score)
        if self.live:
            self.pooled[name].observe(up, accepted, explored, readings, known, by_score)
            self._pooled_learnt.add(name)

    def _record(self, plan: Plan, cut: Cut, timings: dict[str, Any] | None) -> None:
        """Keep this step's timings for the cost model; it learns every LEARN_EVERY steps, and at once from a
        drafter's first draft (until then the drafter counts as free: see `_cheap_drafters`)."""
        if plan.quiet:
            sampled = self._samples_next_quiet_step()
            self._quiet_steps += 1
            if not sampled:
                return
        assert timings is not None, "a step whose timings are kept was not timed (see keeps_timings)"
        unlearnt = self._unlearnt
        first = False
        context = mean_context(plan.contexts)
        if timings.get("verify") is not None:
            unlearnt.append(("verify", (len(self._current_ids), cut.inputs, self.packed, timings["verify"], context)))
        for name, (levels, nodes, seconds) in timings.get("draft_by_member", {}).items():
            if nodes > 0:
                first = first or name not in self.table.drafters
                unlearnt.append(("draft", (name, levels, nodes, seconds, plan.lags.get(name, 0.0), context)))
                if any(looked == name for looked in plan.look) or any(
                        chosen == name and free for chosen, free in zip(plan.choice, plan.free)):
                    unlearnt.append(("look", (name, seconds)))
                    self._look_retry.discard(name)
                    # a look that cost more than a free one may: learn now, not after LEARN_EVERY steps
                    first = first or seconds > self._free_limit
        prepared = timings.get("prepare_by_member") or {}  # (None: no prepare hook)
        for name, tokens in plan.prepares.items():
            if tokens > 0 and name in prepared:  # (a look of auto's free member prepares inside its propose)
                first = first or name not in self.table.prepares
                unlearnt.append(("prepare", (name, tokens, prepared[name])))
        if timings.get("other") is not None:
            unlearnt.append(("overhead", (self.name, timings["other"], any(cut.order))))
        self._unlearnt_steps += 1
        if first or self._unlearnt_steps >= LEARN_EVERY:
            self._learn()

    def _learn(self) -> None:
        """The cost model learns the timings kept so far, in the order they were taken."""
        model = self.model_costs
        learn = {"verify": model.observe_verify, "draft": model.observe_draft, "overhead": model.observe_overhead,
                 "look": model.observe_look, "prepare": model.observe_prepare}
        for kind, args in self._unlearnt:
            learn[kind](*args)
        self._unlearnt.clear()
        self._unlearnt_steps = 0
        self._cheap = None

    def _count_look(self, row: _Row, name: str, fruitful: bool) -> None:
        """A free drafter's look that proposed something verified some of it (its rests start short again)
        or none (after FRUITLESS_LOOKS such looks in a row the row rests from it, each rest twice the last,
        up to MAX_REST steps)."""
        if fruitful:
            row.fruitless[name] = 0
            row.rest_wait[name] = FIRST_REST
            return
        row.fruitless[name] = row.fruitless.get(name, 0) + 1
        if row.fruitless[name] >= FRUITLESS_LOOKS:
            wait = row.rest_wait.get(name, FIRST_REST)
            row.rest[name] = wait
            row.rest_wait[name] = min(MAX_REST, 2 * wait)
            row.fruitless[name] = 0

    def finish(self) -> None:
        """Live calls leave their pooled estimates as the next call's priors, relaxed towards where an unseen
        estimate starts where no verdict reached them (`POOLED_RELAX`; with several members only upwards), but for
        drafters with prompt slots."""
        self._settle()
        if self.live:
            self._learn()
            self._learn_static_worth()
            relax = 1.0 - (1.0 - POOLED_RELAX) ** (self._steps / RELAX_STEPS)
            for name, pooled in self.pooled.items():
                # (not a drafter whose look needs prompt slots: whether its tree pays is the device's, as in
                # `_probe_discount`, and its probes stay as rare as its failed ones made them)
                slots = self.pooled_extras.get(name, (0.0, 0.0))[0] > 0
                self.model_costs.live.acceptance[name] = (pooled if name in self._pooled_learnt or slots or not relax
                                                          else pooled.relaxed(relax, down=len(self.order) == 1))
            self.model_costs.live.extras.update(self.pooled_extras)
            self.model_costs.live.probe_streaks.update(self.streaks)
            self.model_costs.end_call()

    def stats(self) -> dict[str, Any]:
        self._settle()
        counts = self.counts
        total = max(counts["row_steps"], 1)
        drafted = sum(counts["drafted_row_steps"].values())
        out = {"mode": "live" if self.live else "frozen", "drafters": list(self.order),
               "row_steps": counts["row_steps"], "plain_row_steps": counts["plain_row_steps"],
               "no_draft_share": counts["plain_row_steps"] / total,
               "drafter_row_steps": dict(counts["drafted_row_steps"]), "probes": counts["probes"],
               "failed_probe_streaks": dict(self.streaks),
               "switches": counts["switches"], "plain_reasons": dict(counts["plain_reasons"]),
               "mean_verified_nodes": counts["verified_nodes"] / max(drafted, 1),
               "mean_expected_tokens": counts["expected_tokens"] / max(drafted, 1),
               "verify_cost_measure_seconds": self.model_costs.measure_seconds}
        if self.options.trace:
            out["trace"] = self.trace
        return out


def _count_down_rests(rows: Iterable[_Row], steps: int) -> None:
    """`steps` steps of the rows' own rests from their free drafters go by under the batch's rest (`_resting_run`)."""
    for row in rows:
        for name, rest in row.rest.items():
            row.rest[name] = max(0, rest - steps)


def mean_context(contexts: Iterable[float | None]) -> float | None:
    """The mean of the known contexts (None: none known): what a batch's step is priced behind."""
    known = [c for c in contexts if c is not None]
    return sum(known) / len(known) if known else None


def row_weights(remaining: Sequence[int], pace: Sequence[float], waiting: Waiting, marginal: float = 1.0,
                step: float = 1.0) -> tuple[list[float], float | None]:
    """What a committed token of each row is worth to the batch, and what a plain step is worth (None: the
    weights' sum). While more prompts wait than the batch has rows (continuous batching, or `waiting` is True:
    sizes unknown) a finished row's place is taken at once and later waves rebalance the rows: every token
    counts the same, one each.

    Otherwise the batch runs until its last row is done, and worth is seconds saved, at a plain step's prices: a
    token makes its row leave a step sooner, `marginal` seconds (what a row adds to a step), and moves the batch's
    end by the chance that the row is the one that ends it (`last_chances`) times what a step costs beyond its
    rows. The chances sum to one, so a plain step is worth what it costs (`step`) and the weights' sum, and
    where every row is alike (a static batch's rows at the start, all tied) the weights are alike too: drafts are
    verified where they raise the batch's tokens per second, as in a continuous batch. Rows are projected to their
    ends at the batch's mean pace (a row's own says whether it was drafted lately, not how fast it can go: stop
    56). Before stop 63 a token's worth was divided by that pace while a plain step's was not, so a batch whose
    drafts paid valued the next draft at 1/pace of its worth and stopped drafting; and rows tied for last were
    credited the end only with the product of the others' first-node acceptance (the end moves this step only if
    all advance), 0.49^3 for each of four tied rows, so a static batch whose rows start tied never drafted
    (benchmarks/results/goodput/batch_costs_s58; checks_s63 for what the change measured: within this CPU's
    spread, as its batches of 4 and more seldom draft for other reasons). Over the steps left the rows' ends spread
    (`LAST_SPREAD`), and the end moves with whichever row turns out last.

    The last wave of a continuous batch (no more prompts waiting than rows) ends the same way: the first rows to
    finish each hand their place to the next waiting prompt, so a row's place ends after its own tokens and
    those of the prompt that takes it (`lane_ends`), and "last" is read on those ends. Weighted alike there,
    the 8 rows of a continuous batch of 8 drafted for whichever rows drafts paid in (their drafted steps
    committed 0.52 tokens a ms against plain steps' 0.45), yet the run took plain decoding's 128 steps: the
    rows whose drafts were rejected held the last prompts back, and the drafts' cost was lost (0.86-0.93x
    of batched plain decoding in the batching benchmark since stop 47, continuous plain decoding 0.96-0.99x)."""
    count = len(remaining)
    queued = [] if isinstance(waiting, bool) else list(waiting)
    if waiting is True or len(queued) > count or count <= 1:
        return [1.0] * count, None
    mean_pace = max(1.0, sum(pace) / count)  # every row's (see above)
    ends = lane_ends([(max(r, 0) + 1) / mean_pace for r in remaining], queued)
    ending = max(0.0, step - count * marginal)
    return [marginal + ending * chance for chance in last_chances(ends)], step


def last_chances(ends: Sequence[float]) -> list[float]:
    """The chance that each row is the last to finish, its end `ends[i]` steps away give or take
    LAST_SPREAD * sqrt(ends[i]) steps (at least half a step): independent logistic spreads, integrated on a grid
    around the latest end. Rows far ahead of the last get ~0; rows tied share the end equally."""
    mean = np.asarray(ends, dtype=float)
    scale = np.maximum(0.5, LAST_SPREAD * np.sqrt(np.maximum(mean, 0.0))) * _LOGISTIC_SD
    reach = 8.0 * float(scale.max())
    grid = np.linspace(float(mean.max()) - reach, float(mean.max()) + reach, 129)
    z = np.clip((grid[None, :] - mean[:, None]) / scale[:, None], -50.0, 50.0)
    below = 1.0 / (1.0 + np.exp(-z))  # each row's chance of being done by that step
    density = below * (1.0 - below) / scale[:, None]
    log_below = np.log(np.maximum(below, 1e-300))
    others = np.exp(log_below.sum(axis=0)[None, :] - log_below)  # the other rows all done by then
    chances = (density * others).sum(axis=1)
    total = float(chances.sum())
    return (chances / total).tolist() if total > 0 else [1.0 / len(ends)] * len(ends)


def lane_ends(steps: Sequence[float], queued: Sequence[int]) -> list[float]:
    """Steps until each row's place in the batch falls empty: its own `steps`, then, for the rows that finish
    first, the tokens of the waiting prompt that takes its place (`queued`, in the order they join, decoded
    plainly: a token a step). At most one prompt per row (`row_weights` reads it for the last wave)."""
    ends = list(steps)
    first_done = sorted(range(len(steps)), key=lambda i: steps[i])
    for row, tokens in zip(first_done, queued):
        ends[row] += max(tokens, 0)
    return ends


def hindsight(up: list[int], accepted: list[bool], depths: list[int], readings: list[tuple[int | None, float]],
              spare: Spare, targets: list[int], tokens: list[int]
              ) -> tuple[list[int], list[bool], list[tuple[int | None, float]], list[bool]]:
    """A row's verdicts extended to the nodes the cut dropped (`Spare`), for a verifier that accepts a node
    exactly when it is the target's choice after its parent: a dropped node whose parent was accepted (or is the
    root) would have been accepted exactly when its token is that choice, `targets[depth of the parent]`
    (`targets`: the accepted tokens, then the bonus; `depths`: each kept node's depth on the path, 0 off it).
    Nodes below a dropped one are not known. Without this, the estimates of the positions a cut keeps dropping
    learn only from the steps whose scores were high enough to keep them: anpd's dropped nodes were accepted
    2.4-2.7 times as often as estimated. Returns parents, verdicts, readings and which verdicts are known,
    up to the last known one."""
    kept = len(accepted)
    ups, hits, known = list(up), list(accepted), [True] * kept
    for node, parent in zip(spare.nodes, spare.up):
        depth = 0 if parent < 0 else depths[parent] if parent < kept and accepted[parent] else None
        decided = depth is not None and depth < len(targets) and node < len(tokens)
        ups.append(parent)
        hits.append(decided and tokens[node] == targets[depth])  # type: ignore[index]
        known.append(decided)
    last = max(i for i, k in enumerate(known) if k) + 1 if any(known) else 0
    return ups[:last], hits[:last], (list(readings) + spare.readings)[:last], known[:last]


def _monotone(scores: list[float], parents: list[int]) -> list[float]:
    """A node's score capped by its parent's: prefixes of the best-first order are connected subtrees."""
    out: list[float] = []
    for score, parent in zip(scores, parents):
        out.append(min(score, out[parent]) if parent >= 0 else score)
    return out


def _extra_anchors(draft: Draft) -> list[list[int]]:
    """Per row, the draft node each real extra slot hangs from (-1: the root), through slot chains."""
    batch = draft.batch_size
    extra = draft.extra
    if extra is None or extra.embeds.shape[1] == 0:
        return [[] for _ in range(batch)]
    width = draft.width
    if extra.host is not None:  # the drafter's (or validation's) host view: no read
        parents, slots = extra.host.parents, extra.host.num_slots
    else:
        parents, slots = extra.parents.tolist(), extra.num_slots.tolist()
    out = []
    for b in range(batch):
        anchors = []
        for e in range(slots[b]):
            parent = parents[b][e]
            while parent >= width:
                parent = parents[b][parent - width]
            anchors.append(parent)
        out.append(anchors)
    return out
