"""PPD + draft model (the papers' combination, P §5.4): classic speculative decoding whose draft model
itself decodes with PPD, so drafting k tokens takes about k / tau_draft draft forwards instead of k.

The draft model keeps its own ragged KV cache of committed tokens (`TargetRunner`). Each outer step
it rolls the cache back to the longest prefix it shares with the target's committed sequence, feeds
the tokens it has not seen, then runs an inner guess-and-verify loop on itself: a `PPDDrafter`
(prompts trained for the draft model) proposes, the draft verifies greedily (exact), until k tokens
exist. Those are exactly the draft model's greedy continuation (PPD is lossless), proposed as a
deterministic chain (q = None), so any verifier applies.

The inner tree is sized for the device (PPD's hardware-aware sizing, P §4.2.2, over the draft's measured
forward costs), down to no tree at all: where every tree's extra inputs cost more than its expected tokens
win (a CPU, where a 53-input forward of the draft costs ~2.7 plain ones for ~1.5 tokens), the loop drafts
with plain draft forwards, run as `draft_model` runs its draft (specdec's fused forward; int8 weight copies
on a CPU, so there the chain is the int8 copy's greedy continuation). Every verifier applies either way.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from specdec.draft import Draft, Verdict, tree_layout
from specdec.errors import DrafterError
from specdec.plugins import DecodeState, Drafter, GenerationContext, NominalCost
from specdec.registry import create
from specdec.rng import RowGenerators
from specdec.runner import (
    LayerPlan,
    TargetRunner,
    context_length,
    cost_clock,
    lean_forward_supports,
    model_device,
    nominal_forward_share,
    nominal_model_cost,
    nominal_width_share,
    prune_draft,
    row_forward_seconds,
    settled_for,
)
from specdec.sampling import SamplingParams

from .drafter import PPDDrafter, PPDOptions, _cached_trees, checkpoint_accuracies

#: Inner tree sizes compared when `tree_size` is not given (each with every prompt count of the checkpoint).
INNER_SIZES = (2, 4, 8, 16, 32)


class PPDDraftModelOptions(BaseModel):
    """Options of the `ppd_draft_model` drafter."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    model: Any = Field("default", description='draft model: a transformers causal LM, a local directory, or '
                                              '"default" (the bundled draft)')
    checkpoint: str | None = Field(None, description="PPD prompts trained for the draft model; None = the "
                                   "shipped ppd_draft_prompts for the default draft")
    random_init: bool = Field(False, description="untrained draft prompts (tests)")
    k: int = Field(5, ge=1, le=64, description="draft tokens per outer step")
    tree_size: int | None = Field(None, ge=2, le=512, description="inner PPD tree size on the draft model; None "
                                  "= sized for this device from the draft's measured forward costs (no tree: "
                                  "plain draft forwards, where none drafts faster)")
    num_ept: int | None = Field(None, ge=1, le=128)
    schedule: Literal["goodput", "constant"] = Field(
        "goodput", description="goodput: the core controller sets each row's draft length (up to k; 0 = no draft "
                               "work at all) from measured step costs and acceptance; constant: always k")


@dataclass(frozen=True)
class InnerSizing:
    """The inner loop's shape on this device: a PPD tree of `tree_size` candidates and prompts using
    `num_prompts` prompts, or none (`tree_size` 0: one plain draft forward per drafted token)."""

    tree_size: int
    num_prompts: int
    tokens_per_second: float  # expected draft tokens per second of draft forwards with this shape
    plain_tokens_per_second: float  # the same with plain forwards


@dataclass(frozen=True)
class InnerShape:
    """One inner tree the sizing weighs: its expected tokens per forward (the tree builder's tau under the
    prompts' accuracies, bonus included) and its steady-state forward's inputs (every prediction available)."""

    tree_size: int
    num_prompts: int
    tau: float
    inputs: int


