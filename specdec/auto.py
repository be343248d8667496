"""`drafter="auto"`: every drafter usable on the given model, one chosen per row and step by the goodput
controller (`specdec.controller`) from each drafter's measured acceptance and cost.

Usable: `anpd` always; `draft_model` when a draft model is given (`draft=...`), or with the bundled
draft when the target is the bundled default model; `ppd` and `layer_skip` when their assets match
the model (their own setup decides: a checkpoint or skip set made for another model is refused, and
the refusal is reported in the stats). Members are found through the registry like any plugin.

Each step the engine puts the controller's choice per row in `DecodeState.draft_choice`; every member
that was chosen for some row proposes for the whole batch with a zero budget on the other rows, and
the drafts are merged row by row. Every member observes every verdict (with its own rows' nodes, the
others empty), so n-gram tables and draft caches stay in step whichever drafter ran.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from . import registry
from .draft import Draft, DraftHost, ExtraHost, ExtraSlots, Verdict
from .errors import SpecDecError
from .plugins import DecodeState, Drafter, GenerationContext

CANDIDATES = ("anpd", "draft_model", "layer_skip", "ppd")


class AutoOptions(BaseModel):
    """Options of `drafter="auto"`."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    candidates: list[str] = Field(default_factory=lambda: list(CANDIDATES),
                                  description="drafters to choose from, when usable on the model")
    draft: Any = Field(None, description="draft model for draft_model (a model, a local directory or "
                                         '"default"); None = the bundled draft when the target is the '
                                         "bundled default model, else draft_model is left out")
    options: dict[str, dict[str, Any]] = Field(default_factory=dict,
                                               description="options per candidate, by name")
    schedule: str = Field("goodput", description="auto always runs under the goodput controller")


def _is_default_target(model: Any) -> bool:
    """Whether `model` is the bundled default target (loaded from the package's own folder)."""
    source = getattr(model, "name_or_path", None) or getattr(getattr(model, "config", None), "_name_or_path", "")
    if not source:
        return False
    try:
        from .zoo import default_model_dir

        return Path(str(source)).resolve() == (default_model_dir() / "target").resolve()
    except (ImportError, OSError):
        return False


class AutoDrafter(Drafter):
    name = "auto"
    description = "Picks among the usable drafters per row by measured goodput (the goodput controller)."
    Options = AutoOptions

    def __init__(self, options: AutoOptions | None = None) -> None:
        super().__init__(options)
        self.options: AutoOptions
        if self.options.schedule != "goodput":
            raise ValueError('drafter "auto" is the goodput controller\'s choice; schedule must be "goodput"')
        self._created: dict[str, Drafter] = {}
        self.members: dict[str, Drafter] = {}
        self.unusable: dict[str, str] = {}
        self.scored: dict[str, bool] = {}
        # Per member, this step's (levels, nodes, seconds of its propose): the engine shares the step's drafting
        # seconds, on the controller's clock, in these proportions (`SpeculativeEngine._draft_costs`).
        self.last_draft_seconds: dict[str, tuple[int, int, float]] = {}
        self.last_prepare_seconds: dict[str, float] = {}  # per member, this step's `prepare` (wall seconds)

    @property
    def provides_q(self) -> bool:  # type: ignore[override]
        return any(member.provides_q for member in self.members.values())

    def _member_options(self, name: str, model: Any) -> dict[str, Any] | None:
        options = dict(self.options.options.get(name, {}))
        if name == "draft_model" and "model" not in options:
            if self.options.draft is not None:
                options["model"] = self.options.draft
            elif _is_default_target(model):
                options["model"] = "default"
            else:
                return None
        return options

    def setup(self, context: GenerationContext) -> None:
        self.members, self.unusable = {}, {}
        for name in self.options.candidates:
            if name == "auto":
                continue
            options = self._member_options(name, context.model)
            if options is None:
                self.unusable[name] = "no draft model given (drafter_options={'draft': ...})"
                continue
            try:
                member = self._created.get(name)
                if member is None:
                    member = self._created[name] = registry.create("drafter", name, options)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    member.setup(context)
            except (SpecDecError, ValueError, FileNotFoundError, OSError) as error:
                self.unusable[name] = f"{type(error).__name__}: {error}"
                continue
            if not member.controlled():
                self.unusable[name] = "its options ask for its own schedule"
                continue
            self.members[name] = member
        if not self.members:
            raise SpecDecError(f"drafter 'auto': no usable drafter on this model ({self.unusable})")

    def admit(self, rows: list[int]) -> None:
        for member in self.members.values():
            member.admit(rows)

    def finish(self) -> None:
        for member in self.members.values():
            member.finish()

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {"usable": list(self.members), "unusable": dict(self.unusable)}
        for name, member in self.members.items():
            out[name] = member.stats()
        return out

    # -- the step --------------------------------------------------------------------------------
    def propose(self, state: DecodeState) -> Draft:
        batch = state.batch_size
        choice = state.draft_choice or [next(iter(self.members))] * batch
        budget = state.draft_budgets() or [1 << 30] * batch
        self.last_draft_seconds = {}
        drafts = self.propose_members(state, choice, budget)
        return self.merge([drafts.get(name) if name is not None else None for name in choice], batch)

    def prepare(self, state: DecodeState) -> None:
        """Each member chosen for some row this step prepares (with its own rows' budgets); the seconds each
        took are in `last_prepare_seconds` (a draft model's prefill and a lookup table differ a hundredfold:
        the controller prices each member's from its own)."""
        choice = state.draft_choice or [next(iter(self.members))] * state.batch_size
        budget = state.draft_budgets() or [1 << 30] * state.batch_size
        self.last_prepare_seconds = {}
        for name, member in self.members.items():
            part = _member_state(state, name, choice, budget)
            if part is not None:
                started = time.perf_counter()
                member.prepare(part[0])
                self.last_prepare_seconds[name] = time.perf_counter() - started

    def propose_members(self, state: DecodeState, choice: list[str | None], budget: list[int],
                        clock: Callable[[], float] = time.perf_counter) -> dict[str, Draft]:
        """Each member chosen for some row drafts for the whole batch with a zero budget on the other
        rows; returns its draft with those rows emptied. Times (by `clock`) add up per member for the step."""
        drafts: dict[str, Draft] = {}
        for name, member in self.members.items():
            part = _member_state(state, name, choice, budget)
            if part is None:
                continue
            sub, rows = part
            started = clock()
            draft = _only_rows(member.propose(sub), rows)
            seconds = clock() - started
            drafts[name] = draft
            self.scored[name] = draft.scores is not None
            counts = draft.sizes()
            levels, nodes, spent = self.last_draft_seconds.get(name, (0, 0, 0.0))
            self.last_draft_seconds[name] = (max(levels, max(counts, default=0)), nodes + sum(counts),
                                             spent + seconds)
        return drafts

    def merge(self, rows: list[Draft | None], batch: int) -> Draft:
        """One draft whose row b is row b of `rows[b]` (None: no draft)."""
        return merge_rows(rows, batch)

    def observe(self, state: DecodeState, draft: Draft, verdict: Verdict, committed: list[list[int]],
                extra_logits: torch.Tensor | None) -> None:
        choice = state.draft_choice or [None] * state.batch_size
        for name, member in self.members.items():
            rows = [c == name for c in choice]
            own = replace(state, accepted=None if state.accepted is None else [
                count if mine else 0 for count, mine in zip(state.accepted, rows)],
                accepted_nodes=None if state.accepted_nodes is None else [
                nodes if mine else [] for nodes, mine in zip(state.accepted_nodes, rows)])
            member.observe(own, _only_rows(draft, rows), _verdict_rows(verdict, rows), committed,
                           extra_logits if any(rows) else None)


