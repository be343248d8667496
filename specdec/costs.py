"""What a decoding step costs on the running device, so the goodput controller can weigh a draft's
expected tokens against the time it takes.

Three parts, kept in one `CostModel` per (model, device):

* the verification forward, seconds as a function of the batch and the number of inputs (one root per
  row plus draft nodes and extra slots). Measured at first use (a few dozen forwards per batch-size
  bucket, seconds in all) because the curve is not linear on real hardware: on a CPU through MKL, 2
  inputs cost ~1.4x one input while 3 to 8 cost about the same as 2; through oneDNN (`specdec.cpu_linear`)
  1 to 6 cost about the same. Every real step is compared with the curve;
  a persistent drift rescales it and, past a limit, re-measures it at the next call.
* each drafter's own cost per step (seconds = base + per level + per node), learnt online from the
  time of its `propose` calls, by exponentially weighted least squares.
* the engine's other per-step work (verifier, commit, bookkeeping), a running mean per drafter of the
  call and per kind of step (plain, or verifying a draft).

It also keeps pooled acceptance estimates per drafter (`specdec.acceptance`), the prior for new rows.

Where it lives: `cost_model_for(model)` keeps one per model object in a WeakKeyDictionary (never on
the model itself: the user's model is not modified), or the caller passes one to `generate`. Issue 20
will move this to the place that owns per-model runtime state; everything reads it through this object.

Determinism: `CostModel.table()` is what live decisions read. Where the output may depend on decisions (a seeded
sampled call) they read nominal costs instead, the same in every process (`specdec.nominal_costs`); `snapshot()`
gives a frozen copy (`row_forward_seconds`).
"""

from __future__ import annotations

import copy
import math
import platform
import statistics
import time
import weakref
from bisect import bisect_right
from collections.abc import Callable, Container, Hashable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

T = TypeVar("T")

#: Inputs beyond one per row at which the verification forward is timed (then interpolated).
EXTRA_GRID = (0, 1, 2, 3, 4, 8, 16, 32, 64, 128, 256)
#: The two cached-prefix lengths per row the verification forward is timed behind (costs in between are
#: interpolated, beyond extrapolated up to twice as far); the long one within the model's positions and
#: at most LONG_TOKENS over the batch, so measuring a batch-16 bucket prefills 4096 tokens, not 8192.
SHORT_CONTEXT = 32
LONG_CONTEXT = 512
LONG_TOKENS = 4096
#: Drift beyond this factor (observed / measured, smoothed) at the end of a call re-measures the curves
#: at the next one; smaller drifts are absorbed by the smoothed scale and per-width corrections.
REMEASURE_DRIFT = 2.0
#: Per-width corrections are kept per band of context (`context_band`): each band spans CONTEXT_BAND_RATIO times the
#: context of the one below, from SHORT_CONTEXT up; a last band holds everything longer.
CONTEXT_BAND_RATIO = 4
CONTEXT_BANDS = 4
#: How far one real forward's time moves the verify costs (`CostModel.observe_verify`), in log steps of its ratio to
#: the price: a curve's level (per bucket and context band) at LEVEL_RATE from a step of any width, the corrections
#: of the grid points around its width at POINT_RATE. One rate of 0.25 per grid point made each point an average of
#: its few last steps (~15% apart between repeats here), and adjacent points (1 to 4 extra inputs) read 3-5 ms
#: apart in a sweep where timing every width shows ~0.5 ms per input: a width choice read that noise. A shared level
#: takes the common part of the noise, which moves every width alike and so never a width choice.
LEVEL_RATE = 0.2
POINT_RATE = 0.05
#: A drafter's cost is fitted on `draft_features`: [1, levels, nodes, lag, nodes * context / CONTEXT_UNIT].
DRAFT_FEATURES = 5
#: The fit's ridge per feature (`LinearFit`): per node, a prior worth a few batch drafts that a draft's time goes per
#: forward (level), not per row in it. At batch 1 a chain's levels equal its nodes, so its drafts cannot tell the two
#: apart and the ridge alone splits them: equally, with one small ridge for all, so a batch of 4 priced a 3-token
#: draft of the bundled draft at 2-3x what it took (15.3-30.7 ms against 8.0-11.0 ms; 8 rows: 2-3.3x), no draft
#: paid, and the controller never drafted the batch that would have corrected it (constant 3-token drafts ran
#: 1.11-1.16x of batched plain decoding there, the controller 0.96x); and the first few batch drafts, noisy (one
#: catch-up cost twice another), then set the split alone. A small model's forward is mostly its weights on a CPU
#: (~85% per level here) and more so on a GPU; a batch's drafts, where nodes outnumber levels, move the split as they
#: come. The per-node context term gets a little ridge too, so that a batch's per-row cost seen at one context lands on
#: the nodes, not on a context slope it cannot show; across contexts (a few dozen drafts at batch 1) the slope is
#: learnt as before. The constant gets a ridge too (stop 66): a drafter that always drafts chains of about one length
#: (layer_skip's 10-12 levels in repetitive answers) cannot tell a fixed part from a per-level one, and the machine's
#: drift set it: a sweep's fit read 16.6 ms fixed and 2.5 ms a level where its drafts took ~5 ms a level and nothing
#: fixed, priced a one-node probe at twice a plain step and its wait at 200-260 steps, longer than a request. (What
#: kept whole requests plain was the catch-up term priced over a new row's prompt, since stop 67 not priced for a
#: drafter that has none: `Drafter.catches_up`, benchmarks/results/goodput/checks_s67.) A fixed part the data shows
#: (a draft model's ~1 ms of host work between chains of 1-8 levels) is still learnt, a little shrunk.
DRAFT_RIDGE = (10.0, 1e-4, 30.0, 1e-4, 1.0)
CONTEXT_UNIT = 1024.0
#: Free looks (a drafter proposing all it can, `specdec.controller`) whose seconds are kept per drafter.
LOOK_SAMPLES = 5