def inner_shapes(accuracies: list[list[float]], num_ept: int, sizes: Sequence[int] = INNER_SIZES
                 ) -> list[InnerShape]:
    """Every (size, prompt count) the sizing compares, prompt counts outermost."""
    shapes = []
    for count in range(1, len(accuracies) + 1):
        for size in sizes:
            trees = _cached_trees(json.dumps(accuracies[:count]), count, size, "dynamic")
            shapes.append(InnerShape(size, count, trees.expected_tau, trees.trees[count].inputs_with(num_ept)))
    return shapes


def size_inner_loop(accuracies: list[list[float]], num_ept: int, forward_seconds: Callable[[int], float],
                    sizes: Sequence[int] = INNER_SIZES, plain_seconds: float | None = None) -> InnerSizing:
    """The shape with the most expected draft tokens per second: each shape's tau over the cost of its forward,
    against one token per plain forward (`plain_seconds`, default `forward_seconds(1)`: the plain loop may run
    another forward than the tree's, e.g. int8 weight copies on a CPU)."""
    plain = 1.0 / (plain_seconds if plain_seconds is not None else forward_seconds(1))
    best = InnerSizing(0, 0, plain, plain)
    for shape in inner_shapes(accuracies, num_ept, sizes):
        rate = shape.tau / forward_seconds(shape.inputs)
        if rate > best.tokens_per_second:
            best = InnerSizing(shape.tree_size, shape.num_prompts, rate, plain)
    return best


def plain_forward_seconds(draft: torch.nn.Module, plan: LayerPlan | None, repeats: int = 9) -> float:
    """Seconds of one plain draft token as the plain loop runs it (`plan`'s forward, one token behind a short
    cache), the median of `repeats`, timed by the cost model's clock. The tree loop's forwards are priced
    from the draft's measured curve; the plain loop runs int8 weight copies on a CPU, about 3x faster than the
    curve's one-input forward for the default draft (0.45 against 1.46 ms): priced by that curve instead, a
    2-node inner tree "won" (444 against 390 tokens/s) and ppd_draft_model spent 55% of its time drafting where
    it had spent 24%."""
    device = torch.device(model_device(draft))
    clock = cost_clock(device)
    vocab = int(draft.get_input_embeddings().weight.shape[0])
    runner = TargetRunner(draft, 1, 64)
    try:
        runner.scratch_forward((torch.arange(1, 17)[None, :] % vocab).to(device), 0, plan=plan, keep=np.array([15]))
        runner.commit(torch.arange(1, 16)[None, :], [15])
        seconds = []
        for step in range(repeats):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            started = clock()
            runner.scratch_forward(torch.tensor([[(17 + step) % vocab]], device=device), 0, plan=plan,
                                   keep=np.array([0]))
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            seconds.append(clock() - started)
            runner.commit(None, [0])
        return float(np.median(seconds))
    finally:
        runner.release()


def _resolve_draft(spec: Any, target: torch.nn.Module | None = None) -> torch.nn.Module:
    """The draft: a model as given, else loaded from a path ("default": the bundled draft) onto the target's
    device and dtype (the CPU in float32 without a target); shared with `draft_model` while in use."""
    if isinstance(spec, torch.nn.Module):
        return spec
    from ..draft_model import load_draft

    weight = target.get_input_embeddings().weight if target is not None else None
    return load_draft(str(spec), *((weight.device, weight.dtype) if weight is not None else ()))[0]


class _Row:
    """The draft model's cache for one row and which committed tokens it holds."""

    def __init__(self, runner: TargetRunner) -> None:
        self.runner = runner
        self.cached: list[int] = []
        self.prediction_root: int | None = None  # root token the inner PPD predictions are valid for


