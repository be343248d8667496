"""Classic speculative decoding: a small causal LM guesses, the target verifies.

The draft model runs on its own ragged KV cache (a `specdec.target.TargetRunner`, one length per
row). The cache holds committed tokens only: each step first feeds the committed tokens it has
not seen yet (the root, plus whatever the last verdict added), then drafts on scratch slots past
the committed length. After a verdict the length is advanced over the drafted tokens that were
committed, so nothing is ever re-prefilled and rejected guesses are simply overwritten.

Chains are drafted one token per forward on the scratch slots. Trees (`branches` > 1) put the
top-`branches` children (greedy) or `branches` i.i.d. samples from q (sampling) under every node of
the first `branch_depth` levels, then extend each leaf as a chain; each level is one tree-masked
forward over the whole tree so far (simple and exact; the trees here are small).

q is `process_logits(draft logits, sampling)`, the exact distribution each token was drawn from,
so the rejection verifier stays lossless; at temperature 0 drafting is argmax and q is None.
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from specdec.draft import Draft, Verdict, node_depths, tree_layout
from specdec.errors import DrafterError
from specdec.plugins import DecodeState, Drafter, GenerationContext, NominalCost
from specdec.rng import RowGenerators
from specdec.runner import (
    LayerPlan,
    TargetRunner,
    WeightFormat,
    check_model_supported,
    context_length,
    lean_forward_supports,
    nominal_model_cost,
    parse_dtype,
)
from specdec.sampling import SamplingParams, process_logits, sample

from .draft_schedule import ConfidenceExit, HeuristicLength
from .draft_vocab import VocabMapping, output_size, resolve_vocab
from .token_ranking import (
    RANKING_FILE,
    ranking_file_path,
    read_ranking_file,
    scatter_to_vocab,
    select_draft_vocab,
)


class DraftModelOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    model: Any = Field("default", description='a transformers causal LM, a local model directory, or "default" '
                                              "(the bundled draft of specdec's default pair)")
    device: str | None = Field(None, description="where a draft loaded from a path runs (default: the target's device)")
    dtype: Literal["float32", "bfloat16", "float16"] | None = Field(
        None, description="precision of a draft loaded from a path (default: the target's)")
    tokenizer: Any | None = Field(None, description="the draft's tokenizer, compared with the target's when both "
                                                    "are known (loaded from a model directory when present)")
    k: int = Field(3, ge=1, le=256, description="tokens per draft (initial length for the heuristic schedule)")
    schedule: Literal["goodput", "constant", "heuristic", "confidence"] = Field(
        "goodput", description="goodput: the core controller sets each row's draft length (up to k_max) from "
                               "measured step costs and acceptance, 0 = no draft forward at all; constant: always k; "
                               "heuristic: +2 if all accepted else -1 (transformers), floor min_k; "
                               "confidence: up to k, stop when the draft's top probability < threshold")
    k_max: int | None = Field(None, ge=1, le=256, description="ceiling of the heuristic and goodput schedules "
                                                              "(default 4k)")
    min_k: int = Field(0, ge=0, le=1, description="floor of the heuristic schedule: 1 (transformers) or 0 = rows "
                                                  "whose drafts keep failing decode plainly and probe every "
                                                  "probe_after steps")
    probe_after: int = Field(4, ge=1, le=64, description="plain steps before a min_k=0 row drafts 1 token again")
    goodput_exit: bool = Field(
        True, description="under the controller: stop a row's chain where its exit (specdec/chain_exit.py) prices the "
                          "next tokens, by the draft's confidence in the tokens drafted so far, as not paying for their "
                          "draft forwards (one device read per drafted depth)")
    confidence_threshold: float = Field(0.4, ge=0.0, le=1.0, description="gamma of the confidence exit")
    adaptive_threshold: bool = Field(False, description="update gamma online (Draft & Verify)")
    target_acceptance: float = Field(0.9, gt=0.0, le=1.0, description="alpha of the adaptive update")
    threshold_step: float = Field(0.01, gt=0.0, le=1.0, description="epsilon of the adaptive update")
    rate_smoothing: float = Field(0.5, ge=0.0, lt=1.0, description="beta1: EMA factor of the acceptance rate")
    threshold_smoothing: float = Field(0.9, ge=0.0, lt=1.0, description="beta2: EMA factor of gamma")
    branches: int = Field(1, ge=1, le=16, description="children per node in the first branch_depth levels")
    branch_depth: int = Field(1, ge=0, le=8, description="how many levels branch (with branches > 1)")
    shared_vocab_size: int | None = Field(None, ge=1, description="ids [0, n) shared by target and draft; only "
                                                                  "needed when sizes differ and no tokenizer is known")
    draft_vocab: int | list[int] | None = Field(
        None, description="tokens the draft may propose: N = the N most frequent tokens of the draft's token "
                          "ranking (a token_ranking.json beside the model, see drafters/token_ranking.py), a list = "
                          "these draft token ids, 0 = the full vocabulary; default: what that file recommends, else "
                          "the full vocabulary. The lean forward then scores only these tokens (FR-Spec)")
    fast_forward: bool = Field(True, description="run Llama/Mistral/Qwen2 drafts through specdec's lean fused "
                                                 "forward (specdec/lean_forward.py); other models always use "
                                                 "transformers' forward")
    draft_weights: WeightFormat | None = Field(
        None, description="weights of the lean forward: model (the draft's own), int8 (per-channel copies, "
                          "bfloat16 activations; CPU with torch._weight_int8pack_mm) or float16; default: int8 "
                          "where the draft is on a CPU and torch has the kernel, else model (on 32 held-out "
                          "Spec-Bench prompts: 11-22% more tokens per CPU-second at batch 1, 9-14% at batch 8, "
                          "same acceptance). Drafts only propose, so this changes speed and acceptance, never the "
                          "verified output")

    @field_validator("model")
    @classmethod
    def _model_kind(cls, value: Any) -> Any:
        if isinstance(value, (str, os.PathLike)):
            if str(value) != "default" and not Path(value).is_dir():
                raise ValueError(f"model path {str(value)!r} is not a local directory (specdec never downloads)")
            return value
        if isinstance(value, torch.nn.Module) and hasattr(value, "config"):
            return value
        raise ValueError(f'model must be a transformers causal LM, a local directory or "default", '
                         f"got {type(value).__name__}")

    @property
    def tree(self) -> bool:
        """Whether drafts are trees (`branches` children in the first `branch_depth` levels), not chains."""
        return self.branches > 1 and self.branch_depth > 0

    @model_validator(mode="after")
    def _schedule_options(self) -> DraftModelOptions:
        if self.k_max is not None and self.k_max < self.k:
            raise ValueError(f"k_max ({self.k_max}) must be >= k ({self.k})")
        if self.adaptive_threshold and self.schedule != "confidence":
            raise ValueError('adaptive_threshold needs schedule="confidence"')
        return self


# Draft models loaded from a path, by (path, device, dtype), for as long as someone uses them (weak values): a
# drafter kept across calls, or a server's, loads its draft once; nothing here keeps a model alive.
_DRAFTS: weakref.WeakValueDictionary[tuple[str, str, str], Any] = weakref.WeakValueDictionary()
_TOKENIZERS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()  # a loaded draft -> its tokenizer


def load_draft(path: str, device: str | torch.device | None = None, dtype: str | torch.dtype | None = None
               ) -> tuple[Any, Any | None]:
    """A draft model (and its tokenizer when one is saved beside it) loaded from local files ("default": the
    bundled draft) onto `device` (default: the CPU) in `dtype` (default: float32)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    where = torch.device(device) if device is not None else torch.device("cpu")
    precision = parse_dtype(dtype) or torch.float32
    key = (path, str(where), str(precision))
    model = _DRAFTS.get(key)
    if model is not None:
        return model, _TOKENIZERS.get(model)
    if path == "default":
        from specdec.zoo import default_model_dir

        root = default_model_dir()
        model_dir, tokenizer_dir = root / "draft", root / "target"
        if not (model_dir / "model.safetensors").is_file():
            raise FileNotFoundError(f"specdec's default draft model is missing under {model_dir}")
    else:
        model_dir = tokenizer_dir = Path(path)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=precision, local_files_only=True).to(where).eval()
    _DRAFTS[key] = model
    if any(Path(tokenizer_dir).glob("tokenizer*")):
        _TOKENIZERS[model] = AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)
    return model, _TOKENIZERS.get(model)



