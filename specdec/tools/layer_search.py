"""Find a skip set by Bayesian optimisation of measured self-speculative speed (Draft & Verify §3.3).

Search space: 2L switches (attention of layer i, MLP of layer i), encoded as the paper's code does
as 2L continuous parameters in [0, 1], "skip" when > 0.5. The objective is the measured tokens per
second of greedy self-speculation (exact verifier) on calibration prompts, so it prices in both
acceptance and draft cost on the machine at hand.

`objective="cost"` replaces wall-clock timing of every candidate (noisy on a shared CPU: +-15% between
identical runs, as large as the differences between good sets) by a cost model measured once per
search: the candidate's greedy run still counts its draft forwards and the tokens of each
verification, which are deterministic, and each is priced by CPU-time costs timed at the start
(a draft forward = fixed part + per kept attention block + per kept MLP block; a verification of t
tokens; engine overhead per step), all in units of a plain 1-token forward. The objective is then
exact for the calibration prompts up to the cost model, which the final re-timing checks.

Engineering around the noisy objective (an ask/tell loop with `bayesian-optimization` 3.x):
- every distinct mask is timed once and cached in a JSON file; a suggestion that maps to a cached
  mask is told the cached value without timing again;
- the cache is written after every evaluation, so an interrupted search resumes where it stopped
  (history is replayed into a fresh optimiser);
- at the end the best few masks are re-timed, interleaved with the plain-decoding baseline, and
  the winner is chosen on the re-timed median (the best single timing is biased upward).

Python API: `search_skip_set(model, prompts, ...)`; CLI: `specdec search-layers` (see `main`).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import platform
import statistics
import sysconfig
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from specdec.drafters.layerskip.drafter import LayerSkipDrafter, LayerSkipOptions
from specdec.drafters.layerskip.skipset import SkipSet, model_fingerprint, save_skip_set
from specdec.layer_plan import LayerPlan
from specdec.layer_plan import num_layers as count_layers
from specdec.lean_forward import WeightFormat, default_weight_format

CACHE_FORMAT = "specdec.layer_skip_search/1"

#: Stdlib modules used as default calibration text (code the default model saw in training; calibration,
#: unlike evaluation, may use training data, as the paper's dev set does).
CALIBRATION_MODULES = ("bisect.py", "glob.py", "base64.py", "pprint.py", "string.py", "functools.py",
                       "contextlib.py", "random.py", "locale.py", "copy.py", "operator.py", "weakref.py")


class SearchSettings(BaseModel):
    """How each skip set is timed; part of the cache key (timings under other settings are not comparable)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_new_tokens: int = Field(32, ge=1, description="tokens generated per prompt (paper: 32)")
    max_draft: int = Field(8, ge=1, description="maximum draft length while searching (paper's code: 8)")
    gamma0: float = Field(0.8, ge=0.0, le=1.0, description="initial exit threshold while searching (code: 0.8)")
    alpha: float = Field(0.9, gt=0.0, le=1.0, description="target acceptance of adaptive exit")
    adaptive: bool = True
    clock: Literal["wall", "cpu"] = Field(
        "wall", description="wall: elapsed time (what a user sees on a dedicated machine); cpu: this process's "
                            "CPU time, far steadier on a shared machine (set torch threads to 1 for it to track "
                            "compute faithfully)")
    objective: Literal["time", "cost"] = Field(
        "time", description="time: measured tokens/s of each candidate (the paper); cost: deterministic counts "
                            "priced by a cost model timed once (see the module docstring)")
    draft_vocab: int = Field(0, ge=0, description="draft scores the N most frequent tokens (0 = full vocabulary)")
    fast_forward: bool = Field(True, description="drafts run the lean fused forward (specdec/lean_forward.py) where "
                                                 "the architecture allows; the cost model times the same path")
    draft_weights: WeightFormat | None = Field(
        None, description="weights of the lean forward (see specdec.lean_forward.WeightFormat); default: as the drafter's "
                          "(int8 where the model is on a CPU and torch has the kernel, else model)")