class PPDDraftModelDrafter(Drafter):
    name = "ppd_draft_model"
    description = "Draft model accelerated by PPD inside its own loop, then verified by the target."
    Options = PPDDraftModelOptions
    provides_q = False

    def __init__(self, options: PPDDraftModelOptions | None = None) -> None:
        super().__init__(options)
        self._rows: dict[int, _Row] = {}
        self.draft_forwards = 0
        self.drafted = 0
        self._draft: torch.nn.Module | None = None
        self.sizing: InnerSizing | None = None  # the inner loop's shape when tree_size is not given
        self.inner: PPDDrafter | None = None  # None: plain draft forwards
        self._nominal = NominalCost()  # `nominal_cost`, set by setup

    def nominal_cost(self) -> NominalCost:
        """A draft level costs one forward of the draft model or less (its inner PPD loop drafts several tokens a
        forward): priced at one (`nominal_model_cost`)."""
        return self._nominal

    def setup(self, context: GenerationContext) -> None:
        opts = self.options
        if self._draft is None:  # once per drafter: setup runs on every generate call
            self._draft = _resolve_draft(opts.model, context.model)
        self.draft = self._draft
        draft_vocab = int(self.draft.get_output_embeddings().weight.shape[0])
        if draft_vocab != context.vocab_size:
            raise DrafterError(f"ppd_draft_model: the draft's vocabulary ({draft_vocab}) differs from the "
                               f"target's ({context.vocab_size}); use a draft with the same tokenizer")
        checkpoint = opts.checkpoint
        if checkpoint is None and not opts.random_init:
            if opts.model != "default":
                raise DrafterError("ppd_draft_model: give checkpoint=... (PPD prompts trained for the draft with "
                                   "`specdec train-ppd --model DRAFT`) or random_init=True")
            from specdec.zoo import default_model_dir

            checkpoint = str(Path(default_model_dir()) / "ppd_draft_prompts.safetensors")
        inner = {"checkpoint": checkpoint, "random_init": opts.random_init, "tree_size": opts.tree_size,
                 "num_ept": opts.num_ept}
        inner_options = PPDOptions(**{k: v for k, v in inner.items() if v is not None})
        if opts.tree_size is None:
            self.sizing = self._size(inner_options, draft_vocab, context.reproducible)
            shape = {"tree_size": self.sizing.tree_size, "num_prompts": self.sizing.num_prompts}
            inner_options = PPDOptions(**{**inner_options.model_dump(), **shape}) if self.sizing.tree_size else None
        self.inner = PPDDrafter(inner_options) if inner_options is not None else None
        self.greedy = SamplingParams()
        self.generator = RowGenerators.seeded([0])  # the inner loop is greedy: never drawn from
        self.context = context_length(self.draft)
        self.capacity = max(len(p) for p in context.prompts) + context.max_new_tokens + 4 * opts.k + 64
        self.reproducible = context.reproducible  # no kernel chosen by timings (`TargetRunner`)
        self.verifier = create("verifier", "exact")
        self._rows = {}
        self.draft_forwards = 0
        self.drafted = 0
        # Plain forwards (and catch-ups) as draft_model runs its draft: specdec's fused forward where it covers the
        # draft, int8 weight copies on a CPU (`LayerPlan.build`'s default).
        self.plan = LayerPlan.build(self.draft, lean=lean_forward_supports(self.draft)) if self.inner is None else None
        self._nominal = nominal_model_cost(self.draft, context.model, self.plan)
        if self.inner is None:
            return
        self.inner.setup(GenerationContext(
            model=self.draft, tokenizer=None, sampling=self.greedy,
            generator=RowGenerators.seeded([0] * len(context.prompts)),
            prompts=context.prompts, max_new_tokens=context.max_new_tokens, vocab_size=draft_vocab,
            device=model_device(self.draft), max_draft_nodes=1024, reproducible=context.reproducible))

    def _size(self, inner_options: PPDOptions, vocab_size: int, reproducible: bool) -> InnerSizing:
        """PPD's hardware-aware sizing of the inner loop from the draft's forward costs on its device, settled once
        per draft model and device (kept with its cost model): the two loops propose differently where the plain
        one runs int8 copies, so a size re-read from noisy timings per call would change a seeded output. Where the
        output must be reproduced (`GenerationContext.reproducible`) from nominal costs instead, the same in every
        process: the tree's forwards by their width, the plain loop's by what its forward reads
        (`nominal_width_share`, `nominal_forward_share`)."""
        checkpoint, _ = PPDDrafter(inner_options)._checkpoint_for(self.draft)
        accuracies = checkpoint_accuracies(checkpoint, vocab_size)
        num_ept = inner_options.num_ept or checkpoint.num_ept
        plan = LayerPlan.build(self.draft, lean=lean_forward_supports(self.draft))  # (the plain loop's forward)
        if reproducible:
            device = model_device(self.draft)
            return size_inner_loop(accuracies, num_ept, lambda width: nominal_width_share(device, width),
                                   plain_seconds=nominal_forward_share(self.draft, self.draft, plan))
        return settled_for(self.draft, ("ppd_draft_model inner loop", json.dumps(accuracies), num_ept),
                           lambda: size_inner_loop(accuracies, num_ept, row_forward_seconds(self.draft),
                                                   plain_seconds=plain_forward_seconds(self.draft, plan)))

    def finish(self) -> None:
        for row in self._rows.values():
            row.runner.release()
        self._rows = {}
        if self.inner is not None:
            self.inner.finish()

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = {"draft_forwards": self.draft_forwards, "drafted_tokens": self.drafted,
                                 "draft_tokens_per_forward": self.drafted / max(1, self.draft_forwards),
                                 "inner_tree_size": self.inner.tree_size if self.inner is not None else 0}
        if self.sizing is not None:  # why that size: expected draft tokens per second of draft forwards
            stats["inner_sizing"] = {"tree_size": self.sizing.tree_size, "num_prompts": self.sizing.num_prompts,
                                     "tokens_per_second": self.sizing.tokens_per_second,
                                     "plain_tokens_per_second": self.sizing.plain_tokens_per_second}
        return stats

    # -- the outer step ------------------------------------------------------------------------
    def propose(self, state: DecodeState) -> Draft:
        rows = []
        for b, row_id in enumerate(state.row_ids):
            budget = min(self.options.k, int(state.max_depth[b]))
            if state.draft_budget is not None:
                budget = min(budget, int(state.draft_budget[b]))
            tokens = self._draft_row(row_id, state.sequences[b], budget) if budget > 0 else []
            rows.append((tokens, list(range(-1, len(tokens) - 1))))
        return Draft.from_rows(rows)

    def prepare(self, state: DecodeState) -> None:
        """The draft's prefill of a row's prompt, at the first step that drafts the row: one-off work (a request
        the controller never drafts for never pays it), kept out of the per-step drafting cost it learns from."""
        budgets = state.draft_budget.tolist() if state.draft_budget is not None else [1] * state.batch_size
        for row_id, sequence, budget in zip(state.row_ids, state.sequences, budgets):
            if budget > 0 and row_id not in self._rows:
                self._sync(row_id, sequence)

    def observe(self, state: DecodeState, draft: Draft, verdict: Verdict, committed: list[list[int]],
                extra_logits: torch.Tensor | None) -> None:
        """Nothing to do: the next propose() syncs the draft cache with the committed sequence."""

    # -- the inner PPD loop on the draft model ---------------------------------------------------
    def _sync(self, row_id: int, sequence: list[int], feed: bool = True) -> tuple[_Row, list[int]]:
        """The row's draft cache rolled back to the prefix it shares with `sequence` (its last token, the root,
        excluded); the committed tokens it lacks are fed now (`feed`), else returned for the caller's first
        forward."""
        row = self._rows.get(row_id)
        if row is None:
            row = self._rows[row_id] = _Row(TargetRunner(self.draft, 1, self.capacity, reproducible=self.reproducible))
        known = sequence[:-1]
        same = 0
        limit = min(len(row.cached), len(known))
        while same < limit and row.cached[same] == known[same]:
            same += 1
        if same < len(row.cached):  # roll back: slots past the length are simply overwritten later
            row.cached = row.cached[:same]
            row.runner.set_lengths(torch.tensor([same]))
        if self.inner is not None and not (len(row.cached) == len(known) and row.prediction_root == sequence[-1]):
            self.inner._predictions.pop(row_id, None)  # anchored elsewhere: start with the root chain
        pending = known[len(row.cached):]
        if pending and feed:
            self._feed(row, pending)
            self.draft_forwards += 1
            pending = []
        return row, pending

    def _feed(self, row: _Row, tokens: list[int]) -> torch.Tensor:
        """Run `tokens` as a chain on the row's draft cache and keep them all; the last one's logits [V]."""
        if not row.cached and len(tokens) > 1:  # a row's first feed (its prompt): a prefill's causal fast path
            row.runner.prefill(torch.tensor([tokens[:-1]]), [len(tokens) - 1])
            row.cached.extend(tokens[:-1])
            tokens = tokens[-1:]
        logits = row.runner.scratch_forward(torch.tensor([tokens]), 0, plan=self.plan, keep=np.array([len(tokens) - 1]))
        row.runner.commit(torch.arange(1, len(tokens))[None, :], torch.tensor([len(tokens) - 1]))
        row.cached.extend(tokens)
        return logits[0]

    def _draft_row(self, row_id: int, sequence: list[int], count: int) -> list[int]:
        inner = self.inner
        if inner is None:
            row, pending = self._sync(row_id, sequence, feed=False)
            return self._draft_plainly(row, pending + sequence[-1:], count)
        row, _ = self._sync(row_id, sequence)
        drafted: list[int] = []
        root = sequence[-1]
        while len(drafted) < count:
            inner_state = DecodeState(row_ids=[row_id], sequences=[row.cached + [root]],
                                      max_depth=torch.tensor([count - len(drafted) - 1]), sampling=self.greedy,
                                      generator=self.generator, target=row.runner)
            draft = inner.propose(inner_state)
            extra_limit = None if self.context is None else (self.context - 1) - row.runner.lengths
            draft = prune_draft(draft, inner_state.max_depth, extra_limit).to(row.runner.device)
            logits = self._forward(row.runner, root, draft)
            width = draft.width
            verdict = self.verifier.verify(draft, logits[:, : 1 + width], self.greedy, self.generator)
            count_accepted = int(verdict.num_accepted[0])
            accepted = verdict.accepted_tokens(draft)[0, :count_accepted].tolist()
            row.runner.commit((verdict.accepted + 1).clamp(min=0), verdict.num_accepted)
            row.cached.extend([root] + accepted)
            new = accepted + [int(verdict.bonus[0])]
            extra_logits = logits[:, 1 + width :] if draft.extra is not None else None
            inner.observe(inner_state, draft, verdict, [new], extra_logits)
            drafted.extend(new)
            root = new[-1]
            self.draft_forwards += 1
        row.prediction_root = root
        self.drafted += count
        return drafted[:count]

    def _draft_plainly(self, row: _Row, feed: list[int], count: int) -> list[int]:
        """The draft's greedy continuation one forward a token (no inner tree pays on this device); the first
        forward also feeds the committed tokens the cache lacks (`feed` ends with the root)."""
        drafted: list[int] = []
        for _ in range(count):
            drafted.append(int(self._feed(row, feed).argmax()))
            feed = drafted[-1:]
            self.draft_forwards += 1
        self.drafted += count
        return drafted

    @staticmethod
    def _forward(runner: TargetRunner, root: int, draft: Draft) -> torch.Tensor:
        """One tree forward of [root, nodes, prompt slots] on the draft model (the engine's layout)."""
        count = int(draft.num_nodes[0])
        tokens = torch.cat([torch.tensor([[root]]), draft.tokens[:, :count].cpu(),
                            torch.full((1, draft.width - count), root)], dim=1)
        node_parents = torch.where(draft.node_mask().cpu(), draft.parents.cpu() + 1, 0)
        parents = torch.cat([torch.zeros(1, 1, dtype=torch.long), node_parents], dim=1)
        extra = draft.extra
        embeds = None
        if extra is not None and extra.embeds.shape[1]:
            slot_mask = torch.arange(extra.embeds.shape[1])[None, :] < extra.num_slots.cpu()[:, None]
            parents = torch.cat([parents, torch.where(slot_mask, extra.parents.cpu() + 1, 0)], dim=1)
            embeds = extra.embeds
        depths, visible = tree_layout(parents)
        return runner.verify_forward(tokens, depths, visible, embeds)