def tree_levels(branches: int, branch_depth: int, depth: int) -> list[list[int]]:
    """Parent node index of every node, level by level (BFS order; -1 = the root).

    Levels 1..branch_depth give every frontier node `branches` children; deeper levels one."""
    levels: list[list[int]] = []
    frontier, count = [-1], 0
    for level in range(1, depth + 1):
        children = branches if level <= branch_depth else 1
        parents = [node for node in frontier for _ in range(children)]
        frontier = list(range(count, count + len(parents)))
        count += len(parents)
        levels.append(parents)
    return levels


class DraftModelDrafter(Drafter):
    name = "draft_model"
    description = "A small causal LM drafts chains or trees on its own KV cache (classic speculative decoding)."
    Options = DraftModelOptions
    provides_q = True

    def __init__(self, options: BaseModel | None = None) -> None:
        super().__init__(options)
        opts: DraftModelOptions = self.options
        self.confidence = ConfidenceExit(opts.confidence_threshold, opts.adaptive_threshold, opts.target_acceptance,
                                         opts.threshold_step, opts.rate_smoothing, opts.threshold_smoothing)
        self.model: Any = None
        self.vocab: VocabMapping | None = None
        self._runner: TargetRunner | None = None
        self._rows: list[int] = []
        self._last: dict[str, Any] | None = None
        self._stats: dict[str, Any] = {}
        self._plan: LayerPlan | None = None  # how the draft's scratch forwards run (its head, the lean forward)
        self._head: torch.Tensor | None = None  # draft token ids the draft may propose (None = all)
        self.schedule: str = self.options.schedule  # in effect for this call (see setup)
        self._draft_vocab_size = 0  # rows of the draft's LM head
        self._nominal = NominalCost()  # `nominal_cost`, set by setup
        # The last pair `resolve_vocab` checked and its mapping: comparing two tokenizers' vocabularies costs
        # ~5 ms, 5% of a 64-token call on a small pair, and a drafter kept by a server sees the same pair
        # every call. Compared by identity (weak references) and size (a tokenizer that gained tokens is
        # checked again).
        self._checked_pair: tuple[tuple[Any, ...], tuple[Any, ...], VocabMapping] | None = None  # refs, sizes
        # The last draft model found supported (weakly): the check reads the model's config and forward
        # signatures, ~0.5 ms a call, 0.5% of a 64-token call of a small pair.
        self._supported: weakref.ref | None = None
        self._head_for: tuple[weakref.ref, Path | None, int, list[int] | None] | None = None  # see `_draft_head`
        self._plan_for: tuple[weakref.ref, tuple, LayerPlan] | None = None  # see `_layer_plan`

    # -- setup and teardown ------------------------------------------------------------------
    def _draft_model(self, target: Any) -> tuple[Any, Any | None]:
        opts: DraftModelOptions = self.options
        if isinstance(opts.model, (str, os.PathLike)):
            weight = target.get_input_embeddings().weight  # by default the target's device and dtype
            model, tokenizer = load_draft(str(opts.model), opts.device or weight.device, opts.dtype or weight.dtype)
        else:
            model, tokenizer = opts.model, None
        return model, opts.tokenizer if opts.tokenizer is not None else tokenizer

    def nominal_cost(self) -> NominalCost:
        """A draft level is one forward of the draft model as its scratch forwards run it (`nominal_model_cost`)."""
        return self._nominal

    def follows_exit(self) -> bool:
        """Chains under the controller with `goodput_exit` stop where its exit says (trees keep their shape)."""
        opts: DraftModelOptions = self.options
        return self.controlled() and opts.goodput_exit and not opts.tree

    def setup(self, context: GenerationContext) -> None:
        opts: DraftModelOptions = self.options
        self.model, draft_tokenizer = self._draft_model(context.model)
        self.vocab = self._resolve_vocab(context.model, context.tokenizer, draft_tokenizer)
        if self._supported is None or self._supported() is not self.model:
            check_model_supported(self.model)
            self._supported = weakref.ref(self.model)
        self._draft_vocab_size = int(self.model.get_output_embeddings().weight.shape[0])
        head = self._draft_head()
        self._head = None if head is None else torch.tensor(head, dtype=torch.long)
        self.draft_context = context_length(self.model)
        self.sampling: SamplingParams = context.sampling
        self.device = context.device
        self._eos = torch.tensor(sorted(context.eos_token_ids), dtype=torch.long, device=self.device)
        self.tree = opts.tree
        # "goodput" without the controller (generate(controller=False)): the defaults before it.
        self.schedule = opts.schedule if opts.schedule != "goodput" or context.goodput else (
            "constant" if self.tree else "heuristic")
        grows = self.schedule == "heuristic" or (self.schedule == "goodput" and not self.tree)
        depth_cap = (opts.k_max or 4 * opts.k) if grows else opts.k  # a tree keeps its shape: depth k
        nodes = depth_cap
        if self.tree:
            nodes = sum(len(level) for level in tree_levels(opts.branches, opts.branch_depth, depth_cap))
            if nodes > context.max_draft_nodes:
                raise DrafterError(f"drafter 'draft_model': a tree of depth {depth_cap} with branches="
                                   f"{opts.branches}, branch_depth={opts.branch_depth} has {nodes} nodes, more than "
                                   f"max_draft_nodes={context.max_draft_nodes}")
        self.depth_cap = min(depth_cap, context.max_draft_nodes)
        levels = tree_levels(opts.branches, opts.branch_depth, self.depth_cap) if self.tree else []
        self._level_sizes = [sum(len(level) for level in levels[: d + 1]) for d in range(len(levels))]
        self.heuristic = HeuristicLength(opts.k, self.depth_cap, opts.min_k, opts.probe_after)
        self.confidence.reset_rate()

        self._prompts = context.prompts
        self._capacity = max(len(p) for p in context.prompts) + context.max_new_tokens + nodes + 2
        self._reproducible = context.reproducible  # no kernel chosen by timings (`TargetRunner`)
        self._rows = context.first_rows
        self._runner = None  # prefilled at the first step that drafts (`prepare`)
        self._ready: list[bool] = []  # per row of the draft's cache: its prompt is prefilled
        self._plan = self._layer_plan(head)
        self._nominal = nominal_model_cost(self.model, context.model, self._plan)
        lean = opts.fast_forward and lean_forward_supports(self.model)
        self._last = None
        self._stats = {"draft_vocab": self.vocab.describe(), "draft_forwards": 0, "draft_cache_peak_bytes": 0,
                       "draft_weights": self._plan.weights if lean else "model (transformers forward)",
                       "draft_head_tokens": None if self._head is None else len(self._head)}
        self._track_memory()

    def _layer_plan(self, head: list[int] | None) -> LayerPlan:
        """How the draft's scratch forwards run: its reduced head and the lean forward. The same plan object while
        the draft, its head and the options stay (the runner prepares a plan once per object)."""
        opts: DraftModelOptions = self.options
        settings = (head, opts.fast_forward, opts.draft_weights)
        cached = self._plan_for
        if cached is not None and cached[0]() is self.model and cached[1] == settings:
            return cached[2]
        plan = LayerPlan.build(self.model, head_tokens=head, lean=opts.fast_forward, weights=opts.draft_weights)
        self._plan_for = (weakref.ref(self.model), settings, plan)
        return plan

    def _draft_head(self) -> list[int] | None:
        """The draft token ids the draft proposes (None = all): the option, else the ranking file beside the
        draft; read again only for another draft model or a changed file (parsing it took ~0.6 ms a call)."""
        opts: DraftModelOptions = self.options
        explicit = isinstance(opts.draft_vocab, list) or opts.draft_vocab == 0
        path = None if explicit else ranking_file_path(self.model)
        stamp = path.stat().st_mtime_ns if path is not None else 0
        cached = self._head_for
        if cached is not None and cached[0]() is self.model and cached[1:3] == (path, stamp):
            return cached[3]
        ranking_file = {} if path is None else (read_ranking_file(self.model) or {})
        head = select_draft_vocab(opts.draft_vocab, self._draft_vocab_size, ranking_file.get("ranking"),
                                  int(ranking_file.get("draft_vocab", 0)), "draft_model",
                                  f"a {RANKING_FILE} beside the draft model (`specdec rank-tokens`)")
        self._head_for = (weakref.ref(self.model), path, stamp, head)
        return head

    def _resolve_vocab(self, target: Any, target_tokenizer: Any | None, draft_tokenizer: Any | None) -> VocabMapping:
        """`resolve_vocab` for this call's pair, reusing the last check when the pair is the same objects
        (held weakly: a kept drafter never keeps the user's model or tokenizer alive)."""
        shared = self.options.shared_vocab_size
        objects = (target, self.model, target_tokenizer, draft_tokenizer)
        sizes = (None if target_tokenizer is None else len(target_tokenizer),
                 None if draft_tokenizer is None else len(draft_tokenizer),
                 shared, output_size(target), output_size(self.model))
        if self._checked_pair is not None:
            refs, last_sizes, vocab = self._checked_pair
            if last_sizes == sizes and all((None if ref is None else ref()) is obj for ref, obj in zip(refs, objects)):
                return vocab
        vocab = resolve_vocab(target, self.model, target_tokenizer, draft_tokenizer, shared)
        self._checked_pair = tuple(None if obj is None else weakref.ref(obj) for obj in objects), sizes, vocab
        return vocab

    def _prefilled(self, rows: list[int], full: list[bool] | None = None) -> TargetRunner:
        """A draft-model cache holding these rows' prompts but the last token (the first step feeds it); rows
        not `full` hold nothing yet (their prompt is prefilled when they first draft: `_ensure_rows`)."""
        prompts = [self._prompts[row] if full is None or full[index] else self._prompts[row][-1:]
                   for index, row in enumerate(rows)]
        runner = TargetRunner(self.model, len(rows), self._capacity, reproducible=self._reproducible)
        prefill = torch.zeros(len(rows), max(max(len(p) for p in prompts) - 1, 0), dtype=torch.long)
        for index, prompt in enumerate(prompts):
            prefill[index, : len(prompt) - 1] = torch.as_tensor(prompt[:-1], dtype=torch.long)
        runner.prefill(self.vocab.to_draft_ids(prefill), [len(p) - 1 for p in prompts])
        return runner

    def admit(self, rows: list[int]) -> None:
        """Continuous batching: the joining rows take places after the rows the draft holds (rows that left
        are dropped at the next `propose`), their prompts prefilled when they first draft."""
        if self._runner is not None:
            self._runner.append_rows(self._prefilled(rows, [False] * len(rows)))
            self._ready = self._ready + [False] * len(rows)
        self._rows = self._rows + list(rows)
        self._track_memory()

    def prepare(self, state: DecodeState) -> None:
        """The draft's prefill, deferred from `setup` to the first step that drafts each row: under the goodput
        controller a request it never drafts for (long documents the draft cannot predict, a draft as slow as
        its target, a batch where drafting does not pay) never pays it. Each row's committed tokens since
        are fed when it next drafts."""
        self._sync_rows(state.row_ids)
        depths = self._row_depths(state)
        if int(depths.max()) > 0:
            self._ensure_rows(self._working_rows(depths))

    def _working_rows(self, depths: np.ndarray) -> list[bool]:
        """The rows the draft runs this step: those drafting (a chain), or every row (a tree: its forwards run
        the whole batch). In a batch where the controller drafts for one row, the others are neither
        prefilled nor caught up (at batch 4 on this CPU, prefilling every row that joined a continuous batch
        once any row drafted cost 5% of the run)."""
        return [True] * len(depths) if self.tree else (depths > 0).tolist()

    def _ensure_rows(self, working: list[bool]) -> None:
        """Prefill the draft's cache for the working rows that it does not hold yet."""
        if self._runner is None:
            self._runner = self._prefilled(self._rows, working)
            self._ready = list(working)
            self._track_memory()
            return
        missing = [index for index, (needed, ready) in enumerate(zip(working, self._ready)) if needed and not ready]
        if missing:
            self._runner.replace_rows(missing, self._prefilled([self._rows[i] for i in missing]))
            for index in missing:
                self._ready[index] = True
            self._track_memory()

    def _scratch(self, ids: torch.Tensor, offset: int, keep: np.ndarray | None = None,
                 active: np.ndarray | None = None) -> torch.Tensor:
        """Draft forward of a causal chain ids [B, T] placed `offset` slots past each row's
        committed length. Returns logits [B, T, V], or [B, V] at input index keep[b] per row
        (then only those positions go through the LM head on the fast path). With `active` [B]
        bool, the fast path runs only those rows (the others' logits are left as zeros). `keep` and
        `active` are host data: the step is planned on the host."""
        self._stats["draft_forwards"] += 1
        # Sampling runs every row, so a row's q (and its draws) never depends on which neighbours are still
        # drafting; greedy drafts cannot change the output.
        rows = None if active is None or bool(active.all()) or not self.sampling.greedy else np.flatnonzero(active)
        return self._whole_vocab(self._runner.scratch_forward(ids, offset, plan=self._plan, keep=keep, rows=rows))

    def _whole_vocab(self, logits: torch.Tensor) -> torch.Tensor:
        """Logits of the reduced head [..., N] -> [..., draft vocabulary], -inf outside."""
        if self._head is None:
            return logits
        return scatter_to_vocab(logits, self._head, self._draft_vocab_size, float("-inf"))

    def _masked_to_vocab(self, logits: torch.Tensor) -> torch.Tensor:
        """transformers' full logits with -inf outside `draft_vocab`, so every path proposes the same tokens."""
        if self._head is None:
            return logits
        return self._whole_vocab(logits.index_select(-1, self._head.to(logits.device)))

    def finish(self) -> None:
        if self._runner is not None:
            self._track_memory()
            self._runner.release()
        self._runner = None
        self._last = None

    def stats(self) -> dict[str, Any]:
        out = dict(self._stats)
        if self.options.schedule == "confidence":
            out["confidence_threshold"] = self.confidence.threshold
        return out

    def _track_memory(self) -> None:
        if self._runner is not None:
            used = self._runner.memory_bytes()
            self._stats["draft_cache_peak_bytes"] = max(self._stats.get("draft_cache_peak_bytes", 0), used)

    # -- drafting ----------------------------------------------------------------------------
    def _sync_rows(self, row_ids: list[int]) -> None:
        """Follow rows leaving the batch: keep the draft cache's rows aligned with the engine's."""
        if row_ids != self._rows and self._runner is None:
            self._rows = list(row_ids)
        elif row_ids != self._rows:
            position = {row: index for index, row in enumerate(self._rows)}
            keep = [position[row] for row in row_ids]
            self._runner.select_rows(keep)
            self._ready = [self._ready[index] for index in keep]
            self._rows = list(row_ids)

    def _row_depths(self, state: DecodeState) -> np.ndarray:
        """Max draft depth per row this step (host): schedule, token budget and the draft's context."""
        if self.schedule == "heuristic":
            wanted = np.array([self.heuristic.length(row) for row in state.row_ids], dtype=np.int64)
        else:
            wanted = np.full(state.batch_size, self.depth_cap, dtype=np.int64)
        budgets = state.draft_budgets()
        if budgets is not None:  # the controller verifies at most this many nodes per row
            budget = np.asarray(budgets, dtype=np.int64)
            if self.tree:  # nodes -> the deepest level whose whole tree fits
                sizes = np.asarray(self._level_sizes, dtype=np.int64)
                budget = (sizes[None, :] <= budget[:, None]).sum(axis=1)
            wanted = np.minimum(wanted, budget)
        depths = np.minimum(wanted, np.maximum(np.asarray(state.max_depths(), dtype=np.int64), 0))
        if self.draft_context is not None:
            # Drafted token i (0-based) is fed at position len(seq) + i; the last one is never fed.
            longest = max(len(seq) for seq in state.sequences)
            depths = np.minimum(depths, max(self.draft_context - longest + 1, 0))
        return depths

    def _feed_pending(self, sequences: list[list[int]], working: list[bool]) -> torch.Tensor:
        """Feed each working row's committed tokens not yet in the draft cache (at least the root) and
        return the draft's logits after the root, mapped to the target's ids [B, V] (meaningless for the
        other rows, which keep theirs pending)."""
        runner = self._runner
        starts = runner.lengths.tolist()
        pending = [seq[start:] if work else seq[-1:] for seq, start, work in zip(sequences, starts, working)]
        width = max(len(p) for p in pending)
        ids = torch.zeros(len(pending), width, dtype=torch.long)
        for b, tokens in enumerate(pending):
            ids[b, : len(tokens)] = torch.as_tensor(tokens, dtype=torch.long)
            ids[b, len(tokens):] = tokens[-1]
        last = np.array([len(p) - 1 for p in pending], dtype=np.int64)
        active = None if all(working) else np.array(working, dtype=bool)
        root_logits = self._scratch(self.vocab.to_draft_ids(ids.to(self._runner.device)), 0, keep=last, active=active)
        fed = np.array([len(seq) for seq in sequences], dtype=np.int64)
        runner.set_lengths(fed if active is None else np.where(active, fed, runner.lengths))
        return self.vocab.to_target(root_logits.float()).to(self.device)

    def _choose(self, logits: torch.Tensor, count: int, generator: RowGenerators,
                drafting: torch.Tensor | np.ndarray):
        """`count` children per distribution in logits [B, ..., V]: the top ones when greedy, i.i.d.
        samples of q otherwise (drawn only for rows still `drafting` [B], so a row's random stream
        does not depend on its neighbours). Returns (tokens [B, ..., count], q [B, ..., V] or None).
        Sampled without a device read: a q that is not a distribution (NaN logits) draws out of the vocabulary,
        clamped into it here, and the engine refuses the draft when it reads the step back (its check of q)."""
        if self.sampling.greedy:
            tokens = logits.topk(count, dim=-1).indices if count > 1 else logits.argmax(dim=-1, keepdim=True)
            return tokens, None
        q = process_logits(logits, self.sampling)
        draws = q.unsqueeze(-2).expand(*q.shape[:-1], count, q.shape[-1])
        shape = (-1, *([1] * (draws.dim() - 2)))
        if isinstance(drafting, np.ndarray):  # known on the host: nothing read back
            used = np.broadcast_to(drafting.astype(bool).reshape(shape), tuple(draws.shape[:-1]))
        else:
            used = torch.as_tensor(drafting, device=q.device).reshape(shape).expand(draws.shape[:-1])
        return sample(draws, generator, used, checked=False).clamp(max=q.shape[-1] - 1), q

    def _confident(self, logits: torch.Tensor) -> torch.Tensor:
        """[...] bool: whether the draft's top probability (raw softmax) reaches gamma."""
        return logits.softmax(dim=-1).amax(dim=-1) >= self.confidence.threshold

    def propose(self, state: DecodeState) -> Draft:
        self._sync_rows(state.row_ids)
        self._last = None
        depths = self._row_depths(state)
        if int(depths.max()) <= 0:
            return Draft.empty(state.batch_size)
        working = self._working_rows(depths)
        self._ensure_rows(working)  # already done when the engine called `prepare`
        runner = self._runner
        runner.set_lengths(np.minimum(runner.lengths, [len(seq) - 1 for seq in state.sequences]))
        if self.draft_context is not None:
            # Pending tokens are fed right-padded to the longest pending run of the batch.
            width = max(len(seq) - int(start) for seq, start, work in zip(state.sequences, runner.lengths.tolist(),
                                                                          working) if work)
            if int(runner.lengths.max()) + width > self.draft_context:
                return Draft.empty(state.batch_size)
        root_logits = self._feed_pending(state.sequences, working)
        if self.tree:
            draft = self._propose_tree(state, root_logits, depths)
        else:
            draft = self._propose_chain(state, root_logits, depths)
        self._track_memory()
        return draft

    def _propose_chain(self, state: DecodeState, logits: torch.Tensor, depths: np.ndarray) -> Draft:
        """Planned on the host from `depths`: a row drafts its depth, cut after its first eos (one read of the
        finished draft), so the engine knows the sizes without reading the draft back. The confidence schedule
        decides on the host per drafted token (the draft's top probability, and eos, read each level): it is
        exempt from the engine's read budget."""
        batch, steps = state.batch_size, int(depths.max())
        confidence_exit = self.schedule == "confidence"
        # Under the controller's exit each node is scored by the draft's confidence in its path, and the exit stops a
        # row whose next tokens no longer pay for their draft forwards. Without it nothing is scored: the cut reading
        # the scores of chains drafted to their budget lost 3% (benchmarks/results/goodput/checks_s60/).
        scored = self.schedule == "goodput" and self.options.goodput_exit
        scores = torch.zeros(batch, steps, device=self.device) if scored else None
        draft_exit = state.draft_exit if scored else None
        tokens = torch.zeros(batch, steps, dtype=torch.long, device=self.device)
        q_steps: list[torch.Tensor] = []
        counts = np.zeros(batch, dtype=np.int64)
        going = depths > 0
        fed = np.zeros(batch, dtype=np.int64)  # per row: drafted tokens whose KV the draft cache holds
        for i in range(steps):
            chosen, q = self._choose(logits, 1, state.generator, going)
            tokens[:, i] = chosen[:, 0]
            if q is not None:
                q_steps.append(q)
            counts += going
            going = going & (depths > i + 1)
            if confidence_exit:  # nothing past eos commits either
                going &= (self._confident(logits) & ~torch.isin(chosen[:, 0], self._eos)).cpu().numpy()
            if scores is not None:  # the raw (temperature 1) probability of the drafted token, as layer_skip's
                confidence = logits.softmax(dim=-1).gather(1, chosen).squeeze(1)
                scores[:, i] = confidence * (scores[:, i - 1] if i else 1.0)
                if draft_exit is not None and going.any():  # one read: the confidences, and which rows hit eos
                    read = torch.stack([confidence, torch.isin(chosen[:, 0], self._eos).to(confidence.dtype)]).tolist()
                    going &= ~np.asarray(read[1], dtype=bool)  # nothing past eos commits
                    if going.any():
                        going &= np.asarray(draft_exit.keep_drafting(i + 1, read[0], going), dtype=bool)
            if not going.any():
                break
            step_logits = self._scratch(self.vocab.to_draft_ids(tokens[:, i : i + 1]), i, active=going)[:, -1]
            fed += going  # rows that stopped may not have been run (see _scratch)
            logits = self.vocab.to_target(step_logits.float()).to(self.device)
        width = int(counts.max())
        host_scores = None
        if width and not confidence_exit and (self._eos.numel() or scores is not None):
            # Nothing past a drafted eos can commit: each row ends at its first eos. One read for the whole
            # draft (the levels above ran on without looking), with the scores the controller's cut reads, so a
            # step without the exit reads the device at most twice.
            hit = torch.isin(tokens[:, :width], self._eos.to(tokens.device))
            ends = torch.where(hit.any(dim=1), hit.long().argmax(dim=1) + 1, width)
            if scores is None:
                counts = np.minimum(counts, ends.tolist())
            else:
                read = torch.cat([ends[:, None].to(scores.dtype), scores[:, :width]], dim=1).tolist()
                counts = np.minimum(counts, [int(row[0]) for row in read])
                host_scores = [row[1:] for row in read]
            width = int(counts.max())
        q_all = torch.stack(q_steps[:width], dim=1) if q_steps else None
        self._last = {"kind": "chain", "fed": fed}
        return Draft.chain(tokens[:, :width], counts.tolist(), q_all, None if scores is None else scores[:, :width],
                           host_scores)

    def _propose_tree(self, state: DecodeState, logits: torch.Tensor, depths: torch.Tensor) -> Draft:
        opts: DraftModelOptions = self.options
        batch, steps = state.batch_size, int(depths.max())
        depths = torch.as_tensor(depths)
        confidence_exit = self.schedule == "confidence"
        levels = tree_levels(opts.branches, opts.branch_depth, steps)
        runner = self._runner
        runner.set_lengths(runner.lengths - 1)  # the root is re-fed as input 0 of every tree forward
        roots = torch.tensor([[seq[-1]] for seq in state.sequences], dtype=torch.long)
        token_parts: list[torch.Tensor] = []
        q_parts: list[torch.Tensor] = []
        parents: list[int] = []
        counts = torch.zeros(batch, dtype=torch.long)
        going = depths > 0
        frontier_logits = logits[:, None, :]  # [B, F, V]
        fed_nodes = torch.zeros(batch, dtype=torch.long)
        for level, level_parents in enumerate(levels, start=1):
            children = len(level_parents) // frontier_logits.shape[1]
            chosen, q = self._choose(frontier_logits, children, state.generator, going)  # [B, F, c]
            token_parts.append(chosen.reshape(batch, -1))
            if q is not None:
                q_parts.append(q[:, :, None, :].expand(-1, -1, children, -1).reshape(batch, -1, q.shape[-1]))
            parents.extend(level_parents)
            counts += going.long() * len(level_parents)
            if confidence_exit:
                going &= self._confident(frontier_logits).any(dim=1).cpu()
            going &= depths > level
            if not bool(going.any()) or level == len(levels):
                break
            node_tokens = torch.cat(token_parts, dim=1).cpu()
            input_parents = torch.tensor([0] + [p + 1 for p in parents], dtype=torch.long)[None, :].expand(batch, -1)
            tree_depths, visible = tree_layout(input_parents.contiguous())
            ids = self.vocab.to_draft_ids(torch.cat([roots, node_tokens], dim=1))
            out = self._masked_to_vocab(runner.verify_forward(ids, tree_depths, visible))
            self._stats["draft_forwards"] += 1
            fed_nodes.fill_(len(parents))  # tree forwards run every row
            new = out[:, 1 + len(parents) - len(level_parents) : 1 + len(parents)]
            frontier_logits = self.vocab.to_target(new.float()).to(self.device)
        width = int(counts.max())
        node_tokens = torch.cat(token_parts, dim=1)[:, :width]
        parent_tensor = torch.tensor(parents[:width], dtype=torch.long, device=self.device).expand(batch, -1)
        q_all = torch.cat(q_parts, dim=1)[:, :width] if q_parts else None
        self._last = {"kind": "tree", "tokens": node_tokens.cpu(), "fed": fed_nodes}
        return Draft(node_tokens, parent_tensor.contiguous(), counts.to(self.device), q_all)

    # -- learning from the verdict -------------------------------------------------------------
    def observe(self, state: DecodeState, draft: Draft, verdict: Verdict, committed: list[list[int]],
                extra_logits: torch.Tensor | None) -> None:
        accepted = state.accepted_counts(verdict)
        self._advance_cache(verdict, committed, accepted)
        schedule = self.schedule
        if schedule in ("constant", "goodput") or (draft.width == 0 and schedule != "heuristic"):
            return
        if draft.width == 0:
            drafted = [0] * state.batch_size
        elif draft.host is not None and draft.host.chain:
            drafted = draft.sizes()  # a chain's depth is its size
        else:
            drafted = node_depths(draft.parents, draft.node_mask()).max(dim=1).values.tolist()
        for row, depth, kept in zip(state.row_ids, drafted, accepted):
            if schedule == "heuristic":
                self.heuristic.update(row, depth, kept)
            else:
                self.confidence.update(depth, kept, depth >= self.depth_cap)

    def _advance_cache(self, verdict: Verdict, committed: list[list[int]], accepted: list[int]) -> None:
        """Move the draft cache's committed length over the drafted tokens the verdict kept."""
        last, self._last = self._last, None
        if last is None:
            return
        runner = self._runner
        if last["kind"] == "chain":
            # Drafted token j sits at slot length + j, exactly where committed token j goes; its KV is kept
            # when it was fed to the draft and committed (a chain's accepted nodes are its first ones, and
            # their tokens are the ones committed). Host data only.
            kept = np.minimum(np.minimum(np.asarray(accepted, dtype=np.int64), last["fed"]),
                              [len(new) for new in committed])
            runner.set_lengths(runner.lengths + kept)
            return
        tokens, fed = last["tokens"], last["fed"]
        path = verdict.accepted.cpu().clamp(min=0)
        counts = verdict.num_accepted.cpu()
        keep = torch.zeros(len(committed), dtype=torch.long)
        for b, new in enumerate(committed):
            row_path = path[b, : int(counts[b])].tolist()
            for j, node in enumerate(row_path):
                # A kept node's KV is valid only if it was fed to the draft and really committed.
                if node >= int(fed[b]) or j >= len(new) or new[j] != int(tokens[b, node]):
                    break
                keep[b] = j + 1
        # Only the kept columns: the rest of the path may point at nodes that were never fed.
        runner.commit(path[:, : int(keep.max())] + 1, keep)
