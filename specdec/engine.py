"""The guess-and-verify loop. It owns the target forward, the KV cache and stopping; drafters and
verifiers are reached only through `specdec.plugins`.

    prefill(prompt[:-1])
    while rows remain:
        draft   = drafter.propose(state)                     # token tree per row (+ extra slots)
        logits  = target([last token] + nodes + extras, tree mask, positions)
        verdict = verifier.verify(draft, logits, sampling, rng)
        commit accepted path + bonus, compact KV, apply stops
        drafter.observe(state, draft, verdict, committed, extra logits)

The last committed token of each row (the root) is never in the cache before a step: it is the
first input of the next verification forward, so prefill, drafting and verification share one shape.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import numpy as np
import torch

from .controller import ControllerOptions, GoodputController, Member, Plan
from .costs import LONG_CONTEXT, CostModel, cost_clock, cost_model_for
from .draft import Draft, ExtraSlots, Verdict, chain_layout, host_tree_layout, tree_layout
from .errors import DrafterError, VerifierError
from .nominal_costs import NominalDrafter, nominal_table
from .padded_runner import PaddedTargetRunner
from .plugins import DecodeState, Drafter, GenerationContext, Verifier
from .rng import RowGenerators, row_seeds
from .sampling import SamplingParams
from .stats import GenerationStats
from .stopping import StopChecker
from .target import TargetRunner, context_length, model_device, static_width
from .timing import DeviceMarks
from .validation import DraftCheck, check_verdict_shapes, prune_draft, validate_draft, verdict_problem

#: Cache slots reserved per row beyond prompt + output for the draft of a step (grown when exceeded).
DRAFT_SLOTS_RESERVED = 16


@dataclass
class EngineConfig:
    max_new_tokens: int
    sampling: SamplingParams
    eos_token_ids: frozenset[int] = frozenset()
    stop_strings: tuple[str, ...] = ()
    max_draft_nodes: int = 256
    batch_mode: str = "unpadded"  # "unpadded" (EMS-SD) or "padded" (the vanilla method, for comparison)
    packed_inputs: bool | None = None  # unpadded mode: pack verification inputs (None = when the model allows)
    max_batch_size: int | None = None  # rows running at once; fewer than the prompts = continuous batching
    controller: ControllerOptions | None = field(default_factory=ControllerOptions)  # None = drafters' own rules
    cost_model: CostModel | None = None  # None = the one kept for this model and device (specdec.costs)
    compile: bool = False  # static shapes and a compiled verification forward (specdec.compiled)


@dataclass
class StepOutcome:
    """What the host learns of a verified step, from its one read-back (`SpeculativeEngine._read_back`)."""

    accepted: list[int]  # accepted nodes per row
    bonus: list[int]  # the target's token after each row's accepted path
    tokens: list[list[int]]  # the accepted nodes' tokens per row
    paths: list[list[int]] | None  # accepted node indices per row (trees; None: a chain's are 0, 1, ...)
    depths: list[int]  # each row's deepest drafted node
    proposed: list[list[int]] | None = None  # the uncut draft's tokens per row, when the cut dropped some


@dataclass
class VerifyInputs:
    """A step's verification inputs (`SpeculativeEngine._inputs`)."""

    tokens: torch.Tensor  # [B, 1 + N] root and node tokens (extra slots take their embeddings)
    extra: ExtraSlots | None  # the extra slots, None when there are none
    depths: torch.Tensor  # [B, 1 + N + E] depth below the root
    visible: torch.Tensor | None  # [B, T, T] ancestor-or-self (None: every row one causal chain)
    valid: np.ndarray  # [B, T] host: the real inputs of each row


@dataclass
class RowResult:
    tokens: list[int] = field(default_factory=list)
    finish_reason: str = "length"