def _member_state(state: DecodeState, name: str, choice: list[str | None], budget: list[int]
                  ) -> tuple[DecodeState, list[bool]] | None:
    """The step as member `name` sees it (a zero budget on the rows chosen for others) and which rows are its;
    None when no row is its."""
    rows = [c == name for c in choice]
    if not any(rows):
        return None
    own = [b if c == name else 0 for b, c in zip(budget, choice)]
    return DecodeState(row_ids=state.row_ids, sequences=state.sequences, max_depth=state.max_depth,
                       sampling=state.sampling, generator=state.generator, target=state.target,
                       step=state.step, scratch=state.scratch, draft_budget=torch.tensor(own, dtype=torch.long),
                       draft_choice=[c if c == name else None for c in choice], max_depth_host=state.max_depth_host,
                       draft_budget_host=own, draft_exit=state.draft_exit), rows


def _only_rows(draft: Draft, rows: list[bool]) -> Draft:
    """The same draft with the other rows emptied (no nodes, no extra slots); its host view follows."""
    keep = torch.tensor(rows, device=draft.num_nodes.device)
    counts = torch.where(keep, draft.num_nodes, torch.zeros_like(draft.num_nodes))
    extra = draft.extra
    if extra is not None:
        slots = torch.where(keep.to(extra.num_slots.device), extra.num_slots, torch.zeros_like(extra.num_slots))
        extra_host = None if extra.host is None else ExtraHost(
            [n if mine else 0 for n, mine in zip(extra.host.num_slots, rows)],
            [p if mine else [] for p, mine in zip(extra.host.parents, rows)])
        extra = ExtraSlots(extra.embeds, extra.parents, slots, extra_host)
    host = draft.host
    if host is not None:
        host = DraftHost([n if mine else 0 for n, mine in zip(host.sizes, rows)], host.chain,
                         None if host.parents is None else [p if mine else [] for p, mine in zip(host.parents, rows)],
                         None if host.scores is None else [x if mine else [] for x, mine in zip(host.scores, rows)])
    return Draft(draft.tokens, draft.parents, counts, draft.q, extra, draft.scores, host)