def draft_features(levels: float, nodes: float, lag: float = 0.0, context: float | None = None) -> list[float]:
    """What a drafter's propose costs is fitted on: a constant, per tree level, per node, per token of
    catch-up (a draft model feeds what was committed since it last drafted), and per node per token of
    context (a draft that attends over the row's cache, as layer_skip's and a draft model's do, costs
    more per node behind a long document: fitted without it, costs learnt on 1000-token RAG prompts
    shortened the drafts of the short prompts that followed)."""
    return [1.0, float(levels), float(nodes), float(lag), float(nodes) * float(context or 0.0) / CONTEXT_UNIT]


def context_band(context: float | None) -> int:
    """The band of cached context a per-width correction is kept for (0: up to CONTEXT_BAND_RATIO x SHORT_CONTEXT
    tokens, or unknown). One correction for every context absorbed what the curve's context line misses behind long
    prompts into the prices of short ones: with the bundled target in bfloat16 on this CPU (before
    `specdec.attention.lone_query`) a plain step behind a 1000-token document cost ~20% more than the line through
    the two measured contexts said; RAG rows, plain on most steps, raised the plain step's correction to ~1.15
    while short rows' drafted steps lowered theirs, so short rows priced a plain step 25% above a 2-input one and
    cut anpd's chains to 2-3 tokens. (In float32 the bands' plain corrections come out alike, 0.90-0.95.)"""
    if context is None or context <= SHORT_CONTEXT:
        return 0
    return min(CONTEXT_BANDS - 1, int(math.log(context / SHORT_CONTEXT, CONTEXT_BAND_RATIO) + 1e-9))


def cost_clock(device: torch.device | str) -> Callable[[], float]:
    """The clock costs are measured with. On a CPU with one torch thread: this process's CPU time, which
    other jobs on a shared machine do not inflate (a forward's wall time there can double for no reason
    of its own, and decisions follow cost *ratios*); elsewhere wall time (on CUDA after a synchronise)."""
    if torch.device(device).type == "cpu" and torch.get_num_threads() == 1:
        return time.process_time
    return time.perf_counter


def device_key(device: torch.device | str) -> str:
    """'cuda:<name>' or 'cpu:<processor> x<threads>': costs measured on one never price another."""
    device = torch.device(device)
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    if device.type == "cpu":
        name = ""
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        return f"cpu:{name or platform.processor() or platform.machine()} x{torch.get_num_threads()}"
    return f"{device.type}:{device}"


@dataclass(frozen=True)
class VerifyCurve:
    """Seconds of one verification forward at `batch` rows, by inputs beyond one per row, measured
    behind a cached prefix of `context` tokens per row and, when `long_seconds` is given, again behind
    `long_context` tokens: the inputs attend over the whole cache, so a draft's extra inputs cost more
    behind a 1000-token document than behind a 40-token question (on this CPU 8 extra inputs cost
    1.6x a plain step at 40 tokens, 1.8x at 1000)."""

    batch: int
    extras: tuple[int, ...]
    seconds: tuple[float, ...]
    context: int = 0
    long_context: int = 0
    long_seconds: tuple[float, ...] = ()

    def at(self, extra: float, context: float | None = None) -> float:
        """Interpolated in the inputs (see `_along`) and, given a context, linearly in the context
        between the two measured ones (extrapolated up to twice the long one's distance)."""
        short = _along(self.extras, self.seconds, extra)
        if context is None or not self.long_seconds or self.long_context <= self.context:
            return short
        share = min(2.0, max(0.0, (context - self.context) / (self.long_context - self.context)))
        return short + share * (_along(self.extras, self.long_seconds, extra) - short)


@dataclass
class _CurveTerms:
    """One curve's part of `CostTable.verify` at integer extra inputs e: weight * correction(e) * (short(e) +
    share(context) * (long(e) - short(e))), split as base[e] + share * slope[e]. The uncorrected values, the
    corrections learnt at the curve's grid points and which of them each e's correction reads (`correction_sources`)
    are kept, so a correction learnt anew at a known grid point is applied in place (`correct`)."""

    weight: float
    curve: VerifyCurve
    base: list[float]
    slope: list[float]
    short: list[float]  # short(e), uncorrected
    rise: list[float]  # long(e) - short(e), uncorrected (0 without a long measurement)
    factors: dict[int, float]  # grid point -> the correction learnt there
    sources: list[tuple[int, int, float]]  # e's `correction_sources`
    readers: dict[int, list[int]]  # grid point -> the e whose correction reads it

    @classmethod
    def of(cls, weight: float, curve: VerifyCurve, size: int, factors: dict[int, float]) -> _CurveTerms:
        long_known = bool(curve.long_seconds) and curve.long_context > curve.context
        short = [_along(curve.extras, curve.seconds, extra) for extra in range(size)]
        rise = [_along(curve.extras, curve.long_seconds, extra) - s for extra, s in enumerate(short)] if long_known \
            else [0.0] * size
        sources = [correction_sources(curve.extras, factors, extra) for extra in range(size)]
        readers: dict[int, list[int]] = {}
        for extra, (low, high, _) in enumerate(sources):
            for point in {low, high} - {-1}:
                readers.setdefault(point, []).append(extra)
        terms = cls(weight, curve, [0.0] * size, [0.0] * size, short, rise, dict(factors), sources, readers)
        for extra in range(size):
            terms._apply(extra)
        return terms

    def _apply(self, extra: int) -> None:
        factor = _blend(self.factors, self.sources[extra])
        self.base[extra] = factor * self.short[extra]
        self.slope[extra] = factor * self.rise[extra]

    def correct(self, point: int, factor: float) -> bool:
        """The correction at grid point `point` is now `factor`; False when none was learnt there before (which
        widths read which points then changes: the caller rebuilds the terms)."""
        if point not in self.factors:
            return False
        self.factors[point] = factor
        for extra in self.readers.get(point, ()):
            self._apply(extra)
        return True

    def share(self, context: float | None) -> float:
        curve = self.curve
        if context is None or not curve.long_seconds or curve.long_context <= curve.context:
            return 0.0
        return min(2.0, max(0.0, (context - curve.context) / (curve.long_context - curve.context)))


