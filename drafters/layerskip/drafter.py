"""`layer_skip`: the target drafts for itself with some attention/MLP blocks bypassed (Draft & Verify).

The drafter states what to bypass as a `LayerPlan` (the skip set, and the reduced head of a draft
vocabulary) and the runner runs it (`TargetRunner.scratch_forward`): on Llama / Mistral / Qwen2 in the
unpadded batch mode through specdec's lean fused forward (`fast_forward`, the default; why: on a small
target the transformers module stack costs ~0.06 of a full forward per kept sub-block in Python overhead
alone, more than the sub-block's matmuls, which makes self-drafts too expensive to pay off), otherwise
through transformers' forward on a view of the model with the bypassed blocks replaced (the model itself
is never modified). A draft forward writes KV only beyond each row's committed length; bypassed attention
blocks write nothing at all. The committed cache is therefore untouched, and the verification forward
recomputes every layer's entries for the drafted positions (draft-time KV of layers after the first
bypassed block would be wrong anyway).

Rows of a batch draft in lockstep (one scratch forward per depth for all rows); a row that has
exited, or reached its budget, stops growing its chain while the others continue.

With a reduced draft vocabulary (`draft_vocab`, see drafters/token_ranking.py) the LM head scores only the N most
frequent tokens while drafting; proposals are still verified against the full target.
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field

from specdec.draft import Draft, Verdict
from specdec.errors import DrafterError
from specdec.plugins import DecodeState, Drafter, GenerationContext, NominalCost
from specdec.runner import LayerPlan, WeightFormat, layout_for, nominal_model_cost
from specdec.sampling import process_logits, sample

from ..draft_schedule import ConfidenceExit
from ..token_ranking import scatter_to_vocab, select_draft_vocab
from .adaptive import AdaptiveOptions, exit_rule
from .skipset import SkipSet, find_shipped_skip_set, load_skip_set, read_skip_file

# Skip sets and draft vocabularies resolved for a model, by the options that chose them, with the skip-set file they
# came from and its mtime (ns), kept as long as the model lives (weak keys): reading that file (with its token
# ranking) took ~4 ms a call, and `drafter="layer_skip"` makes a new drafter at every call.
_RESOLVED: weakref.WeakKeyDictionary[Any, dict[str, tuple[SkipSet, tuple[int, ...] | None, Path | None, int]]] = (
    weakref.WeakKeyDictionary())


class LayerSkipOptions(AdaptiveOptions):
    schedule: Literal["goodput", "own"] = Field(
        "goodput", description="goodput: the core controller caps each row's draft (0 = no draft forward) from "
                               "measured step costs and acceptance, and cuts the least confident tail; own: up to "
                               "max_draft with the adaptive exit (adaptive=True), as in the paper")
    skip: SkipSet | str | None = Field(
        None, description="{'attention': [...], 'mlp': [...]} (0-based layers), or a skip-set file from "
                          "`specdec search-layers`; default: the file shipped with the model (fingerprint-checked)")
    max_draft: int = Field(12, ge=1, le=128, description="maximum draft tokens per step (paper: 12)")
    goodput_exit: bool = Field(
        True, description="under the controller: stop a row's chain where its exit (specdec/chain_exit.py) prices "
                          "the next tokens below their draft forwards, from the confidences read after every depth "
                          "(a device read per depth); off = draft to the budget, read the draft once")
    draft_vocab: int | list[int] | None = Field(
        None, description="tokens the draft scores: N = the N most frequent tokens of the skip-set file's "
                          "token ranking, a list = these token ids, 0 = the full vocabulary; default: what the "
                          "skip-set file recommends (measured on calibration data), else the full vocabulary")
    fast_forward: bool = Field(True, description="draft through specdec's lean fused forward (specdec/lean_forward.py) "
                                                 "on Llama/Mistral/Qwen2 in the unpadded batch mode; off = "
                                                 "transformers' forward with the blocks swapped out (always used "
                                                 "for other architectures and the padded mode)")
    draft_weights: WeightFormat | None = Field(
        None, description="weights of the lean forward: int8 (per-channel copies, bfloat16 activations; CPU), "
                          "float16, or model (the target's own); default: int8 where the target is on a CPU and "
                          "torch has the kernel, else model. Drafts only propose, so this changes speed and "
                          "acceptance, never the verified output")


class LayerSkipDrafter(Drafter):
    name = "layer_skip"
    description = "Self-speculation: the target drafts with searched attention/MLP blocks skipped (Draft & Verify)."
    Options = LayerSkipOptions
    provides_q = True  # when sampling, drafts are sampled and q is returned

    def __init__(self, options: LayerSkipOptions | None = None) -> None:
        super().__init__(options)
        self.options: LayerSkipOptions
        self.plan: LayerPlan | None = None  # what a draft forward runs (set up per model)
        self._plan_for: tuple[weakref.ref, tuple] | None = None  # the model and settings `plan` was built for
        self.skip_set: SkipSet | None = None
        self._nominal = NominalCost()  # `nominal_cost`, set by setup
        self.head_tokens: torch.Tensor | None = None  # token id of each reduced-head column; None = full
        self._vocab_size = 0
        self._rows: dict[int, ConfidenceExit] = {}
        self._eos = torch.zeros(0, dtype=torch.long)  # a row's chain ends at one of these (see setup)
        self._device_ids: tuple[torch.device, torch.Tensor | None, torch.Tensor] | None = None  # `_on_device`
        self._gamma = self.options.gamma0  # carried across generate calls when carry_gamma
        self.goodput = False  # the controller cuts this call's drafts (see setup)
        self.draft_forwards = 0  # scratch forwards run, for cost accounting (search, benchmarks)
        self.lean_forwards = 0  # of which the runner ran on the lean path (the rest: transformers' forward)

    # -- setup -------------------------------------------------------------------------------
    def resolve_skip_set(self, model: Any) -> SkipSet:
        """The configured skip set, checked against `model` (layers exist, file made for this model)."""
        skip = self.options.skip
        if skip is None:
            shipped = find_shipped_skip_set(model)
            if shipped is None:
                raise DrafterError(
                    "layer_skip has no skip set for this model: pass skip={'attention': [...], 'mlp': [...]} or "
                    "skip=PATH, or run `specdec search-layers --model ...` to find one")
            skip = str(shipped)
        if isinstance(skip, str):
            try:
                return load_skip_set(Path(skip), model)
            except (ValueError, FileNotFoundError) as error:
                raise DrafterError(f"layer_skip: {error}") from error
        try:
            skip.check_layers(int(model.config.num_hidden_layers))
        except ValueError as error:
            raise DrafterError(f"layer_skip: {error}") from error
        return skip

    def _skip_file(self, model: Any) -> Path | None:
        skip = self.options.skip
        if isinstance(skip, str):
            return Path(skip)
        return find_shipped_skip_set(model) if skip is None else None

    def resolve_draft_vocab(self, model: Any) -> tuple[int, ...] | None:
        """Token ids the draft scores (None = all): from the option, else the skip-set file's advice."""
        choice = self.options.draft_vocab
        data: dict = {}
        if not isinstance(choice, list) and choice != 0:
            path = self._skip_file(model)
            data = read_skip_file(path) if path is not None else {}
        return select_draft_vocab(choice, int(model.get_output_embeddings().weight.shape[0]),
                                  data.get("token_ranking"), int(data.get("draft_vocab") or 0), "layer_skip",
                                  "which only skip-set files from `specdec search-layers --vocab-corpus/"
                                  "--vocab-files` carry")

    def _resolve(self, model: Any) -> tuple[SkipSet, tuple[int, ...] | None]:
        """`resolve_skip_set` and `resolve_draft_vocab` for `model`, read again only for other options or another
        model, or when the skip-set file they came from changed."""
        key = repr((self.options.skip, self.options.draft_vocab))
        resolved = _RESOLVED.get(model, {}).get(key)
        if resolved is not None:
            skip, head, path, stamp = resolved
            if path is None or (path.is_file() and path.stat().st_mtime_ns == stamp):
                return skip, head
        skip, head = self.resolve_skip_set(model), self.resolve_draft_vocab(model)
        path = self._skip_file(model)
        stamp = path.stat().st_mtime_ns if path is not None else 0
        _RESOLVED.setdefault(model, {})[key] = (skip, head, path, stamp)
        return skip, head

    def setup(self, context: GenerationContext) -> None:
        model = context.model
        layout_for(model)  # clear error for unsupported architectures before any drafting
        skip, head = self._resolve(model)
        # One plan per model and settings, kept across calls: the runner prepares a plan once per object.
        settings = (skip, head, self.options.fast_forward, self.options.draft_weights)
        built = self._plan_for
        if built is None or built[0]() is not model or built[1] != settings:
            self.plan = LayerPlan.build(model, skip.attention, skip.mlp, head_tokens=head,
                                        lean=self.options.fast_forward, weights=self.options.draft_weights)
            self.head_tokens = None if head is None else torch.tensor(head, dtype=torch.long)
            self._plan_for = (weakref.ref(model), settings)
        self._vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.skip_set = skip
        self._nominal = NominalCost(nominal_model_cost(model, model, self.plan).level, 0.0)
        self._rows = {}
        self._eos = torch.tensor(sorted(context.eos_token_ids), dtype=torch.long)
        self._device_ids = None
        # Under the controller the confidence exit (which aims at an acceptance rate, not at speed) is
        # off: the budget sets the length and the confidences become scores the cut reads.
        self.goodput = self.options.schedule == "goodput" and context.goodput
        if not self.options.carry_gamma:
            self._gamma = self.options.gamma0

    def nominal_cost(self) -> NominalCost:
        """A draft level runs the target's kept blocks as its plan runs them (`nominal_model_cost`); nothing to
        feed."""
        return self._nominal

    def follows_exit(self) -> bool:
        """Under the controller with `goodput_exit` its chains stop where the controller's exit says."""
        return self.controlled() and self.options.goodput_exit

    def catches_up(self) -> bool:
        """Its draft runs the target's kept layers over the target's own cache: nothing to catch up on."""
        return False

    def _exit_state(self, row: int) -> ConfidenceExit:
        if row not in self._rows:
            self._rows[row] = exit_rule(self.options, self._gamma)
        return self._rows[row]

    # -- drafting ----------------------------------------------------------------------------
    @torch.no_grad()
    def propose(self, state: DecodeState) -> Draft:
        """Draft a chain per row, one scratch forward per depth for all rows, on the target's device. With an
        exit (the paper's adaptive one under `schedule="own"`, the controller's `state.draft_exit` under it),
        which rows go on is read after every depth (the exit is decided per drafted token), so no forward runs
        for nothing; without one the host knows each row's length limit, eos is applied on the device, and the
        draft's sizes are read once at the end."""
        if self.plan is None:
            raise DrafterError("layer_skip.propose called before setup")
        batch = state.batch_size
        limits_host = np.clip(np.asarray(state.max_depths(), dtype=np.int64), 0, self.options.max_draft)
        budgets = state.draft_budgets()
        if budgets is not None:  # the controller verifies at most this many nodes per row
            limits_host = np.minimum(limits_host, budgets)
        steps = int(limits_host.max()) if batch else 0
        if steps <= 0:
            return Draft.empty(batch)
        runner = state.target
        device = runner.device
        greedy = state.sampling.greedy
        adaptive = self.options.adaptive and not self.goodput
        limits = torch.as_tensor(limits_host, device=device)
        head, eos = self._on_device(device)
        scores = torch.zeros(batch, steps, device=device) if self.goodput else None
        gammas = (torch.tensor([self._exit_state(row).threshold for row in state.row_ids], device=device)
                  if adaptive else None)
        # Under the controller its exit stops a row whose next tokens no longer pay for their draft forwards.
        draft_exit = state.draft_exit if scores is not None and self.options.goodput_exit else None
        tokens = torch.zeros(batch, steps, dtype=torch.long, device=device)
        q_rows: list[torch.Tensor] = []
        lengths = torch.zeros(batch, dtype=torch.long, device=device)
        growing_host = limits_host > 0  # rows that may still grow (without the exit: eos is seen on the device)
        growing = torch.as_tensor(growing_host, device=device)
        inputs = torch.tensor([[seq[-1]] for seq in state.sequences], dtype=torch.long, device=device)
        depth = 0
        for depth in range(steps):
            logits = self._forward(runner, inputs, depth, growing_host, greedy).float()
            self.draft_forwards += 1
            # With a reduced head, `logits` and `chosen` index the kept tokens (head_tokens).
            if greedy:
                chosen = logits.argmax(dim=-1)
            else:
                q = process_logits(logits, state.sampling)
                # Draws for the rows the host knows may grow (those past a drafted eos too: a row's stream still
                # depends on its own draft alone), with nothing read back; a q that is not a distribution draws
                # out of the vocabulary, clamped here and refused when the engine reads the step back (its q check).
                chosen = sample(q, state.generator, growing_host, checked=False).clamp(max=q.shape[-1] - 1)
                q_rows.append(self._full_vocab(q, head))
            tokens[:, depth] = chosen if head is None else head[chosen]
            lengths += growing
            growing = growing & (depth + 1 < limits) & ~torch.isin(tokens[:, depth], eos)  # nothing past eos commits
            if adaptive or scores is not None:
                # confidence = raw (temperature-1) probability of the drafted token, as in the paper's code
                confidence = logits.softmax(dim=-1).gather(1, chosen[:, None]).squeeze(1)
                if gammas is not None:
                    growing = growing & (confidence >= gammas)
                if scores is not None:  # a node's score: its path's confidence
                    scores[:, depth] = confidence * (scores[:, depth - 1] if depth else 1.0)
            if depth + 1 == steps:
                break
            if draft_exit is not None:  # one read: the confidences it prices, and which rows still grow
                read = torch.stack([confidence, growing.to(confidence.dtype)]).tolist()
                growing_host = np.asarray(read[1], dtype=bool)
                if growing_host.any():
                    growing_host &= np.asarray(draft_exit.keep_drafting(depth + 1, read[0], growing_host), dtype=bool)
                    growing = torch.as_tensor(growing_host, device=device)
            elif gammas is not None:
                growing_host = np.asarray(growing.tolist(), dtype=bool)
            else:
                growing_host = growing_host & (depth + 1 < limits_host)
            if not growing_host.any():
                break
            inputs = tokens[:, depth, None]
        width = depth + 1
        q = torch.stack(q_rows, dim=1)[:, :width] if q_rows else None
        if scores is None:
            return Draft.chain(tokens[:, :width], lengths.tolist(), q)
        # sizes and scores in one read: the controller's cut reads them on the host
        scores = scores[:, :width]
        read = torch.cat([lengths[:, None].to(scores.dtype), scores], dim=1).tolist()
        return Draft.chain(tokens[:, :width], [int(row[0]) for row in read], q, scores, [row[1:] for row in read])

    def _on_device(self, device: torch.device) -> tuple[torch.Tensor | None, torch.Tensor]:
        """The reduced head's token ids and the eos ids on `device`, copied once per device and setup."""
        if self._device_ids is None or self._device_ids[0] != device:
            head = None if self.head_tokens is None else self.head_tokens.to(device)
            self._device_ids = (device, head, self._eos.to(device))
        return self._device_ids[1], self._device_ids[2]

    def _forward(self, runner: Any, inputs: torch.Tensor, offset: int, growing: np.ndarray,
                 greedy: bool) -> torch.Tensor:
        """Draft logits [B, V] (V = the draft vocabulary) for one token per row at `offset` slots past
        each row's committed length. Greedy rows that stopped drafting need no logits (the lean forward
        skips them; theirs are zeros, never read); sampling runs every row, so a row's draws never depend
        on its neighbours."""
        rows = None if not greedy or growing.all() else np.flatnonzero(growing)
        before = runner.lean_forwards
        logits = runner.scratch_forward(inputs, offset=offset, plan=self.plan, rows=rows)[:, -1]
        self.lean_forwards += runner.lean_forwards - before
        return logits

    def _full_vocab(self, q: torch.Tensor, head: torch.Tensor | None) -> torch.Tensor:
        """q over the reduced head -> q over the full vocabulary, zero outside the kept tokens: the
        distribution the draft token was really drawn from (what lossless rejection sampling needs)."""
        if head is None:
            return q
        return scatter_to_vocab(q, head, self._vocab_size, 0.0)

    def observe(self, state: DecodeState, draft: Draft, verdict: Verdict, committed: list[list[int]],
                extra_logits: torch.Tensor | None) -> None:
        if not self.options.adaptive:
            return
        drafted = draft.sizes()
        accepted = state.accepted_counts(verdict)
        for b, row in enumerate(state.row_ids):
            self._exit_state(row).update(drafted[b], accepted[b], drafted[b] >= self.options.max_draft)

    def finish(self) -> None:
        if self.options.carry_gamma and self._rows:
            self._gamma = sum(s.threshold for s in self._rows.values()) / len(self._rows)

    @property
    def gamma(self) -> float:
        """The threshold the next generate call starts from."""
        return self._gamma