def peak_memory_bytes(device: torch.device) -> int:
    """Max allocated during this call on CUDA; on CPU the process's peak RSS (process-wide)."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def compaction_order(size: int, leaving: set[int]) -> list[int]:
    """The places of a batch of `size` rows that stay when rows `leaving` leave, in their new order: the
    last staying rows take the places of leaving rows below the new size, so a departure moves at most as
    many rows in the KV cache as leave (keeping the old order would move every row after the first gap)."""
    count = size - len(leaving)
    movers = iter(place for place in range(count, size) if place not in leaving)
    return [next(movers) if place in leaving else place for place in range(count)]


class SpeculativeEngine:
    """Runs a list of prompts to completion with one drafter and one verifier, as one batch or (with
    `max_batch_size`) as a continuously refilled one."""

    def __init__(
        self,
        model: Any,
        drafter: Drafter,
        verifier: Verifier,
        config: EngineConfig,
        tokenizer: Any | None = None,
        streamer: Any | None = None,
        seed: int | Sequence[int | None] | None = None,
    ) -> None:
        self.model = model
        self.drafter = drafter
        self.verifier = verifier
        self.config = config
        self.tokenizer = tokenizer
        self.streamer = streamer
        self.device = model_device(model)
        self.seed = seed
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0]) if model.get_output_embeddings() \
            is not None else int(model.config.vocab_size)
        self.context = context_length(model)
        # Only drafters that override the optional hook are called (and timed) before each propose.
        self._prepares = type(drafter).prepare is not Drafter.prepare

    def _drafter_call(self, what: str, fn, *args):
        try:
            return fn(*args)
        except DrafterError:
            raise
        except Exception as error:  # a plugin's bug is reported by the plugin's name
            raise DrafterError(f"drafter {self.drafter.name!r} raised in {what}: {error!r}") from error

    def generate(self, prompts: list[list[int]]) -> tuple[list[RowResult], GenerationStats]:
        """Run every prompt to completion. With `config.max_batch_size` below the number of prompts,
        at most that many rows run at once and a finished row's place goes to the next waiting prompt
        (continuous batching), so one slow row no longer holds up the prompts behind it."""
        config = self.config
        count = len(prompts)
        stats = GenerationStats(row_steps=[0] * count, row_new_tokens=[0] * count, row_drafted=[0] * count,
                                row_accepted=[0] * count)
        ctx = self.context
        budgets = []
        results = [RowResult() for _ in prompts]
        for row, prompt in enumerate(prompts):
            budget = config.max_new_tokens
            if ctx is not None and len(prompt) + budget > ctx:
                budget = ctx - len(prompt)
                results[row].finish_reason = "context_length"
            budgets.append(budget)
        waiting = deque(row for row in range(count) if budgets[row] > 0)  # rows with no room never run
        width = len(waiting) if config.max_batch_size is None else min(config.max_batch_size, len(waiting))
        if width < len(waiting) and config.batch_mode == "padded":
            raise ValueError("continuous batching (max_batch_size below the number of prompts) needs "
                             "batch_mode='unpadded'")
        active = [waiting.popleft() for _ in range(width)]

        started, cpu_started = time.perf_counter(), time.process_time()
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        # Room for the longest prompt, the output and a typical draft; a wider draft grows the buffers (by a
        # quarter, once or twice near the end of a run) instead of every run reserving max_draft_nodes slots.
        capacity = (max(len(p) for p in prompts) + max(budgets) + min(config.max_draft_nodes, DRAFT_SLOTS_RESERVED)
                    + 2)
        if config.compile:  # static shapes never grow: room for the widest padded verification of any draft
            capacity = max(len(p) for p in prompts) + max(budgets) + static_width(1 + config.max_draft_nodes)
        target = self._prefilled(prompts, active, capacity)
        if self.streamer is not None:
            self.streamer.put(torch.tensor([prompts[0]], dtype=torch.long))

        sequences = [list(p) for p in prompts]
        generators = RowGenerators.seeded(row_seeds(self.seed, count))
        stoppers = [StopChecker(config.eos_token_ids, config.stop_strings, self.tokenizer) for _ in prompts]
        context = GenerationContext(
            model=self.model, tokenizer=self.tokenizer, sampling=config.sampling, generator=generators,
            prompts=[list(p) for p in prompts], max_new_tokens=config.max_new_tokens,
            vocab_size=self.vocab_size, device=self.device, max_draft_nodes=config.max_draft_nodes,
            rows=list(active), goodput=config.controller is not None and self.drafter.controlled(),
            eos_token_ids=config.eos_token_ids, reproducible=not self._live(),
        )
        stats.prefill_time = time.perf_counter() - started
        controller = None
        try:
            self._drafter_call("setup", self.drafter.setup, context)
            measure_started = time.perf_counter()
            controller = self._controller(prompts, active, target)
            if controller is not None and not controller.live:  # (a caller's cost model measured at batch 1 first)
                stats.prefill_time += time.perf_counter() - measure_started
            stats.setup_cpu_time = time.process_time() - cpu_started  # decode-only CPU = total - this
            step = 0
            while active:
                depth_limits = [budgets[row] - len(results[row].tokens) - 1 for row in active]
                state = DecodeState(
                    row_ids=list(active),
                    sequences=[sequences[row] for row in active],
                    max_depth=torch.tensor(depth_limits), sampling=config.sampling,
                    generator=generators.select(active), target=target, step=step, max_depth_host=depth_limits,
                )
                if controller is not None:
                    self._measure(controller, target, len(active), stats)
                # The controller prices the last wave from the waiting prompts' budgets; past one more than the
                # batch has rows it weights tokens alike (`controller.row_weights`), so a long queue is not read.
                queued = [budgets[row] for row in islice(waiting, len(active) + 1)]
                finished = self._step(state, target, sequences, results, stoppers, budgets, stats, controller,
                                      queued)
                step += 1
                if finished:
                    done = [i for i, row in enumerate(active) if row in finished]
                    joining = [waiting.popleft() for _ in range(min(len(done), len(waiting)))]
                    if joining:  # the next prompts take finished rows' places
                        self._admit(target, prompts, joining, done[: len(joining)], capacity, stats)
                        for position, row in zip(done, joining):
                            active[position] = row
                    leaving = set(done[len(joining) :])
                    if leaving:
                        keep = compaction_order(len(active), leaving)
                        active = [active[i] for i in keep]
                        if active:
                            target.select_rows(keep)
        finally:
            if controller is not None:
                controller.finish()
                stats.controller = controller.stats()
            stats.kv_cache_bytes = target.cache.peak_bytes
            stats.kv_used_bytes = target.cache.peak_used_bytes
            stats.kv_holes_added = target.holes_added
            stats.peak_memory_bytes = peak_memory_bytes(self.device)
            stats.kv_padding_slots = target.padding_slots()
            stats.kv_slots = int(target.write_start.sum())
            target.release()
            self.drafter.finish()
            stats.drafter_stats = dict(self.drafter.stats())
            if self.streamer is not None:
                self.streamer.end()
        return results, stats

    def _controller(self, prompts: list[list[int]], rows: list[int], target: TargetRunner
                    ) -> GoodputController | None:
        """The goodput controller of this call (None when off or when the drafter keeps its own rule).

        Live decisions (current costs, learning) when the output cannot depend on them (greedy with a
        lossless verifier) or nothing is to be reproduced (sampling without a seed); otherwise frozen: every
        row priced alone, from a snapshot of the caller's cost model when one was passed (theirs to keep the
        same), else from nominal costs (`specdec.nominal_costs`), never timed, so that the same prompt and seed
        give the same output in every process (see specdec.controller)."""
        options = self.config.controller
        if options is None or not self.drafter.controlled():
            return None
        sampling = self.config.sampling
        live = self._live()
        members_of = getattr(self.drafter, "members", None)
        drafters = dict(members_of) if isinstance(members_of, dict) else {self.drafter.name: self.drafter}
        members = [Member(name, bool(d.provides_q) and not sampling.greedy, d.follows_exit(), d.catches_up())
                   for name, d in drafters.items()]
        model_costs = self.config.cost_model or cost_model_for(self.model, self.device)
        self._measured: set[int] = set()
        if live:
            table = model_costs.table()
        elif self.config.cost_model is not None:  # (measured at batch 1 first where it holds no curve yet)
            self._ensure(model_costs, target, 1)
            table = model_costs.snapshot()
        else:
            table = nominal_table(self.device, {
                name: NominalDrafter(d.nominal_cost(), type(d).prepare is not Drafter.prepare)
                for name, d in drafters.items()})
        return GoodputController(members, model_costs, table, live, target.packed_inputs, options,
                                 cost_clock(self.device), self.drafter.name, self.verifier.accepts_target_choice)

    def _live(self) -> bool:
        """Whether decisions may read timings: the output cannot depend on them (greedy with a lossless verifier)
        or nothing is to be reproduced (sampling without a seed)."""
        sampling = self.config.sampling
        return (sampling.greedy and self.verifier.lossless) or (not sampling.greedy and self.seed is None)

    def _ensure(self, model_costs: CostModel, target: TargetRunner, batch: int) -> float:
        """Curves for this batch and every smaller one: its rows finish and the batch shrinks through them, and
        what a row leaving saves (`row_weights`) is read from the curves at B and B - 1 rows (priced from one
        curve it was nothing: 8 rows' curve standing in for 7's). All measured at the batch's first step: measured
        as the batch first shrank to each size, a continuous batch of 8 on this CPU paid the 2-row curve's 1.7 s
        inside its second or third call (~60% of that call), whichever first fell to 4 rows."""
        return model_costs.ensure(self.model, range(1, batch + 1), target.packed_inputs, target.padded,
                                  LONG_CONTEXT, self.context)

    def _measure(self, controller: GoodputController, target: TargetRunner, batch: int,
                 stats: GenerationStats) -> None:
        """Measure the verification cost curves for this batch size and the sizes below it the first time it is
        needed (live calls only: frozen calls read nominal costs or the caller's). Counted as setup time."""
        if not controller.live or batch in self._measured:
            return
        self._measured.update(range(1, batch + 1))
        started, cpu_started = time.perf_counter(), time.process_time()
        if self._ensure(controller.model_costs, target, batch):
            stats.prefill_time += time.perf_counter() - started
            stats.setup_cpu_time += time.process_time() - cpu_started

    def _prefilled(self, prompts: list[list[int]], rows: list[int], capacity: int) -> TargetRunner:
        """A runner holding `rows`' prompts, all but the last token (the first input of the first step)."""
        config = self.config
        runner = PaddedTargetRunner if config.batch_mode == "padded" else TargetRunner
        target = runner(self.model, len(rows), capacity, packed_inputs=config.packed_inputs, compile=config.compile,
                        reproducible=not self._live())
        longest = max((len(prompts[row]) for row in rows), default=1)
        prefill_ids = torch.zeros(len(rows), max(longest - 1, 0), dtype=torch.long)
        for index, row in enumerate(rows):
            prompt = prompts[row]
            prefill_ids[index, : len(prompt) - 1] = torch.as_tensor(prompt[:-1], dtype=torch.long)
            prefill_ids[index, len(prompt) - 1 :] = prompt[-1]  # right padding: never attended to
        target.prefill(prefill_ids, [len(prompts[row]) - 1 for row in rows])
        return target

    def _admit(self, target: TargetRunner, prompts: list[list[int]], rows: list[int], positions: list[int],
               capacity: int, stats: GenerationStats) -> None:
        """Prefill `rows` into the places `positions` of finished rows; their prefill and the drafter's
        admission count as setup (prefill), not decoding."""
        started, cpu_started = time.perf_counter(), time.process_time()
        target.replace_rows(positions, self._prefilled(prompts, rows, capacity))
        self._drafter_call("admit", self.drafter.admit, list(rows))
        stats.prefill_time += time.perf_counter() - started
        stats.setup_cpu_time += time.process_time() - cpu_started

    def _step(
        self,
        state: DecodeState,
        target: TargetRunner,
        sequences: list[list[int]],
        results: list[RowResult],
        stoppers: list,
        budgets: list[int],
        stats: GenerationStats,
        controller: GoodputController | None = None,
        waiting: Sequence[int] = (),
    ) -> set[int]:
        """One guess-and-verify step. Everything between the draft and the verdict stays on the model's
        device; the host learns the step's outcome from one read-back (`_read_back`)."""
        t0 = time.perf_counter()
        clock = controller.clock if controller is not None else None
        c0 = clock() if clock else 0.0
        marks = DeviceMarks(self.device)  # CUDA: the phases on the GPU's timeline (see specdec.timing)
        marks.mark("start")
        batch = state.batch_size
        device = self.device
        plan: Plan | None = None
        if controller is not None:
            plan = controller.plan(state.row_ids, state.max_depths(), self.config.max_draft_nodes, waiting,
                                   target.lengths.tolist())
            state.set_draft_budget(plan.budget, plan.budget_tensor())
            state.draft_choice = list(plan.choice)
            state.draft_exit = plan.exit
            if not controller.keeps_timings(plan):  # most quiet steps: no clock read (~4 us of a 2 ms step)
                clock = None
        draft_check: DraftCheck | None = None
        if plan is not None and plan.plain:
            # The controller decodes every row plainly: the drafter is not asked (on a 2 ms step its
            # prepare and propose cost ~2%); it still sees the committed tokens in `observe`.
            prepared = prepared_clock = 0.0
            c_plan = clock() if clock else 0.0
            marks.mark("planned")
            draft = Draft.empty(batch, device)
        else:
            prepared, prepared_clock = self._prepare(state, stats, clock)
            c_plan = clock() if clock else 0.0
            marks.mark("planned")
            if plan is not None:
                draft = self._drafter_call("propose", controller.propose, self.drafter, state, plan)
            else:
                draft = self._drafter_call("propose", self.drafter.propose, state)
            draft, draft_check = validate_draft(draft, self.drafter.name, batch, self.vocab_size,
                                                  self.config.max_draft_nodes, device)
            extra_limit = None  # extra slots may sit anywhere below the context limit
            if draft.extra is not None and self.context is not None:
                extra_limit = (self.context - 1) - target.lengths
            draft = prune_draft(draft, state.max_depths(), extra_limit)
        c_proposed = clock() if clock else 0.0
        marks.mark("proposed")
        cut = None
        draft_before_cut = draft
        if controller is not None:
            scored = getattr(self.drafter, "scored", None)
            scored = dict(scored) if isinstance(scored, dict) else {self.drafter.name: draft.scores is not None}
            draft, cut = controller.cut(draft, plan, c_proposed - c_plan, scored)
        t1 = time.perf_counter()
        c1 = clock() if clock else 0.0
        marks.mark("cut")

        host = draft.host
        width = draft.width
        inputs = self._inputs(draft, state.sequences)
        tokens, extra, depths, visible, valid = inputs.tokens, inputs.extra, inputs.depths, inputs.visible, inputs.valid
        sizes = np.asarray(host.sizes, dtype=np.int64)
        useful = int(valid.sum())
        # Real inputs (the rest pad rows to the widest): packed verification computes only these.
        stats.input_slots += valid.size
        stats.useful_input_slots += useful
        if cut is not None:
            cut.inputs = useful if target.packed_inputs else valid.size
        if extra is None:
            logits = target.verify_forward(tokens, depths, visible, valid=valid, chain=host.chain)
        else:
            logits = target.verify_forward(tokens, depths, visible, extra.embeds, valid=valid)
        del inputs, tokens
        t2 = time.perf_counter()
        c2 = clock() if clock else 0.0

        try:
            verdict = self.verifier.verify(draft, logits[:, : 1 + width], state.sampling, state.generator)
        except VerifierError:
            raise
        except Exception as error:
            raise VerifierError(f"verifier {self.verifier.name!r} raised: {error!r}") from error
        check_verdict_shapes(verdict, draft, self.verifier.name)
        marks.mark("verdict")
        hindsight = cut is not None and any(spare is not None for spare in cut.spare)
        outcome = self._read_back(draft, verdict, draft_check, draft_before_cut if hindsight else None)
        t3 = time.perf_counter()
        c3 = clock() if clock else 0.0

        finished, committed = self._commit(state, outcome, verdict, host.chain, target, sequences, results, stoppers,
                                           budgets, stats)
        state.accepted = list(outcome.accepted)
        state.accepted_nodes = outcome.paths if outcome.paths is not None else [list(range(n)) for n in outcome.accepted]
        extra_logits = logits[:, 1 + width :] if extra is not None else None
        self._drafter_call("observe", self.drafter.observe, state, draft, verdict, committed, extra_logits)
        t4 = time.perf_counter()
        c4 = clock() if clock else 0.0

        stats.batch_steps += 1
        stats.steps += batch
        stats.drafted_per_step.append(int(sizes.sum()))
        stats.accepted_per_step.append(sum(outcome.accepted))
        for row, drafted, accepted in zip(state.row_ids, host.sizes, outcome.accepted):
            stats.no_draft_row_steps += drafted == 0
            stats.row_steps[row] += 1
            stats.row_drafted[row] += drafted
            stats.row_accepted[row] += accepted
        stats.record_depths(outcome.accepted, outcome.depths)
        device_verify = marks.seconds("cut", "verdict")  # None off CUDA
        if device_verify is None:
            stats.draft_time += t1 - t0 - prepared
            stats.verify_time += t2 - t1
            stats.other_time += (t3 - t2) + (t4 - t3)
        else:  # the GPU's timeline: drafting is what it spent before the cut, verifying from the cut to the verdict
            device_draft = marks.seconds("start", "cut")
            stats.draft_time += device_draft
            stats.verify_time += device_verify
            stats.other_time += max(0.0, (t4 - t0) - prepared - device_draft - device_verify)
        if controller is not None:
            # Timed by the controller's clock (specdec.costs.cost_clock); on CUDA the draft and verify phases by
            # the GPU's timeline (events), the rest by the host's.
            drafting = c_proposed - c_plan
            verifying = c2 - c1
            if device_verify is not None:
                drafting, verifying = marks.seconds("planned", "proposed"), device_verify
            timings = None if clock is None else {
                "verify": verifying,
                "other": max(0.0, (c4 - c0) - prepared_clock - drafting - verifying) if device_verify is not None
                else (c3 - c2) + (c4 - c3) + (c_plan - c0 - prepared_clock) + (c1 - c_proposed),
                "draft": drafting, "draft_by_member": {} if plan.plain else self._draft_costs(draft_before_cut, drafting),
                "prepare_by_member": None if plan.plain else self._prepare_costs(prepared_clock)}
            controller.observe(plan, cut, verdict, timings, outcome.accepted, outcome.paths,
                [tokens + [bonus] for tokens, bonus in zip(outcome.tokens, outcome.bonus)] if hindsight else None,
                outcome.proposed)
            if finished:
                controller.forget([row for row in state.row_ids if row not in finished])
            stats.other_time += time.perf_counter() - t4  # the controller's own learning
        return finished

    def _inputs(self, draft: Draft, sequences: list[list[int]]) -> VerifyInputs:
        """The verification forward's inputs [root, nodes (N), extra slots (E)] per row, and their layout, from the
        validated draft's host views (checked on the host; its tensors are judged against them after the step's
        read-back, before anything is committed)."""
        batch, width, host = draft.batch_size, draft.width, draft.host
        device = self.device
        roots = torch.tensor([[seq[-1]] for seq in sequences], dtype=torch.long, device=device)
        extra = draft.extra if draft.extra is not None and draft.extra.embeds.shape[1] else None
        slots = extra.embeds.shape[1] if extra is not None else 0
        slot_counts = extra.host.num_slots if extra is not None else [0] * batch
        columns = np.arange(1 + width + slots)[None, :]
        sizes = np.asarray(host.sizes, dtype=np.int64)[:, None]
        # Host: the real inputs of each row (the rest pad rows to the widest).
        valid = (columns <= sizes) | ((columns > width) & (columns <= width + np.asarray(slot_counts)[:, None]))
        # Token values a failed check would reject are made harmless for the forward (padding hangs from the root).
        tokens = torch.cat([roots, draft.tokens.clamp(0, self.vocab_size - 1)], dim=1) if width else roots
        if extra is None and host.chain and all(size == width for size in host.sizes):
            # Every row one chain of the same length (plain steps, chain drafts at batch 1): causal, no tree.
            depths, visible = chain_layout(batch, 1 + width, device)
            return VerifyInputs(tokens, None, depths, visible, valid)
        # Parents in input indices: node i is input 1 + i and extra slot e input 1 + width + e, so a parent in the
        # draft's combined numbering (-1 = the root) is one less than its input; padding hangs from the root.
        rows = []
        for b in range(batch):
            nodes = [parent + 1 for parent in host.parents_of(b)]
            row = [0] + nodes + [0] * (width - len(nodes))
            if extra is not None:
                own = [parent + 1 for parent in extra.host.parents[b]]
                row += own + [0] * (slots - len(own))
            rows.append(row)
        layout = host_tree_layout(rows, device) or tree_layout(torch.tensor(rows, dtype=torch.long, device=device))
        return VerifyInputs(tokens, extra, layout[0], layout[1], valid)

    def _read_back(self, draft: Draft, verdict: Verdict, draft_check: DraftCheck | None,
                   proposed: Draft | None = None) -> StepOutcome:
        """The step's one read of device data, packed into one tensor: accepted counts, bonus tokens, accepted
        nodes and their tokens, the tokens of the uncut draft `proposed` (when the controller learns in hindsight
        what it cut), and the values the draft's checks judge. Raises for an invalid draft or verdict, judged on the
        host from these values, before anything is committed."""
        batch, width = draft.batch_size, draft.width
        device = self.device
        columns = verdict.accepted.shape[1] if width else 0
        # Every part as long on the device, one cat and one read (each tensor op here costs a few microseconds
        # of host time on every step, plain ones included).
        parts = [verdict.num_accepted.to(device, torch.long), verdict.bonus.to(device, torch.long)]
        if columns:
            path = verdict.accepted.to(device, torch.long)
            parts += [path.reshape(-1), draft.tokens.gather(1, path.clamp(0, width - 1)).reshape(-1)]
        if proposed is not None:
            parts.append(proposed.tokens.to(device, torch.long).reshape(-1))
        if draft_check is not None:
            parts += draft_check.parts()
        values = torch.cat(parts).tolist()
        count_list, bonus = values[:batch], values[batch : 2 * batch]
        offset = 2 * batch

        def rows(row_width: int, counts: list[int] | None = None) -> list[list[int]]:
            """The next `row_width` values of each row (the first counts[b] of them)."""
            nonlocal offset
            taken = [values[offset + b * row_width : offset + b * row_width + (
                row_width if counts is None else max(0, min(counts[b], row_width)))] for b in range(batch)]
            offset += batch * row_width
            return taken

        paths = rows(columns, count_list)
        token_rows = rows(columns, count_list)
        proposed_rows = rows(proposed.width) if proposed is not None else None
        if draft_check is not None:
            problem = draft_check.problem(values[offset:])
            if problem is not None:
                raise DrafterError(f"drafter {self.drafter.name!r} returned an invalid draft: {problem}")
        problem = verdict_problem(draft.host, width, count_list, bonus, paths, columns, self.vocab_size)
        if problem is not None:
            raise VerifierError(f"verifier {self.verifier.name!r} returned an invalid verdict: {problem}")
        tree = width and not draft.host.chain
        return StepOutcome(count_list, bonus, token_rows, paths if tree else None, draft.host.row_depths(),
                           proposed_rows)

    def _prepare(self, state: DecodeState, stats: GenerationStats,
                 clock: Callable[[], float] | None) -> tuple[float, float]:
        """The drafter's one-off work before this step's draft (`Drafter.prepare`), counted as setup
        CPU time. Returns its wall seconds and its seconds by the controller's clock."""
        if not self._prepares:
            return 0.0, 0.0
        cpu, wall, started = time.process_time(), time.perf_counter(), clock() if clock else 0.0
        self._drafter_call("prepare", self.drafter.prepare, state)
        stats.setup_cpu_time += time.process_time() - cpu
        return time.perf_counter() - wall, (clock() - started) if clock else 0.0

    def _prepare_costs(self, seconds: float) -> dict[str, float] | None:
        """Seconds of each drafter's `prepare` this step (None: the drafter has no such hook): a drafter
        that combines members (auto) says what each took, and the step's `seconds` are shared that way."""
        if not self._prepares:
            return None
        per_member = getattr(self.drafter, "last_prepare_seconds", None)
        if not isinstance(per_member, dict):
            return {self.drafter.name: seconds}
        total = sum(per_member.values())
        return {name: seconds * spent / total if total > 0 else 0.0 for name, spent in per_member.items()}

    def _draft_costs(self, draft: Draft, seconds: float) -> dict[str, tuple[int, int, float]]:
        """(levels, nodes, seconds) of each drafter's propose this step, for its cost fit. A drafter that combines
        members (auto) says what each took; the step's `seconds`, by the controller's clock, are shared that way
        (as `_prepare_costs` does): its own timing runs on whatever clock it was handed (the wall clock when it
        proposes for itself), and one fit fed two clocks (process CPU time for the verify curve, wall time for a
        member's drafts) prices drafts against verification wrongly on a shared CPU."""
        per_member = getattr(self.drafter, "last_draft_seconds", None)
        if isinstance(per_member, dict):
            spent = dict(per_member)
            per_member.clear()  # per step
            total = sum(member_seconds for _, _, member_seconds in spent.values())
            return {name: (levels, nodes, seconds * member_seconds / total if total > 0 else 0.0)
                    for name, (levels, nodes, member_seconds) in spent.items()}
        counts = draft.sizes()
        return {self.drafter.name: (max(counts, default=0), sum(counts), seconds)}  # levels: a chain's

    def _commit(
        self,
        state: DecodeState,
        outcome: StepOutcome,
        verdict: Verdict,
        chain: bool,
        target: TargetRunner,
        sequences: list[list[int]],
        results: list[RowResult],
        stoppers: list,
        budgets: list[int],
        stats: GenerationStats,
    ) -> tuple[set[int], list[list[int]]]:
        """Append accepted tokens and the bonus per row, stop rows that hit eos/stop/budget, and
        compact the KV cache to the accepted path (nothing moves for a chain: its accepted nodes already
        follow the root)."""
        finished: set[int] = set()
        committed: list[list[int]] = []
        for b, row in enumerate(state.row_ids):
            new = outcome.tokens[b] + [outcome.bonus[b]]
            room = budgets[row] - len(results[row].tokens)
            kept, reason = stoppers[row].scan(results[row].tokens, new[:room])
            if reason is None and len(results[row].tokens) + len(kept) >= budgets[row]:
                reason = results[row].finish_reason  # "length" or "context_length"
            results[row].tokens.extend(kept)
            sequences[row].extend(kept)
            committed.append(kept)
            stats.new_tokens += len(kept)
            stats.row_new_tokens[row] += len(kept)
            if reason is not None:
                results[row].finish_reason = reason
                finished.add(row)
            if self.streamer is not None and kept:
                self.streamer.put(torch.tensor(kept, dtype=torch.long))
        target.commit(None if chain else verdict.accepted + 1, outcome.accepted)
        return finished, committed