def correction_sources(grid: tuple[int, ...], learnt: Container[int], extra: float) -> tuple[int, int, float]:
    """Which grid points' corrections price `extra` inputs: (low, high, weight of high). Linear between the nearest
    learnt points on either side of `extra` (the one alone at a learnt grid point, the nearest one alone past either
    end); (-1, -1, 0.0) where none was learnt (no correction). A width between grid points is priced, and teaches
    (`CostModel.observe_verify`), both of its neighbours: read from the nearest one alone, the corrections' noise put
    steps into the curve between grid points (a RAG row's 7-node chain priced 6.6 ms above its 6-node one, a third of
    a step, where timing every width shows ~0.5 ms), and the exit stopped layer_skip's chains there all accepted. A
    width no step has used yet reads its neighbours too: with a correction of 1.0 there instead, a batch of 8 that
    learnt 1.24 for its plain steps and 1.06-1.07 for 4 to 8 extra inputs priced 1 to 3 extra inputs 8-14% below a
    plain step."""
    low, high = bracket(grid, extra)
    below = max((p for p in range(low + 1) if p in learnt), default=-1)
    above = min((p for p in range(high, len(grid)) if p in learnt), default=-1)
    if below < 0 or above < 0 or below == above:
        return (above, above, 0.0) if below < 0 else (below, below, 0.0)
    return below, above, (extra - grid[below]) / (grid[above] - grid[below])


def _blend(factors: dict[int, float], sources: tuple[int, int, float]) -> float:
    low, high, weight = sources
    if low < 0:
        return 1.0
    return (1.0 - weight) * factors[low] + weight * factors[high]


def _along(xs: tuple[int, ...], ys: tuple[float, ...], extra: float) -> float:
    """Piecewise linear; past the last point, the last segment's slope (never below flat)."""
    if extra <= xs[0]:
        return ys[0]
    index = bisect_right(xs, extra) - 1
    if index >= len(xs) - 1:
        slope = max(0.0, (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])) if len(xs) > 1 else 0.0
        return ys[-1] + slope * (extra - xs[-1])
    x0, x1, y0, y1 = xs[index], xs[index + 1], ys[index], ys[index + 1]
    return y0 + (y1 - y0) * (extra - x0) / (x1 - x0)


class LinearFit:
    """Exponentially weighted least squares, seconds ~ w . features, from decayed sufficient statistics
    with a small ridge: stable however little the features vary (recursive least squares with forgetting
    blows up along directions a drafter never explores, e.g. levels == nodes at batch 1, and then
    predicts nonsense). Along such a direction the ridge alone decides how the cost is split between the
    features: `ridge` per feature (a number: the same for all) puts it where the ridge is smallest
    (`DRAFT_RIDGE`). An unseen drafter costs nothing until measured. A few features, solved per update."""

    def __init__(self, size: int, forgetting: float = 0.97, ridge: float | tuple[float, ...] = 1e-4) -> None:
        self.size = size
        self.forgetting = forgetting
        self.ridge = np.diag(np.broadcast_to(np.asarray(ridge, dtype=np.float64), (size,)))
        self.xx = np.zeros((size, size))
        self.xy = np.zeros(size)
        self._weights: list[float] | None = [0.0] * size  # None: stale, solved at the next read
        self.samples = 0

    @property
    def weights(self) -> list[float]:
        """Solved when read, not per update: the fast paths only update (a solve per step cost more than
        a free drafter's whole look)."""
        if self._weights is None:
            solved = np.linalg.solve(self.xx + self.ridge, self.xy)
            self._weights = [float(w) for w in solved]
        return self._weights

    def predict(self, features: Iterable[float]) -> float:
        return max(0.0, sum(w * x for w, x in zip(self.weights, features)))

    def mean(self) -> float | None:
        """The decayed mean of the targets seen (the first feature is the constant 1), None before any."""
        return float(self.xy[0] / self.xx[0, 0]) if self.samples else None

    def update(self, features: list[float], target: float) -> None:
        x = np.asarray(features, dtype=np.float64)
        self.xx = self.forgetting * self.xx + np.outer(x, x)
        self.xy = self.forgetting * self.xy + x * target
        self.samples += 1
        self._weights = None