@dataclass
class Measurement:
    tokens_per_second: float  # by the settings' clock: the search objective
    tau: float
    acceptance: float
    tokens: int
    seconds: float  # by the settings' clock
    wall_tokens_per_second: float = 0.0
    cpu_tokens_per_second: float = 0.0
    draft_forwards: int = 0
    steps: int = 0  # verification forwards
    draft_seconds: float = 0.0  # wall, from the engine's stats
    verify_seconds: float = 0.0
    verify_widths: dict[int, int] = field(default_factory=dict)  # tokens in a verification -> how many steps
    predicted_speedup: float = 0.0  # by the cost model, when one was given


@dataclass
class SearchResult:
    skip: SkipSet
    tokens_per_second: float  # re-timed median
    baseline_tokens_per_second: float
    speedup: float
    history: list[dict] = field(default_factory=list)  # one entry per iteration
    retimed: list[dict] = field(default_factory=list)
    out_path: Path | None = None
    draft_vocab: int = 0  # recommended draft vocabulary (0 = full)
    predicted_speedup: float = 0.0  # cost objective only


# -- measuring --------------------------------------------------------------------------------
class _WidthRecordingDrafter(LayerSkipDrafter):
    """Counts how many tokens each verification forward gets (1 + drafted), for the cost model."""

    widths: dict[int, int]

    def propose(self, state: Any) -> Any:
        draft = super().propose(state)
        for nodes in draft.num_nodes.tolist():
            self.widths[1 + int(nodes)] = self.widths.get(1 + int(nodes), 0) + 1
        return draft


@dataclass
class CostModel:
    """CPU-time costs of one process, in units of a plain 1-token forward (`unit_seconds`)."""

    unit_seconds: float
    num_layers: int
    draft_fixed: dict[int, float]  # draft_vocab (0 = full) -> a draft forward with every block skipped
    attention: float  # added per kept attention block
    mlp: float  # added per kept MLP block
    verify: list[float]  # verify[t - 1]: a t-token verification forward
    step_overhead: float = 0.0  # engine work per step beyond the forward (verifier, bookkeeping)

    def draft_cost(self, skip: SkipSet, draft_vocab: int) -> float:
        kept_attention = self.num_layers - len(skip.attention)
        kept_mlp = self.num_layers - len(skip.mlp)
        return self.draft_fixed[draft_vocab] + kept_attention * self.attention + kept_mlp * self.mlp

    def verify_cost(self, width: int) -> float:
        if width <= len(self.verify):
            return self.verify[width - 1]
        # beyond the timed widths: extend linearly from the last two
        slope = self.verify[-1] - self.verify[-2] if len(self.verify) > 1 else self.verify[-1]
        return self.verify[-1] + slope * (width - len(self.verify))

    def cost(self, skip: SkipSet | None, draft_vocab: int, draft_forwards: int, widths: dict[int, int],
             tokens: int) -> float:
        """Predicted cost (units) of a run; `skip=None` = plain decoding (one 1-token forward per token)."""
        if skip is None:
            return tokens * (self.verify_cost(1) + self.step_overhead)
        verify = sum(count * (self.verify_cost(width) + self.step_overhead) for width, count in widths.items())
        return draft_forwards * self.draft_cost(skip, draft_vocab) + verify


