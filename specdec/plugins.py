"""The two plug-in points. The engine only ever talks to these classes, never to a concrete one.

A drafter owns how guesses are made; a verifier owns which guesses are kept. Each declares a
pydantic `Options` model, validated before any model work, and a one-line `description`.
See docs/plugins.md for the full contract and a worked third-party example.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import torch
from pydantic import BaseModel, ConfigDict

from .chain_exit import ChainExit
from .draft import Draft, Verdict
from .rng import RowGenerators
from .sampling import SamplingParams

if TYPE_CHECKING:
    from .target import TargetRunner


class NoOptions(BaseModel):
    """Options model of a plugin that takes none: any key is an error."""

    model_config = ConfigDict(extra="forbid")


@dataclass
class GenerationContext:
    """What a drafter learns once per `generate` call, before the first step."""

    model: Any  # the target transformers model
    tokenizer: Any | None
    sampling: SamplingParams
    generator: RowGenerators  # one per prompt row; draw only what a row uses (see specdec.rng)
    prompts: list[list[int]]  # prompt token ids per row
    max_new_tokens: int
    vocab_size: int  # size of the target's output distribution
    device: torch.device
    max_draft_nodes: int  # the engine rejects drafts with more nodes than this per row
    # Rows (indices into `prompts`) in the batch at the first step; None = every prompt. With continuous
    # batching (`max_batch_size`) the other prompts join later, each announced by `Drafter.admit`.
    rows: list[int] | None = None
    # Whether the goodput controller cuts this drafter's drafts in this call (`DecodeState.draft_budget`
    # is then set every step); a drafter whose schedule is "goodput" falls back to its previous default
    # rule when it does not (generate(controller=False)).
    goodput: bool = False
    # Ids that end a row (the call's eos ids). Nothing drafted past one can be committed, so a chain
    # drafter stops a row's draft after drafting one; a drafter may ignore this (it only saves time).
    eos_token_ids: frozenset[int] = frozenset()
    # The output may depend on what is drafted and must be reproduced (sampling with a seed, or a lossy verifier):
    # a drafter that chooses what it proposes from measured timings chooses from nominal costs instead
    # (`specdec.runner.nominal_model_cost`, `nominal_width_share`), the same in every process.
    reproducible: bool = False

    @property
    def first_rows(self) -> list[int]:
        return list(range(len(self.prompts))) if self.rows is None else list(self.rows)


@dataclass
class DecodeState:
    """The engine's live state as a drafter may read it at each step (read-only by contract).

    Rows are the active rows of the batch; `row_ids[b]` is the original prompt index of row b, so
    a drafter keeps its per-row state keyed by row id and survives rows leaving the batch. With
    continuous batching rows also join: a joining row takes the place of a row that finished (see
    `Drafter.admit`), so a row id may appear at any index.
    """

    row_ids: list[int]
    sequences: list[list[int]]  # committed tokens per active row: prompt + generated so far
    max_depth: torch.Tensor  # [B] long: deeper draft nodes would be pruned (budget, context)
    sampling: SamplingParams
    generator: RowGenerators  # the active rows' generators, in row order
    target: TargetRunner  # runs the target on scratch cache slots (self-speculation)
    step: int = 0
    scratch: dict[str, Any] = field(default_factory=dict)
    # Set by the goodput controller (None when it is off): the most nodes the engine will verify for
    # row b this step (a chain's length; 0 = the row decodes plainly, draft nothing for it). Nodes past
    # it are cut anyway, so drafting them only costs time. `max_depth` still bounds the depth.
    draft_budget: torch.Tensor | None = None  # [B] long
    # drafter="auto": which member drafter drafts row b (None = no draft); read by the auto drafter.
    draft_choice: list[str | None] | None = None
    # Set by the goodput controller: after each depth of a chain, `draft_exit.keep_drafting(depth, scores)`
    # says which rows should draft deeper, from the scores of the nodes just drafted (see specdec.chain_exit).
    # A drafter that scores its chain's nodes stops a row there; one that does not may ignore it.
    draft_exit: ChainExit | None = None
    # Host copies of `max_depth` and `draft_budget` (the engine sets both; read them through `max_depths()`
    # and `draft_budgets()`, which never touch the device), and of each row's accepted count and accepted
    # nodes once the step is verified (`accepted_counts`, `accepted_paths`, for `Drafter.observe`).
    max_depth_host: list[int] | None = None
    draft_budget_host: list[int] | None = None
    accepted: list[int] | None = None
    accepted_nodes: list[list[int]] | None = None  # each row's accepted node indices, in path order

    @property
    def batch_size(self) -> int:
        return len(self.row_ids)

    def max_depths(self) -> list[int]:
        return list(self.max_depth_host) if self.max_depth_host is not None else self.max_depth.tolist()

    def draft_budgets(self) -> list[int] | None:
        if self.draft_budget is None:
            return None
        return list(self.draft_budget_host) if self.draft_budget_host is not None else self.draft_budget.tolist()

    def set_draft_budget(self, budget: list[int], tensor: torch.Tensor | None = None) -> None:
        """Set `draft_budget` and its host copy together (`tensor`: `budget` already made a tensor, which a
        plan serving many steps makes once: building it took ~3 us of a 2 ms plain step)."""
        self.draft_budget_host = [int(b) for b in budget]
        self.draft_budget = tensor if tensor is not None else torch.tensor(self.draft_budget_host, dtype=torch.long)

    def accepted_counts(self, verdict: Verdict) -> list[int]:
        """Accepted nodes per row of this step's verdict, from the engine's host copy when it has one."""
        return list(self.accepted) if self.accepted is not None else verdict.num_accepted.tolist()

    def accepted_paths(self, verdict: Verdict) -> list[list[int]]:
        """Each row's accepted node indices in path order, from the engine's host copy when it has one."""
        if self.accepted_nodes is not None:
            return [list(nodes) for nodes in self.accepted_nodes]
        return [row[:count] for row, count in zip(verdict.accepted.tolist(), verdict.num_accepted.tolist())]


class NominalCost(NamedTuple):
    """A drafter's costs as shares of the target's (`Drafter.nominal_cost`), judged from shapes, not timed."""

    level: float = 0.0  # one draft level (one forward of its own for all rows) over one plain step of the target
    # its compute per token fed (a catch-up on tokens committed since it last drafted, a prefill) over the target's
    compute: float = 0.0


class Drafter(ABC):
    """Makes guesses. Subclass, set `name`, `description`, `Options`, implement `propose`."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    Options: ClassVar[type[BaseModel]] = NoOptions
    #: True when propose() returns q for stochastic drafts; False means drafts are deterministic.
    provides_q: ClassVar[bool] = False

    def __init__(self, options: BaseModel | None = None) -> None:
        self.options = options if options is not None else self.Options()

    def setup(self, context: GenerationContext) -> None:  # noqa: B027 - optional hook
        """Called once per generate call, after prefill and before the first step."""

    def controlled(self) -> bool:
        """Whether the goodput controller (`specdec.controller`) decides how much of this drafter's
        drafts to verify and sets `DecodeState.draft_budget`. Built-ins offer their own schedule as an
        option (`schedule=...`); "goodput", or no such option, means the controller."""
        return getattr(self.options, "schedule", "goodput") == "goodput"

    def follows_exit(self) -> bool:
        """Whether `propose` stops each row's chain where `DecodeState.draft_exit` says (a drafter that scores
        its chain's nodes). The controller then lets such a chain reach past the length it planned (up to what
        the row's drafts reached so far plus two): the exit, which sees this step's scores, decides where it
        ends. False (the default): the budget is the planned length, drafted in full."""
        return False

    def catches_up(self) -> bool:
        """Whether a row's draft costs more for each token the row committed since this drafter last drafted
        it: a draft model feeds them to its own cache first, an n-gram drafter indexes them. The goodput
        controller prices that catch-up from its fit of the drafter's draft times, and a row the drafter has
        not drafted yet has its whole prompt to catch up on. A drafter whose draft reads only the target's cache
        and logits (a self-draft, PPD's prompt tokens) says False: it has nothing to catch up on, and a drift
        of its fit along the catch-up (its lag is ~1-12 tokens between drafts) is then never extrapolated to a
        whole prompt, which priced layer_skip's first draft behind a 1000-token document at several plain steps
        and kept whole requests plain."""
        return True

    def nominal_cost(self) -> NominalCost:
        """What this drafter's work costs, judged from the models' shapes alone, never timed (called after
        `setup`). The goodput controller prices the drafter at this where its decisions must not read timings: a
        sampled call with a seed, whose output would otherwise change from one process to the next
        (`specdec.nominal_costs`). Nothing (the default), as a lookup costs; a drafter that runs a model says how
        much of one (`specdec.runner.nominal_model_cost`)."""
        return NominalCost()

    @abstractmethod
    def propose(self, state: DecodeState) -> Draft:
        """Return a draft for every active row (zero nodes is fine)."""

    def observe(  # noqa: B027 - optional hook
        self,
        state: DecodeState,
        draft: Draft,
        verdict: Verdict,
        committed: list[list[int]],
        extra_logits: torch.Tensor | None,
    ) -> None:
        """Learn from a verdict: `committed[b]` are the tokens row b just committed (accepted
        drafts then the bonus), `extra_logits` [B, E, V] the target's logits at the draft's extra slots.
        `state.sequences` already includes `committed`."""

    def admit(self, rows: list[int]) -> None:  # noqa: B027 - optional hook
        """Continuous batching: prompts `rows` (indices into the context's prompts) were prefilled and
        join the batch at the next step, each in the place of a row that finished. A drafter whose
        per-row state is keyed by row id and built lazily needs nothing here; one that prepared only
        `context.first_rows` in `setup` (a draft model's cache) prepares these now."""

    def prepare(self, state: DecodeState) -> None:  # noqa: B027 - optional hook
        """Called before each `propose` (with the controller's budgets set): one-off work this step's
        draft needs, e.g. a draft model's prefill deferred until a row is first asked to draft. Its time
        counts as setup, not as the drafter's per-step cost (which the goodput controller learns from),
        and a request the controller never drafts for never pays it."""

    def finish(self) -> None:  # noqa: B027 - optional hook
        """Release per-generation resources (caches); called even when generation fails."""

    def stats(self) -> dict[str, Any]:
        """Numbers about the last generation that only the drafter knows (e.g. its own cache's peak
        bytes); the engine copies them into `GenerationStats.drafter_stats` after finish()."""
        return {}


class Verifier(ABC):
    """Decides which guesses are kept. Subclass, set `name`, `description`, `lossless`, `Options`."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    Options: ClassVar[type[BaseModel]] = NoOptions
    #: Whether outputs are distributed exactly as sampling from the target alone.
    lossless: ClassVar[bool] = True
    #: Whether a node is accepted exactly when its token is the target's choice after its parent (for the
    #: path's last node, the bonus token). Then the goodput controller learns from a verdict whether the nodes
    #: it cut away would have been accepted (`specdec.controller`, hindsight).
    accepts_target_choice: ClassVar[bool] = False

    def __init__(self, options: BaseModel | None = None) -> None:
        self.options = options if options is not None else self.Options()

    @abstractmethod
    def verify(
        self,
        draft: Draft,
        logits: torch.Tensor,
        sampling: SamplingParams,
        generator: RowGenerators,
    ) -> Verdict:
        """`logits` [B, 1 + N, V]: index 0 is the target at the root (last committed token), index
        1 + i the target at draft node i. Return the accepted path and the bonus token per row.

        Draw random numbers only through `specdec.sampling.sample` / `specdec.rng.uniform` with a
        mask of the draws each row actually uses, so a row's samples do not depend on its batch."""