@dataclass
class CostTable:
    """Everything a decision reads. The live one is updated in place; `CostModel.snapshot()` copies it."""

    curves: dict[tuple[bool, int], VerifyCurve] = field(default_factory=dict)  # (packed, batch bucket)
    scale: dict[bool, float] = field(default_factory=dict)  # observed / measured, smoothed, per packing
    # What the scale leaves, per (packed, bucket, grid point, `context_band`): e.g. trees cost more than the
    # chains measured.
    corrections: dict[tuple[bool, int, int, int], float] = field(default_factory=dict)
    # The level every width of a curve shares, per (packed, bucket, band), times the corrections (LEVEL_RATE).
    levels: dict[tuple[bool, int, int], float] = field(default_factory=dict)
    drafters: dict[str, LinearFit] = field(default_factory=dict)  # seconds ~ draft_features(...)
    # Engine seconds per step outside draft and verify, a running mean per drafter of the call (its own
    # `observe` is part of it; one mean for all let a draft model's bookkeeping price anpd's steps) and per
    # kind of step: one that verified a draft does more (the cut, the verifier over the nodes, committing
    # several tokens, the drafter's bookkeeping) than a plain one: at batch 16 on this CPU ~1.9 ms against
    # ~0.8 ms, 5% of a 21 ms step, which a draft promising a few percent more than a plain step did not pay.
    overheads: dict[tuple[str, bool], float] = field(default_factory=dict)  # (drafter, drafted) -> seconds
    overhead_samples: dict[tuple[str, bool], int] = field(default_factory=dict)
    acceptance: dict[str, Any] = field(default_factory=dict)  # pooled acceptance per drafter (priors)
    extras: dict[str, tuple[float, float]] = field(default_factory=dict)  # extra slots (root, per node) per drafter
    looks: dict[str, list[float]] = field(default_factory=dict)  # seconds of the drafter's last free looks
    # Per drafter: its last probes that failed in a row (the row stayed plain), across calls (live calls only).
    probe_streaks: dict[str, int] = field(default_factory=dict)
    # Per (the call's drafter, batch bucket, static batch): the next rest a live batch takes from its free drafter
    # when its looks lose (`GoodputController._judge_looks`), across calls: on this CPU anpd's looks lose in every
    # static batch of 8, and each call learning that again from the first rest spent ~16 of its 64 steps looking
    # (while prompts wait to join, the same batch size's looks paid).
    batch_rests: dict[tuple[str, int, bool], int] = field(default_factory=dict)
    # Per (the call's drafter, batch bucket): the steps by which the accepted tokens of its static batches moved
    # their ends, and the steps the cut's weights said they would, decayed sums over calls
    # (`GoodputController._learn_static_worth`).
    static_worth: dict[tuple[str, int], tuple[float, float]] = field(default_factory=dict)
    # A drafter's one-off work when first asked to draft a row (`Drafter.prepare`: a draft model's prefill):
    # seconds ~ [1, tokens fed / CONTEXT_UNIT] (a fixed part, ~1 ms for a small draft on this CPU, and per token).
    prepares: dict[str, LinearFit] = field(default_factory=dict)
    # `verify_from`'s per-(packing, batch, context band) terms: emptied by `changed()` whenever curves move, a
    # correction learnt anew applied in place (`corrected`); the scale and levels are applied when they are read.
    _terms: dict[tuple[bool, int, int], list[_CurveTerms]] = field(default_factory=dict, repr=False, compare=False)

    def overhead(self, drafter: str, drafted: bool = True) -> float:
        """Engine seconds of a step outside draft and verify in calls of `drafter`, for a step that verifies
        a draft (`drafted`) or a plain one; before either kind was seen, the other kind's (0 before any)."""
        seconds = self.overheads.get((drafter, drafted))
        return seconds if seconds is not None else self.overheads.get((drafter, not drafted), 0.0)

    def changed(self) -> None:
        """Curves were modified: forget what `verify_from` derived from them."""
        self._terms.clear()

    def corrected(self, key: tuple[bool, int, int, int]) -> None:
        """The correction at `key` (packed, bucket, grid point, band) was learnt anew: the terms `verify_from` keeps
        for that packing and band take it in place (rebuilding them all after every learning step cost ~0.1 ms
        of Python a time on this CPU, ~2% of a small model's step at batch 1)."""
        packed, bucket, point, band = key
        factor = self.corrections[key]
        rebuild = set()
        for terms_key, terms in self._terms.items():
            if terms_key[0] == packed and terms_key[2] == band:
                for term in terms:
                    if term.curve.batch == bucket and not term.correct(point, factor):
                        rebuild.add(terms_key)  # a point learnt for the first time: widths read anew
        for terms_key in rebuild:
            del self._terms[terms_key]

    def level(self, packed: bool, bucket: int, band: int) -> float:
        """The level learnt for every width of the `bucket` curve behind contexts in `band` (1.0 before any)."""
        return self.levels.get((packed, bucket, band), 1.0)

    def verify(self, batch: int, inputs: float, packed: bool = True, context: float | None = None) -> float:
        """Seconds of a verification forward of `inputs` inputs over `batch` rows whose caches hold
        `context` tokens on average (None: the short measured context), interpolated in batch between
        the measured power-of-two buckets. One row is one computation whatever the batch mode."""
        packed = packed or batch <= 1
        low, high = _buckets(batch)
        extra = max(0.0, inputs - batch)
        scale = self.scale.get(packed, 1.0)
        band = context_band(context)
        low_curve, high_curve = self.curves.get((packed, low)), self.curves.get((packed, high))
        if low_curve is None or high_curve is None:
            curve = low_curve or high_curve or next(iter(self.curves.values()), None)
            return 0.0 if curve is None else scale * self._priced(packed, curve, extra, context, band)
        low_seconds = self._priced(packed, low_curve, extra, context, band)
        if low == high:
            return scale * low_seconds
        share = (batch - low) / (high - low)
        return scale * ((1 - share) * low_seconds + share * self._priced(packed, high_curve, extra, context, band))

    def _priced(self, packed: bool, curve: VerifyCurve, extra: float, context: float | None, band: int) -> float:
        """One curve's seconds at `extra` inputs behind `context`, times its level and correction (no scale)."""
        level = self.level(packed, curve.batch, band)
        return curve.at(extra, context) * level * self.correction(packed, curve, extra, band)

    def verify_from(self, batch: int, first: int, count: int, packed: bool = True,
                    context: float | None = None) -> list[float]:
        """`verify(batch, first + k, packed, context)` for k = 0..count-1, in one call: the controller prices
        every prefix of every draft each step (a call per prefix cost ~1.5 ms a step at batch 16 on this
        CPU). Equal to `verify` up to rounding."""
        packed = packed or batch <= 1
        offset = first - batch  # extra inputs at k = 0
        band = context_band(context)
        terms = self._curve_terms(packed, batch, max(0, offset + count - 1), band)
        scale = self.scale.get(packed, 1.0)
        out = [0.0] * count
        for term in terms:
            weight = scale * term.weight * self.level(packed, term.curve.batch, band)
            share, base, slope = term.share(context), term.base, term.slope
            for k in range(count):
                extra = offset + k if offset + k > 0 else 0
                out[k] += weight * (base[extra] + share * slope[extra])
        return out

    def _curve_terms(self, packed: bool, batch: int, upto: int, band: int) -> list[_CurveTerms]:
        """The curves `verify` reads for this batch, with their weights and per-extra-input values (corrected for
        contexts in `band`)."""
        key = (packed, batch, band)
        terms = self._terms.get(key)
        if terms is not None and all(len(t.base) > upto for t in terms):
            return terms
        size = max(upto + 1, 2 * len(terms[0].base) if terms else 33)
        low, high = _buckets(batch)
        low_curve, high_curve = self.curves.get((packed, low)), self.curves.get((packed, high))
        if low_curve is None or high_curve is None:
            curve = low_curve or high_curve or next(iter(self.curves.values()), None)
            weighted = [] if curve is None else [(1.0, curve)]
        elif low == high:
            weighted = [(1.0, low_curve)]
        else:
            share = (batch - low) / (high - low)
            weighted = [(1 - share, low_curve), (share, high_curve)]
        terms = [_CurveTerms.of(weight, curve, size, self._learnt(packed, curve, band)) for weight, curve in weighted]
        self._terms[key] = terms
        return terms

    def correction(self, packed: bool, curve: VerifyCurve, extra: float, band: int) -> float:
        """The correction of `extra` inputs on `curve` (`correction_sources`)."""
        if not self.corrections:
            return 1.0
        low, high = bracket(curve.extras, extra)
        known = self.corrections.get((packed, curve.batch, low, band)) if low == high else None
        if known is not None:
            return known
        learnt = self._learnt(packed, curve, band)
        return _blend(learnt, correction_sources(curve.extras, learnt, extra))

    def _learnt(self, packed: bool, curve: VerifyCurve, band: int) -> dict[int, float]:
        """Grid point -> the correction learnt there, for `curve` behind contexts in `band`."""
        corrections = self.corrections
        return {point: corrections[key] for point in range(len(curve.extras))
                if (key := (packed, curve.batch, point, band)) in corrections}

    def draft(self, name: str, levels: float, nodes: float, lag: float = 0.0, context: float | None = None) -> float:
        """Seconds of a drafter's propose that drafts `nodes` nodes over `levels` tree levels (0: nothing),
        for rows that committed `lag` tokens since it last drafted them (a draft model feeds them first),
        behind `context` tokens of cache (`draft_features`)."""
        if nodes <= 0:
            return 0.0
        constant, per_level, per_node, per_lag = self.draft_line(name, context)
        return max(0.0, constant + per_level * levels + per_node * nodes + per_lag * lag)

    def draft_line(self, name: str, context: float | None = None) -> tuple[float, float, float, float]:
        """The drafter's fitted seconds (constant, per level, per node behind `context` tokens, per lag
        token); zeros before its first draft (an unseen drafter costs nothing until measured). For pricing
        many sizes without a call per size."""
        fit = self.drafters.get(name)
        if fit is None:
            return (0.0, 0.0, 0.0, 0.0)
        constant, per_level, per_node, per_lag, per_node_context = fit.weights
        return constant, per_level, per_node + per_node_context * float(context or 0.0) / CONTEXT_UNIT, per_lag

    def draft_chain(self, name: str, count: int, lag: float = 0.0, context: float | None = None) -> list[float]:
        """`draft(name, k, k, lag, context)` for k = 0..count-1 (chains of k nodes), the fit read once."""
        constant, per_level, per_node, per_lag = self.draft_line(name, context)
        return [0.0] + [max(0.0, constant + (per_level + per_node) * k + per_lag * lag) for k in range(1, count)]

    def draft_mean(self, name: str) -> float | None:
        """Seconds of the drafter's drafts so far (decayed mean over whatever sizes it drafted), None
        before its first: what a step of it costs as it is used, without extrapolating the fit."""
        fit = self.drafters.get(name)
        return None if fit is None else fit.mean()

    def look_cost(self, name: str) -> float | None:
        """Median seconds of the drafter's last LOOK_SAMPLES free looks (None before any): what proposing
        all it can costs, read without extrapolating the fit, and robust to one slow step."""
        looks = self.looks.get(name)
        return statistics.median_high(looks) if looks else None

    def prepare(self, name: str, tokens: float) -> float:
        """Seconds of the drafter's one-off work before it first drafts a row holding `tokens` tokens (0 before
        it was seen: a drafter without such work, or one not measured yet)."""
        fit = self.prepares.get(name)
        return 0.0 if fit is None or tokens <= 0 else fit.predict((1.0, tokens / CONTEXT_UNIT))

    def has_curves(self, packed: bool, batches: Iterable[int]) -> bool:
        return all((packed, bucket) in self.curves for b in batches for bucket in _buckets(b))