def _median_cpu_ms(fn: Any, calls: int, rounds: int) -> float:
    for _ in range(max(2, calls // 4)):
        fn()
    times = []
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(calls):
            fn()
        times.append((time.process_time() - start) / calls)
    return statistics.median(times)


@torch.no_grad()
def measure_cost_model(model: Any, prompt: list[int], max_width: int, vocab_rankings: dict[int, list[int]],
                       calls: int = 20, rounds: int = 5, fast_forward: bool = True,
                       draft_weights: WeightFormat | None = None) -> CostModel:
    """Time (CPU, this process) the forwards the cost model prices, on the engine's own cache code;
    drafts on the path the drafter takes (`fast_forward`: the lean forward where supported)."""
    from specdec.target import TargetRunner

    draft_weights = draft_weights or default_weight_format(model)

    layers = count_layers(model)
    runner = TargetRunner(model, 1, len(prompt) + max_width + 8)
    runner.prefill(torch.tensor([prompt[:-1]]), torch.tensor([len(prompt) - 1]))
    root = torch.tensor([[prompt[-1]]])
    chain = torch.tensor([prompt[-max_width:]] if len(prompt) >= max_width else [[prompt[-1]] * max_width])
    verify = []
    for width in range(1, max_width + 1):
        visible = torch.ones(width, width, dtype=torch.bool).tril()[None]
        depths = torch.arange(width)[None]
        run = functools.partial(runner.verify_forward, chain[:, :width], depths, visible)
        verify.append(_median_cpu_ms(run, calls, rounds))
    unit = verify[0]
    everything = tuple(range(layers))

    def draft(attention: tuple[int, ...], mlp: tuple[int, ...], ranking: list[int] | None) -> float:
        plan = LayerPlan.build(model, attention, mlp, head_tokens=ranking, lean=fast_forward, weights=draft_weights)
        return _median_cpu_ms(lambda: runner.scratch_forward(root, plan=plan), calls, rounds) / unit

    fixed = {vocab: draft(everything, everything, ranking or None) for vocab, ranking in vocab_rankings.items()}
    first = next(iter(vocab_rankings))
    ranking0 = vocab_rankings[first] or None
    attention = max(0.0, (draft((), everything, ranking0) - fixed[first]) / layers)
    mlp = max(0.0, (draft(everything, (), ranking0) - fixed[first]) / layers)
    return CostModel(unit_seconds=unit, num_layers=layers, draft_fixed=fixed, attention=attention, mlp=mlp,
                     verify=[v / unit for v in verify])


def measure(model: Any, prompts: list[list[int]], skip: SkipSet | None, settings: SearchSettings,
            *, ranking: list[int] | None = None, cost_model: CostModel | None = None) -> Measurement:
    """Greedy generation over `prompts` one at a time; `skip=None` measures plain decoding.

    With `cost_model` the objective (`tokens_per_second`) is the cost model's prediction."""
    import specdec

    drafter: Any = "none"
    if skip is not None:
        vocab: list[int] | int = 0
        if settings.draft_vocab:
            if ranking is None:
                raise ValueError("draft_vocab > 0 needs a token ranking")
            vocab = list(ranking[: settings.draft_vocab])
        drafter = _WidthRecordingDrafter(LayerSkipOptions(
            skip=skip, max_draft=settings.max_draft, gamma0=settings.gamma0, alpha=settings.alpha,
            adaptive=settings.adaptive, draft_vocab=vocab, fast_forward=settings.fast_forward,
            draft_weights=settings.draft_weights, schedule="own"))  # the drafter's own quality, uncut
        drafter.widths = {}
    tokens = steps = drafted = accepted = 0
    wall = cpu = draft_seconds = verify_seconds = 0.0
    for prompt in prompts:
        cpu_start = time.process_time()
        out = specdec.generate(model, prompt, drafter=drafter, verifier="exact", max_new_tokens=settings.max_new_tokens,
                               eos_token_id=[])
        cpu += time.process_time() - cpu_start
        stats = out.stats
        tokens += stats.new_tokens
        steps += stats.steps
        drafted += stats.drafted_tokens
        accepted += stats.accepted_tokens
        wall += stats.wall_time
        draft_seconds += stats.draft_time
        verify_seconds += stats.verify_time
    seconds = cpu if settings.clock == "cpu" else wall
    widths = drafter.widths if skip is not None else {1: steps}
    forwards = drafter.draft_forwards if skip is not None else 0
    predicted = 0.0
    if cost_model is not None:
        cost = cost_model.cost(skip, settings.draft_vocab, forwards, widths, tokens)
        predicted = cost_model.cost(None, 0, 0, {}, tokens) / cost if cost > 0 else 0.0
        seconds = cost * cost_model.unit_seconds  # predicted seconds: the objective
    return Measurement(
        tokens_per_second=tokens / seconds if seconds > 0 else 0.0,
        tau=tokens / steps if steps else 0.0,
        acceptance=accepted / drafted if drafted else 0.0,
        tokens=tokens, seconds=seconds,
        wall_tokens_per_second=tokens / wall if wall > 0 else 0.0,
        cpu_tokens_per_second=tokens / cpu if cpu > 0 else 0.0,
        draft_forwards=forwards,
        steps=steps, draft_seconds=draft_seconds, verify_seconds=verify_seconds,
        verify_widths=dict(sorted(widths.items())), predicted_speedup=predicted,
    )


# -- prompts -----------------------------------------------------------------------------------
def default_calibration_texts(count: int = 8, chars: int = 1200) -> list[str]:
    """Chunks of Python stdlib source, present wherever Python is (no data files needed)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    texts = []
    for name in CALIBRATION_MODULES:
        path = root / name
        if path.is_file():
            source = path.read_text(encoding="utf-8", errors="replace")
            start = len(source) // 3  # skip licence headers and imports
            texts.append(source[start : start + chars])
        if len(texts) == count:
            break
    if not texts:
        raise FileNotFoundError(f"no calibration modules found under {root}; pass --prompts FILE")
    return texts


def read_prompt_file(path: str | Path) -> list[str]:
    """A .jsonl file (field question, prompt, text, or the first of turns) or plain text, one prompt a line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"prompt file {str(path)!r} does not exist")
    texts: list[str] = []
    if path.suffix == ".jsonl":
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            record = json.loads(line)
            for key in ("prompt", "question", "text"):
                if isinstance(record.get(key), str):
                    texts.append(record[key])
                    break
            else:
                if isinstance(record.get("turns"), list) and record["turns"]:
                    texts.append(str(record["turns"][0]))
                else:
                    raise ValueError(f"{path}:{number}: no 'prompt', 'question', 'text' or 'turns' field")
    else:
        texts = [line.replace("\\n", "\n") for line in path.read_text().splitlines() if line.strip()]
    if not texts:
        raise ValueError(f"prompt file {str(path)!r} holds no prompts")
    return texts


def encode_prompts(texts: list[str], tokenizer: Any, max_tokens: int) -> list[list[int]]:
    if tokenizer is None:
        raise ValueError("text prompts need a tokenizer: give a model directory with a tokenizer, or token ids")
    prompts = []
    for text in texts:
        ids = list(tokenizer(text)["input_ids"])[-max_tokens:]
        if ids:
            prompts.append(ids)
    return prompts


def _prompts_digest(prompts: list[list[int]]) -> str:
    return hashlib.sha256(json.dumps(prompts).encode()).hexdigest()[:16]


# -- cache -------------------------------------------------------------------------------------
def _mask_key(mask: tuple[int, ...]) -> str:
    return "".join(str(b) for b in mask)


def _load_cache(path: Path | None, header: dict) -> dict:
    if path is None or not path.is_file():
        return {**header, "evaluations": {}, "history": []}
    data = json.loads(path.read_text())
    if data.get("format") != CACHE_FORMAT:
        raise ValueError(f"{str(path)!r} is not a layer-skip search cache")
    for key in ("model_fingerprint", "settings", "prompts_digest", "ranking_digest"):
        if data.get(key) != header.get(key):
            raise ValueError(f"search cache {str(path)!r} was made with a different {key.replace('_', ' ')} "
                             f"({data.get(key)!r} vs {header.get(key)!r}); its timings are not comparable. "
                             "Use another --cache file or delete this one.")
    return data


def _save_cache(path: Path | None, data: dict) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def machine_info() -> dict:
    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "torch": torch.__version__, "torch_threads": torch.get_num_threads()}