def _verdict_rows(verdict: Verdict, rows: list[bool]) -> Verdict:
    keep = torch.tensor(rows, device=verdict.num_accepted.device)
    counts = torch.where(keep, verdict.num_accepted, torch.zeros_like(verdict.num_accepted))
    accepted = torch.where(keep[:, None], verdict.accepted, torch.full_like(verdict.accepted, -1)) \
        if verdict.accepted.numel() else verdict.accepted
    return Verdict(accepted, counts, verdict.bonus)


def merge_rows(rows: list[Draft | None], batch: int) -> Draft:
    """One draft whose row b is row b of `rows[b]` (None: no draft). Rows of deterministic members get
    one-hot q when another row's draft carries q (the same point mass for verifiers); rows without
    scores get zeros (the controller knows which members score)."""
    present = [d for d in rows if d is not None]
    if not present:
        return Draft.empty(batch)
    if all(d is present[0] for d in present):
        return present[0]
    width = max(d.width for d in present)
    device = present[0].tokens.device
    tokens = torch.zeros(batch, width, dtype=torch.long, device=device)
    parents = torch.full((batch, width), -1, dtype=torch.long, device=device)
    counts = torch.zeros(batch, dtype=torch.long, device=device)
    with_q = [d for d in present if d.q is not None]
    q = None
    if with_q:
        q = torch.zeros(batch, width, with_q[0].q.shape[-1], dtype=with_q[0].q.dtype, device=with_q[0].q.device)
    scores = torch.zeros(batch, width) if any(d.scores is not None for d in present) else None
    extra_source = next((d.extra for d in present if d.extra is not None), None)
    embeds = parents_e = num_slots = None
    if extra_source is not None:
        slots = max(d.extra.embeds.shape[1] for d in present if d.extra is not None)
        embeds = extra_source.embeds.new_zeros(batch, slots, extra_source.embeds.shape[-1])
        parents_e = torch.full((batch, slots), -1, dtype=torch.long)
        num_slots = torch.zeros(batch, dtype=torch.long)
    sizes = [d.host.sizes[b] if d is not None and d.host is not None else 0 for b, d in enumerate(rows)]
    host = _merged_host(rows, sizes, scores is not None)
    host_scores = host is not None and host.scores is not None  # then the scores tensor is built from the host
    for b, draft in enumerate(rows):
        if draft is None:
            continue
        n = draft.host.sizes[b] if draft.host is not None else int(draft.num_nodes[b])
        counts[b] = n
        if n:
            tokens[b, :n] = draft.tokens[b, :n].to(device)
            parents[b, :n] = draft.parents[b, :n].to(device)
            if q is not None:
                if draft.q is not None:
                    q[b, :n] = draft.q[b, :n].to(q.device, q.dtype)
                else:
                    q[b, torch.arange(n), draft.tokens[b, :n].to(q.device)] = 1.0
            if scores is not None and draft.scores is not None and not host_scores:
                scores[b, :n] = draft.scores[b, :n].float().cpu()
        if draft.extra is not None and embeds is not None:
            extra_host = draft.extra.host
            e = extra_host.num_slots[b] if extra_host is not None else int(draft.extra.num_slots[b])
            if e:
                embeds[b, :e] = draft.extra.embeds[b, :e]
                own = draft.extra.parents[b, :e].cpu()
                parents_e[b, :e] = torch.where(own >= draft.width, own - draft.width + width, own)
                num_slots[b] = e
    extra = None
    if embeds is not None:
        extra = ExtraSlots(embeds, parents_e, num_slots, _merged_extra_host(rows, width))
    if host_scores:
        scores = torch.tensor([row + [0.0] * (width - len(row)) for row in host.scores]).reshape(batch, width)
    return Draft(tokens, parents, counts, q, extra, scores, host)


def _merged_extra_host(rows: list[Draft | None], width: int) -> ExtraHost | None:
    """The merged extra slots' host view (slots renumbered after the merged width), when every row's draft that
    has extra slots gives one."""
    if any(d is not None and d.extra is not None and d.extra.host is None for d in rows):
        return None
    counts: list[int] = []
    parents: list[list[int]] = []
    for b, draft in enumerate(rows):
        if draft is None or draft.extra is None:
            counts.append(0)
            parents.append([])
            continue
        own = draft.extra.host.parents[b]
        counts.append(len(own))
        parents.append([p - draft.width + width if p >= draft.width else p for p in own])
    return ExtraHost(counts, parents)


def _merged_host(rows: list[Draft | None], sizes: list[int], scored: bool) -> DraftHost | None:
    """The merged draft's host view, when every row's draft has one (and, with scores, host scores)."""
    present = [d for d in rows if d is not None]
    if any(d.host is None or (scored and d.scores is not None and d.host.scores is None) for d in present):
        return None
    chain = all(d.host.chain for d in present)
    parents = None if chain else [d.host.parents_of(b) if d is not None else [] for b, d in enumerate(rows)]
    scores = None
    if scored:
        scores = [(d.host.scores[b] if d.scores is not None else [0.0] * n) if d is not None else []
                  for b, (d, n) in enumerate(zip(rows, sizes))]
    return DraftHost(list(sizes), chain, parents, scores)