def bracket(grid: tuple[int, ...], value: float) -> tuple[int, int]:
    """Indices of the grid points on either side of `value` (the same one at a grid point or past either end)."""
    index = bisect_right(grid, value)
    if index == 0:
        return 0, 0
    if index >= len(grid) or grid[index - 1] == value:
        return index - 1, index - 1
    return index - 1, index


def batch_bucket(batch: int) -> int:
    """The power of two at or below `batch`: what costs and lessons learnt at one batch size are kept under."""
    return _buckets(batch)[0]


def _buckets(batch: int) -> tuple[int, int]:
    """The powers of two around `batch` (equal when it is one)."""
    batch = max(1, int(batch))
    low = 1 << (batch.bit_length() - 1)
    return low, (low if low == batch else low * 2)


class CostModel:
    """Step costs of one model on one device (see the module docstring). Thread-unsafe by design: one
    generate call at a time per model, as the engine already assumes."""

    def __init__(self, device: str = "", rounds: int = 3) -> None:
        self.device = device
        self.rounds = rounds
        self.live = CostTable()
        self.stale: set[bool] = set()  # packings whose curves drifted past REMEASURE_DRIFT
        self.measure_seconds = 0.0  # wall time spent measuring, for the stats
        self.settled: dict[Hashable, Any] = {}  # see `settle`

    # -- reading -------------------------------------------------------------------------------
    def table(self) -> CostTable:
        return self.live

    def snapshot(self) -> CostTable:
        """A frozen copy: decisions made from it do not move with this call's timings."""
        return copy.deepcopy(self.live)

    def settle(self, key: Hashable, decide: Callable[[], T]) -> T:
        """A choice derived from this model's costs, made at its first use and kept with the model: every later
        call on this model and device reads the same one, whatever later timings say. For choices that change
        what a drafter proposes (ppd_draft_model's inner loop), so that repeated seeded calls draw alike (the
        determinism rule, docs/design.md); another process measures, and may settle, anew."""
        if key not in self.settled:
            self.settled[key] = decide()
        return self.settled[key]

    # -- measuring -----------------------------------------------------------------------------
    def ensure(self, model: Any, batches: Iterable[int], packed: bool, padded: bool, context: int,
               max_positions: int | None = None) -> float:
        """Measure the verification curve for every bucket around `batches` that is missing (or stale);
        returns the seconds spent. The model and its config are only run, never changed. `context`: the
        longer cached prefix to time behind (besides SHORT_CONTEXT). Every measured forward fits
        `max_positions` (the model's context): widths that cannot are not measured (and could not be
        verified either), the measured prefix shrinks to leave room for the rest."""
        wanted = sorted({bucket for b in batches for bucket in _buckets(b)})
        if packed in self.stale:
            self.stale.discard(packed)
            self.live.scale[packed] = 1.0
            self.live.corrections = {k: v for k, v in self.live.corrections.items() if k[0] != packed}
            self.live.levels = {k: v for k, v in self.live.levels.items() if k[0] != packed}
            for bucket in wanted:
                self.live.curves.pop((packed, bucket), None)
            self.live.changed()
        missing = [bucket for bucket in wanted if (packed or bucket == 1, bucket) not in self.live.curves]
        if not missing:
            return 0.0
        started = time.perf_counter()
        for bucket in missing:
            grid = tuple(e for e in EXTRA_GRID if e <= max(64, 4 * bucket))
            longest = min(context, max(2 * SHORT_CONTEXT, LONG_TOKENS // bucket))  # prefill costs B x context
            if max_positions is not None:  # a prefix of at least one token, the widest row, and a spare slot
                grid = tuple(e for e in grid if 1 + _widest(e, bucket) + 1 <= max_positions) or (0,)
                longest = max(1, min(longest, max_positions - _widest(max(grid), bucket) - 1))
            short = min(SHORT_CONTEXT, longest)
            # The longest row a ragged measurement may hold (`ragged_contexts`): what fits the model's positions.
            most = max_positions - _widest(max(grid), bucket) - 1 if max_positions is not None else 2 * longest
            alone = bucket == 1  # one row: the same forward in every batch mode, measured (and keyed) once
            clock = cost_clock(model.get_input_embeddings().weight.device)
            seconds = measure_verify(model, bucket, grid, None if alone else packed, padded and not alone, short,
                                     self.rounds, clock=clock, most=most)
            long_seconds: tuple[float, ...] = ()
            if longest >= 2 * short:  # the cost of attending over a long cache, measured too
                long_seconds = tuple(measure_verify(model, bucket, grid, None if alone else packed,
                                                    padded and not alone, longest, self.rounds, clock=clock,
                                                    most=most))
            self.live.curves[(packed or alone, bucket)] = VerifyCurve(bucket, grid, tuple(seconds), short,
                                                                      longest, long_seconds)
        self.live.scale.setdefault(packed, 1.0)
        self.live.changed()
        spent = time.perf_counter() - started
        self.measure_seconds += spent
        return spent

    # -- learning from real steps --------------------------------------------------------------
    def observe_verify(self, batch: int, inputs: int, packed: bool, seconds: float,
                       context: float | None = None) -> None:
        """Smooth the ratio of a real forward's time to the curve (geometric, so one outlier moves
        little) into the scale, and what the scale leaves into the curve's level and the corrections of the grid
        points on either side of the width, in the context's band (LEVEL_RATE, POINT_RATE)."""
        table = self.live
        packed = packed or batch <= 1
        scale = table.scale.get(packed, 1.0)
        predicted = table.verify_from(batch, inputs, 1, packed, context)[0]  # (its cached terms: ~4x faster)
        if predicted <= 0 or seconds <= 0:
            return
        # Bounded steps: on a shared machine one forward can take twice its time for reasons of its own.
        ratio = min(1.4, max(0.7, seconds / predicted))
        table.scale[packed] = math.exp(math.log(scale) + 0.05 * math.log(ratio))
        # Each bucket's curve is corrected by its share of the prediction: a batch of 15 is priced mostly
        # from the 16-row curve, and correcting only the 8-row one left the error to the shared scale, which
        # drifted past REMEASURE_DRIFT on static batches shrinking through 15..9 and re-measured every curve.
        # Within a curve, the level learns, and the grid points on either side of the width in proportion to how much
        # each prices it (`correction_sources`).
        low, high = _buckets(batch)
        share = 0.0 if low == high else (batch - low) / (high - low)
        extra = max(0.0, inputs - batch)
        band = context_band(context)
        for bucket, part in ((low, 1.0 - share), (high, share)):
            curve = table.curves.get((packed, bucket))
            if curve is None or part <= 0:
                continue
            level = table.level(packed, bucket, band)
            table.levels[(packed, bucket, band)] = min(4.0, max(0.25, level * math.exp(LEVEL_RATE * part
                                                                                     * math.log(ratio))))
            below, above = bracket(curve.extras, extra)
            upper = 0.0 if below == above else (extra - curve.extras[below]) / (curve.extras[above] - curve.extras[below])
            pulls = {below: 1.0} if below == above else {below: 1.0 - upper, above: upper}
            olds = {}
            for point in pulls:  # first learnt here: from what its neighbours said (what the prediction used)
                old = table.corrections.get((packed, bucket, point, band))
                olds[point] = old if old is not None else table.correction(packed, curve, curve.extras[point], band)
            for point, pull in pulls.items():
                key = (packed, bucket, point, band)
                step = POINT_RATE * part * pull * math.log(ratio)
                table.corrections[key] = min(4.0, max(0.25, math.exp(math.log(olds[point]) + step)))
                table.corrected(key)

    def end_call(self) -> None:
        """A drift the scale had to absorb for a whole call means the curves are out of date."""
        for packed, scale in self.live.scale.items():
            if abs(math.log(scale)) > math.log(REMEASURE_DRIFT):
                self.stale.add(packed)

    def observe_draft(self, name: str, levels: int, nodes: int, seconds: float, lag: float = 0.0,
                      context: float | None = None) -> None:
        """One propose of `name`: its size, its seconds, the tokens its rows committed since it last
        drafted them (the catch-up a drafter with its own cache pays; ~0 seconds for a lookup) and the
        rows' mean context (`draft_features`)."""
        if nodes <= 0:
            return
        fit = self.live.drafters.get(name)
        if fit is None:  # (built only when missing: building one per step cost ~20 us of numpy)
            fit = self.live.drafters[name] = LinearFit(DRAFT_FEATURES, ridge=DRAFT_RIDGE)
        fit.update(draft_features(levels, nodes, lag, context), seconds)

    def observe_look(self, name: str, seconds: float) -> None:
        """One free look of `name` (it proposed all it could): its seconds."""
        looks = self.live.looks.setdefault(name, [])
        looks.append(seconds)
        del looks[:-LOOK_SAMPLES]

    def observe_prepare(self, name: str, tokens: float, seconds: float) -> None:
        """One step's `Drafter.prepare` of `name` for rows first asked to draft, holding `tokens` tokens."""
        fit = self.live.prepares.get(name)
        if fit is None:
            fit = self.live.prepares[name] = LinearFit(2)
        fit.update([1.0, tokens / CONTEXT_UNIT], seconds)

    def observe_overhead(self, drafter: str, seconds: float, drafted: bool = True) -> None:
        """One step's engine work outside draft and verify in a call of `drafter`; `drafted`: whether the
        step verified a draft."""
        table = self.live
        key = (drafter, drafted)
        samples = table.overhead_samples[key] = table.overhead_samples.get(key, 0) + 1
        old = table.overheads.get(key, seconds)
        table.overheads[key] = old + max(0.05, 1.0 / samples) * (seconds - old)


def measure_verify(model: Any, batch: int, grid: tuple[int, ...], packed: bool | None, padded: bool, context: int,
                   rounds: int = 3, seed: int = 0, clock: Callable[[], float] = time.perf_counter,
                   most: int | None = None) -> list[float]:
    """Seconds of a verification forward (chains, inputs spread evenly over the rows) for each
    number of extra inputs in `grid`, on prefixes of random tokens `context` long on average: all
    alike in the padded mode, spread over the rows otherwise (`ragged_contexts`, none longer than `most`).
    Sizes are interleaved each round, so load drift on a shared machine hits all of them alike."""
    from .draft import tree_layout
    from .padded_runner import PaddedTargetRunner
    from .target import TargetRunner

    vocab = int(model.get_input_embeddings().weight.shape[0])
    generator = torch.Generator().manual_seed(seed)
    widest = _widest(max(grid), batch)
    lengths = np.full(batch, context) if padded else ragged_contexts(batch, context, most or context)
    longest = int(lengths.max())
    runner = (PaddedTargetRunner(model, batch, longest + widest + 2) if padded
              else TargetRunner(model, batch, longest + widest + 2, packed_inputs=packed))
    times: dict[int, list[float]] = {extra: [] for extra in grid}
    try:
        with torch.inference_mode():
            runner.prefill(torch.randint(0, vocab, (batch, longest), generator=generator), lengths)
            layouts = {}
            for extra in grid:
                widths = torch.tensor([1 + extra // batch + (row < extra % batch) for row in range(batch)])
                steps = int(widths.max())
                valid = torch.arange(steps)[None, :] < widths[:, None]
                parents = (torch.arange(steps) - 1).clamp(min=0).expand(batch, steps).contiguous()
                depths, visible = tree_layout(parents)
                layouts[extra] = (steps, depths, visible, valid)
            for round_index in range(rounds + 1):
                for extra in grid:
                    steps, depths, visible, valid = layouts[extra]
                    ids = torch.randint(0, vocab, (batch, steps), generator=generator)
                    if model_is_cuda(runner):
                        torch.cuda.synchronize(runner.device)
                    start = clock()
                    runner.verify_forward(ids, depths, visible, valid=valid)
                    if model_is_cuda(runner):
                        torch.cuda.synchronize(runner.device)
                    if round_index:  # the first round warms up
                        times[extra].append(clock() - start)
    finally:
        runner.release()
    # The fastest of the rounds: another job on a shared machine only ever adds time. Then a forward is
    # never cheaper with more inputs: a point above a later one is noise and takes the later value (a
    # spike cannot spread to the wider points).
    seconds = [min(times[extra]) for extra in grid]
    for index in range(len(seconds) - 2, -1, -1):
        seconds[index] = min(seconds[index], seconds[index + 1])
    return seconds


def ragged_contexts(batch: int, mean: int, most: int) -> np.ndarray:
    """Cached lengths of `batch` rows for measuring: `mean` tokens on average, spread evenly around it (from an
    eighth of it, at most `most`), in the order short, long, next shortest, next longest..., so the first rows,
    which `measure_verify` gives its extra inputs, hold about the mean too. Why spread: the rows of real batches
    hold different prompts, and on a CPU a batch whose rows differ enough attends row by row
    (`specdec.target.ROW_ATTENTION_MIN_WASTE`), where rows of one length attend in one call whose query rows are
    padded to the widest: there one extra input cost 1.09-1.24x a plain step at 8 and 16 rows (every row's attention
    read two query rows), row by row 1.00-1.04x (benchmarks/results/goodput/checks_s75). Measured alike, the curve
    priced 1 to 8 extra inputs at B = 16 at 1.14-1.25x where the batching benchmark's prompts paid 1.00-1.14x, and
    widths priced too dear are never tried, so no step corrected them; a batch of one length pays more than the
    curve says instead, and its steps at those widths correct it (`CostModel.observe_verify`)."""
    if batch <= 1:
        return np.full(batch, mean)
    half = max(0, min(mean - max(1, mean // 8), most - mean))
    spread = np.rint(np.linspace(mean - half, mean + half, batch)).astype(np.int64)
    order = [index for pair in zip(range(batch), range(batch - 1, -1, -1)) for index in pair]
    return spread[list(dict.fromkeys(order))[:batch]]


def _widest(extra: int, batch: int) -> int:
    """Inputs of the widest row when `extra` inputs beyond one per row are spread over `batch` rows."""
    return 1 + -(-extra // batch)


def model_is_cuda(runner: Any) -> bool:
    return runner.device.type == "cuda"


_MODELS: weakref.WeakKeyDictionary[Any, dict[str, CostModel]] = weakref.WeakKeyDictionary()


def cost_model_for(model: Any, device: torch.device | str) -> CostModel:
    """The cost model of `model` on `device`, created empty at first use (measured lazily by `ensure`).
    Kept beside the model, keyed by the model object, and dropped with it; issue 20 moves it."""
    key = device_key(device)
    per_device = _MODELS.setdefault(model, {})
    if key not in per_device:
        per_device[key] = CostModel(key)
    return per_device[key]


def row_forward_seconds(model: Any) -> Callable[[int], float]:
    """Seconds of one row's forward of `width` inputs on `model` behind a short cache, read from the cost
    model kept for the model and its device (its curve measured at first use, about a second): how a drafter
    that runs a model of its own prices that model's forwards. The returned function reads a snapshot, so
    later measurements never move what it says."""
    from .target import context_length, model_device

    costs = cost_model_for(model, model_device(model))
    costs.ensure(model, [1], True, False, LONG_CONTEXT, context_length(model))
    table = costs.snapshot()
    return lambda width: table.verify(1, width)


def settled_for(model: Any, key: Hashable, decide: Callable[[], T]) -> T:
    """`CostModel.settle` on the cost model kept for `model` and its device: how a drafter that sizes itself
    from a model's measured costs makes that choice once per model and device."""
    from .target import model_device

    return cost_model_for(model, model_device(model)).settle(key, decide)