# -- search ------------------------------------------------------------------------------------
def _params_to_mask(params: dict[str, float], keys: list[str]) -> tuple[int, ...]:
    return tuple(int(float(params[k]) > 0.5) for k in keys)


def _mask_to_params(mask: tuple[int, ...], keys: list[str]) -> dict[str, float]:
    return {k: (0.75 if bit else 0.25) for k, bit in zip(keys, mask)}


def _light_ucb() -> Any:
    """The paper's acquisition (UCB, kappa 2.576) with 3 L-BFGS-B restarts instead of 10: the objective is
    piecewise constant in the continuous encoding, so extra local polishing buys little, and on a busy
    CPU it made single suggestions take tens of seconds."""
    from bayes_opt.acquisition import UpperConfidenceBound

    class LightUCB(UpperConfidenceBound):
        def suggest(self, gp, target_space, n_random=10_000, n_smart=3, fit_gp=True, random_state=None):
            return super().suggest(gp, target_space, n_random=n_random, n_smart=n_smart, fit_gp=fit_gp,
                                   random_state=random_state)

    return LightUCB(kappa=2.576)


@contextmanager
def _single_threaded_blas() -> Iterator[None]:
    """numpy/scipy's BLAS threads oversubscribe a shared CPU during GP fits; one thread is faster there."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(limits=1):
        yield


def seed_masks(layers: int) -> list[tuple[int, ...]]:
    """Paper-style warm start: attention of the second half of the layers skipped, no MLP."""
    attention = tuple(range(layers // 2, layers))
    return [SkipSet(attention=attention).to_mask(layers)]


def search_skip_set(
    model: Any,
    prompts: list[list[int]],
    iterations: int = 100,
    *,
    settings: SearchSettings | None = None,
    cache_path: str | Path | None = None,
    out_path: str | Path | None = None,
    init_points: int = 5,
    retime_top: int = 3,
    retime_repeats: int = 3,
    seed: int = 1,
    progress: bool = True,
    prompts_description: str = "",
    time_budget: float | None = None,
    ranking: list[int] | None = None,
    vocab_sizes: tuple[int, ...] = (),
) -> SearchResult:
    """Search a skip set for `model`; resumes from `cache_path` and writes `out_path` when given.

    `iterations` counts suggestions in total (including ones replayed from the cache), each either
    timed (a new mask) or answered from the cache (a mask already timed). `time_budget` (seconds) stops
    the suggestions early; the re-timing and the result file follow either way.

    `ranking` (token ids, most frequent first; needed when settings.draft_vocab > 0) is written to the
    result file; `vocab_sizes` are draft vocabularies tried for the winner at the end (0 = full), and
    the best by the objective on the calibration prompts becomes the file's recommended `draft_vocab`.
    """
    from bayes_opt import BayesianOptimization
    from tqdm.auto import tqdm

    if not prompts:
        raise ValueError("the search needs at least one calibration prompt")
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    settings = settings or SearchSettings()
    if settings.draft_weights is None:  # resolved here, so the cache records what was timed
        settings = settings.model_copy(update={"draft_weights": default_weight_format(model)})
    layers = count_layers(model)
    keys = [f"a{i:03d}" for i in range(layers)] + [f"m{i:03d}" for i in range(layers)]
    cache_file = Path(cache_path) if cache_path is not None else None
    if (settings.draft_vocab or any(vocab_sizes)) and not ranking:
        raise ValueError("a reduced draft vocabulary needs a token ranking")
    header = {"format": CACHE_FORMAT, "model_fingerprint": model_fingerprint(model), "num_layers": layers,
              "settings": settings.model_dump(), "prompts_digest": _prompts_digest(prompts)}
    if ranking:
        header["ranking_digest"] = _prompts_digest([list(ranking)])
    cache = _load_cache(cache_file, header)
    cache.setdefault("machine", machine_info())
    evaluations: dict[str, dict] = cache["evaluations"]
    history: list[dict] = cache["history"]

    optimizer = BayesianOptimization(f=None, pbounds={k: (0.0, 1.0) for k in keys}, random_state=seed, verbose=0,
                                     allow_duplicate_points=True, acquisition_function=_light_ucb())
    optimizer.set_gp_params(alpha=1e-2)  # the paper's setting: absorbs timing noise
    for entry in history:
        optimizer.register(params=dict(zip(keys, entry["params"])), target=entry["target"])

    sizes = sorted({settings.draft_vocab, *vocab_sizes})
    cost_model: CostModel | None = None
    if settings.objective == "cost":
        if "cost_model" not in cache:
            rankings = {n: (list(ranking[:n]) if n and ranking else []) for n in sizes}
            rankings = {settings.draft_vocab: rankings.pop(settings.draft_vocab), **rankings}  # searched one first
            measured = measure_cost_model(model, prompts[0], settings.max_draft + 1, rankings,
                                          fast_forward=settings.fast_forward, draft_weights=settings.draft_weights)
            plain = measure(model, prompts, None, settings.model_copy(update={"clock": "cpu"}))
            # engine work per plain step beyond its forward (verifier, bookkeeping), in units
            measured.step_overhead = max(0.0, plain.seconds / plain.steps / measured.unit_seconds - 1.0)
            cache["cost_model"] = asdict(measured)
            _save_cache(cache_file, cache)
        data = dict(cache["cost_model"])
        data["draft_fixed"] = {int(k): v for k, v in data["draft_fixed"].items()}
        cost_model = CostModel(**data)

    def evaluate(skip: SkipSet | None, run_settings: SearchSettings = settings) -> Measurement:
        return measure(model, prompts, skip, run_settings, ranking=ranking, cost_model=cost_model)

    if "baseline" not in cache:
        measure(model, prompts[:1], None, settings)  # warm-up (allocator, kernels, tree check)
        cache["baseline"] = asdict(evaluate(None))
        _save_cache(cache_file, cache)

    queued = [_mask_to_params(m, keys) for m in seed_masks(layers)]
    queued += optimizer.random_sample(max(0, init_points))
    bar = tqdm(total=iterations, initial=min(len(history), iterations), desc="search-layers", disable=not progress)
    loop_started = time.perf_counter()
    try:
        while len(history) < iterations:
            if time_budget is not None and time.perf_counter() - loop_started > time_budget:
                break
            index = len(history)
            started = time.perf_counter()
            if index < len(queued):
                params = queued[index]
            else:
                with _single_threaded_blas():
                    params = optimizer.suggest()
            params = {k: float(params[k]) for k in keys}
            suggested = time.perf_counter()
            mask = _params_to_mask(params, keys)
            key = _mask_key(mask)
            cached = key in evaluations
            if not cached:
                evaluations[key] = asdict(evaluate(SkipSet.from_mask(mask)))
            target = evaluations[key]["tokens_per_second"]
            optimizer.register(params=params, target=target)
            best = max(target, max((h["target"] for h in history), default=target))
            history.append({"iteration": index, "params": [params[k] for k in keys], "mask": key, "target": target,
                            "cached": cached, "best_so_far": best,
                            "suggest_seconds": round(suggested - started, 3),
                            "evaluate_seconds": round(time.perf_counter() - suggested, 3)})
            _save_cache(cache_file, cache)
            bar.update(1)
            bar.set_postfix(best=f"{best:.1f} tok/s", base=f"{cache['baseline']['tokens_per_second']:.1f}")
    finally:
        bar.close()

    # Re-time the best few masks, interleaved with the baseline, and pick by median. With the cost
    # objective the prediction is deterministic, so the timings only check it (the winner stays the
    # best predicted set), timed by this process's CPU time.
    ranked = sorted(evaluations.items(), key=lambda item: -item[1]["tokens_per_second"])[: max(1, retime_top)]
    runs: dict[str, list[Measurement]] = {key: [] for key, _ in ranked}
    baseline_runs: list[Measurement] = []
    timing = settings if cost_model is None else settings.model_copy(update={"clock": "cpu"})
    for _ in range(max(1, retime_repeats)):
        baseline_runs.append(measure(model, prompts, None, timing))
        for key, _ in ranked:
            runs[key].append(measure(model, prompts, SkipSet.from_mask(tuple(int(c) for c in key)), timing,
                                     ranking=ranking))
    baseline = statistics.median(m.tokens_per_second for m in baseline_runs)
    retimed = []
    for key, first in ranked:
        speeds = [m.tokens_per_second for m in runs[key]]
        retimed.append({"mask": key, "skip": SkipSet.from_mask(tuple(int(c) for c in key)).model_dump(),
                        "search_tokens_per_second": first["tokens_per_second"],
                        "tokens_per_second_median": statistics.median(speeds), "tokens_per_second_runs": speeds,
                        "speedup_median": statistics.median(m.tokens_per_second / b.tokens_per_second
                                                            for m, b in zip(runs[key], baseline_runs)),
                        "predicted_speedup": first.get("predicted_speedup", 0.0),
                        "wall_tokens_per_second_runs": [m.wall_tokens_per_second for m in runs[key]],
                        "cpu_tokens_per_second_runs": [m.cpu_tokens_per_second for m in runs[key]],
                        "tau": runs[key][-1].tau, "acceptance": runs[key][-1].acceptance})
    if cost_model is None:
        retimed.sort(key=lambda r: -r["tokens_per_second_median"])
    cache["retimed"] = retimed
    cache["retimed_baseline_tokens_per_second"] = [m.tokens_per_second for m in baseline_runs]
    _save_cache(cache_file, cache)

    winner = retimed[0]
    skip = SkipSet.from_mask(tuple(int(c) for c in winner["mask"]))
    # Draft vocabulary for the winner: the best of `sizes` by the objective on the calibration prompts.
    vocab_results = {}
    for size in sizes:
        vocab_results[size] = asdict(evaluate(skip, settings.model_copy(update={"draft_vocab": size})))
    best_vocab = max(sizes, key=lambda n: vocab_results[n]["tokens_per_second"]) if ranking else 0
    cache["vocab_sweep"] = {str(n): r for n, r in vocab_results.items()}
    _save_cache(cache_file, cache)
    result = SearchResult(skip=skip, tokens_per_second=winner["tokens_per_second_median"],
                          baseline_tokens_per_second=baseline,
                          speedup=winner["speedup_median"],
                          history=history, retimed=retimed, draft_vocab=best_vocab,
                          predicted_speedup=winner["predicted_speedup"])
    if out_path is not None:
        metadata = {
            "found_by": "specdec search-layers (Bayesian optimisation of measured greedy tokens/s)",
            "iterations": len(history), "distinct_sets_timed": len(evaluations),
            "tokens_per_second": result.tokens_per_second, "baseline_tokens_per_second": baseline,
            "speedup": result.speedup, "tau": winner["tau"], "acceptance": winner["acceptance"],
            "objective": settings.objective, "predicted_speedup": result.predicted_speedup,
            "cost_model": cache.get("cost_model"),
            "vocab_sweep": {str(n): {"objective_tokens_per_second": r["tokens_per_second"],
                                     "predicted_speedup": r["predicted_speedup"], "tau": r["tau"],
                                     "acceptance": r["acceptance"]} for n, r in vocab_results.items()},
            "settings": settings.model_dump(), "prompts": prompts_description or f"{len(prompts)} prompts",
            "prompts_digest": header["prompts_digest"], "machine": machine_info(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        result.out_path = save_skip_set(out_path, skip, model, metadata, token_ranking=ranking,
                                        draft_vocab=best_vocab)
    return result


# -- command line ------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specdec search-layers",
        description="Bayesian search of the attention/MLP blocks to skip for layer-skip self-speculation. "
                    "The objective is measured greedy tokens/s, so run it on the machine you serve from.")
    parser.add_argument("--model", required=True, help='local model directory, or "default" for the bundled model')
    parser.add_argument("--prompts", action="append", default=[], metavar="FILE",
                        help="calibration prompts (.jsonl with prompt/question/text/turns, or text one per line); "
                             "repeatable; default: chunks of Python stdlib source. Do not use evaluation data.")
    parser.add_argument("--num-prompts", type=int, default=8, help="prompts used (taken evenly from each file)")
    parser.add_argument("--prompt-tokens", type=int, default=128, help="keep the last N tokens of each prompt")
    parser.add_argument("--iterations", type=int, default=100, help="total BO iterations (resumed ones count)")
    parser.add_argument("--init-points", type=int, default=5, help="random points before the GP steers")
    parser.add_argument("--time-budget", type=float, default=None, metavar="MINUTES",
                        help="stop suggesting after this long (then re-time and write the result)")
    parser.add_argument("--out", default="layer_skip.json", help="skip-set file to write")
    parser.add_argument("--cache", default=None, help="search cache (default: OUT with .search.json)")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--max-draft", type=int, default=8)
    parser.add_argument("--retime-top", type=int, default=3)
    parser.add_argument("--retime-repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="time the objective by elapsed time, or by this process's CPU time (steadier on a "
                             "shared machine; use with --threads 1)")
    parser.add_argument("--objective", choices=["time", "cost"], default="time",
                        help="time: tokens/s measured for every candidate (the paper); cost: deterministic counts "
                             "priced by a CPU-time cost model measured once (far less noisy on a shared machine)")
    parser.add_argument("--vocab-corpus", choices=["default"], default=None,
                        help="rank tokens by frequency in the bundled default model's training corpus (for a "
                             "reduced draft vocabulary)")
    parser.add_argument("--vocab-files", nargs="*", default=[], metavar="FILE",
                        help="rank tokens by frequency in these text files (training or calibration text)")
    parser.add_argument("--draft-vocab", type=int, default=0,
                        help="draft scores the N most frequent tokens during the search (0 = full vocabulary)")
    parser.add_argument("--vocab-sizes", type=int, nargs="*", default=[],
                        help="draft vocabularies tried for the winner (0 = full); the best on the calibration "
                             "prompts is recorded as the file's default draft_vocab")
    parser.add_argument("--transformers-forward", action="store_true",
                        help="draft through transformers' forward with blocks swapped out, not the lean fused forward")
    parser.add_argument("--draft-weights", choices=["model", "float16", "int8"], default=None,
                        help="weights of the lean draft forward (default: int8 on a CPU with the kernel, else model)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from specdec.api import load_model

    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model(args.model)
    if args.prompts:
        per_file = max(1, args.num_prompts // len(args.prompts))
        texts = []
        for path in args.prompts:
            texts += read_prompt_file(path)[:per_file]
        description = ", ".join(f"{p} (first {per_file})" for p in args.prompts)
    else:
        texts = default_calibration_texts(args.num_prompts)
        description = "Python stdlib source chunks: " + ", ".join(CALIBRATION_MODULES[: len(texts)])
    prompts = encode_prompts(texts[: args.num_prompts], tokenizer, args.prompt_tokens)
    out = Path(args.out)
    cache = Path(args.cache) if args.cache else out.with_suffix(".search.json")
    ranking = None
    if args.vocab_corpus or args.vocab_files:
        from specdec.tools.rank_tokens import ranking_from_texts, ranking_texts

        vocab_texts = ranking_texts(args.vocab_corpus, args.vocab_files)
        ranking = ranking_from_texts(vocab_texts, tokenizer, int(model.get_output_embeddings().weight.shape[0]))
        description += "; token ranking from " + (
            "the default model's training corpus" if args.vocab_corpus else ", ".join(args.vocab_files))
    settings = SearchSettings(max_new_tokens=args.max_new_tokens, max_draft=args.max_draft, clock=args.clock,
                              objective=args.objective, draft_vocab=args.draft_vocab,
                              fast_forward=not args.transformers_forward, draft_weights=args.draft_weights)
    result = search_skip_set(model, prompts, args.iterations, settings=settings, cache_path=cache, out_path=out,
                             init_points=args.init_points, retime_top=args.retime_top,
                             retime_repeats=args.retime_repeats, seed=args.seed, progress=not args.quiet,
                             prompts_description=description, ranking=ranking,
                             vocab_sizes=tuple(args.vocab_sizes),
                             time_budget=None if args.time_budget is None else 60 * args.time_budget)
    print(f"best skip set: {result.skip.describe()}")
    print(f"  {result.tokens_per_second:.1f} tok/s vs plain greedy {result.baseline_tokens_per_second:.1f} tok/s "
          f"(speedup {result.speedup:.2f}x, re-timed median"
          + (f"; cost model predicted {result.predicted_speedup:.2f}x)" if args.objective == "cost" else ")"))
    if ranking is not None:
        print(f"  draft vocabulary: {result.draft_vocab or 'full'} (best on the calibration prompts)")
    print(f"  written to {result.out_path}; search cache {cache}")
    return 0
