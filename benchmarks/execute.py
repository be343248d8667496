"""Runs one cell: every prompt of a dataset through one method, timed the same way for every method.

Each generate call is timed by the same wall clock around it (specdec and transformers alike, as
Spec-Bench times its forward function); specdec's own GenerationStats supply tau, acceptance and the
draft/verify/other split. MT-bench's second turn is asked after the method's own first answer.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from specdec import registry
from specdec.costs import CostModel, device_key
from specdec.stats import GenerationStats
from specdec.target import context_length, model_device

from .cells import Cell
from .config import ModelSpec, resolve_placeholders
from .datasets import PromptBuilder, Sample, load_dataset
from .memory import PeakMemory
from .oracle import NAME as ORACLE
from .oracle import prompt_key, register_oracle
from .ties import parting

# A method maps a batch of prompt token ids to (new token ids per row, specdec stats or None, lossless flag).
MethodFn = Callable[[list[list[int]]], tuple[list[list[int]], GenerationStats | None, bool | None]]


@dataclass
class LoadedModel:
    target: Any
    draft: Any | None
    tokenizer: Any


class Workspace:
    """Models and prompt sets loaded once per process (a Ray worker owns its own)."""

    def __init__(self) -> None:
        self._models: dict[ModelSpec, LoadedModel] = {}
        self._samples: dict[Any, list[Sample]] = {}
        register_oracle()

    def model(self, spec: ModelSpec) -> LoadedModel:
        if spec not in self._models:
            self._models[spec] = _load(spec)
        return self._models[spec]

    def samples(self, cell: Cell) -> list[Sample]:
        key = cell.dataset.model_dump_json()  # the spec holds a list (categories): not hashable itself
        if key not in self._samples:
            spec = cell.dataset
            self._samples[key] = load_dataset(spec.kind, spec.path, spec.categories, spec.per_category)
        return self._samples[key]


def _load(spec: ModelSpec) -> LoadedModel:
    from transformers import AutoModelForCausalLM

    from specdec.api import load_model, parse_dtype

    if spec.path == "default":
        from specdec.zoo import load_default

        pair = load_default(device=spec.device, dtype=parse_dtype(spec.dtype))
        return LoadedModel(pair.target, pair.draft, pair.tokenizer)
    target, tokenizer = load_model(spec.path, device=spec.device, dtype=spec.dtype)
    draft = None
    if spec.draft_path is not None:  # beside its target, in the target's dtype
        weight = target.get_input_embeddings().weight
        draft = AutoModelForCausalLM.from_pretrained(spec.draft_path, local_files_only=True,
                                                     dtype=weight.dtype).to(weight.device).eval()
    return LoadedModel(target, draft, tokenizer)


def _eos_ids(model: Any) -> set[int]:
    eos = getattr(model.generation_config, "eos_token_id", None)
    if eos is None:
        return set()
    return {eos} if isinstance(eos, int) else set(eos)


def _cut_at_eos(tokens: list[int], eos: set[int]) -> list[int]:
    for index, token in enumerate(tokens):
        if token in eos:
            return tokens[: index + 1]
    return tokens


def hf_method(cell: Cell, loaded: LoadedModel) -> MethodFn:
    """transformers' own `generate`: plain greedy, prompt lookup, or assisted by the draft model."""
    model, eos = loaded.target, _eos_ids(loaded.target)
    pad = loaded.tokenizer.pad_token_id if loaded.tokenizer.pad_token_id is not None else next(iter(eos), 0)
    kwargs: dict[str, Any] = dict(max_new_tokens=cell.max_new_tokens, pad_token_id=pad, min_new_tokens=0)
    if cell.temperature > 0:
        kwargs.update(do_sample=True, temperature=cell.temperature, top_k=None, top_p=None)
    else:
        kwargs.update(do_sample=False, temperature=None, top_k=None, top_p=None)
    if cell.method == "hf_prompt_lookup":
        kwargs["prompt_lookup_num_tokens"] = cell.prompt_lookup_num_tokens
    elif cell.method == "hf_assisted":
        if loaded.draft is None:
            raise ValueError("hf_assisted needs a draft model (models[].draft)")
        kwargs["assistant_model"] = loaded.draft
    device = model_device(model)

    def run(prompts: list[list[int]]) -> tuple[list[list[int]], None, None]:
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, prompt in enumerate(prompts):  # left padding, as transformers expects for decoder-only
            ids[row, width - len(prompt):] = torch.tensor(prompt)
            mask[row, width - len(prompt):] = 1
        if cell.temperature > 0:
            torch.manual_seed(cell.seed)
        with torch.no_grad():
            out = model.generate(ids.to(device), attention_mask=mask.to(device), **kwargs)
        return [_cut_at_eos(row[width:], eos) for row in out.tolist()], None, None

    return run


def specdec_method(cell: Cell, loaded: LoadedModel, reference: dict[str, list[int]] | None) -> MethodFn:
    """specdec.generate with one drafter instance and one cost model for the whole cell, as a server
    running that method would keep them. A cost model of its own (its verify curves measured at the cell's
    first warm-up call, ~1 s) keeps cells from pricing steps with what other cells taught the model's
    shared one: sharing it, `auto`'s layer_skip verdicts (drafted where anpd's look found nothing, the
    hard stretches) became the priors of the `layer_skip` cell's rows."""
    import specdec

    assert cell.drafter is not None
    options = resolve_placeholders(cell.drafter.options, loaded.draft)
    if cell.drafter.name == ORACLE:
        if reference is None:
            raise RuntimeError("the oracle drafter needs the reference cell's outputs, which are missing "
                               "(did the reference cell fail?)")
        options = {**options, "continuations": reference}
    drafter = registry.create("drafter", cell.drafter.name, options)
    costs = CostModel(device_key(model_device(loaded.target)))

    def run(prompts: list[list[int]]) -> tuple[list[list[int]], GenerationStats, bool]:
        out = specdec.generate(loaded.target, prompts, tokenizer=loaded.tokenizer, drafter=drafter,
                               verifier=cell.verifier or "auto", max_new_tokens=cell.max_new_tokens,
                               temperature=cell.temperature, seed=cell.seed, cost_model=costs)
        return out.sequences, out.stats, out.verifier_lossless

    return run


def _stats_record(stats: GenerationStats, rows: int) -> dict[str, Any]:
    """GenerationStats without its per-step lists, plus a histogram of tokens committed per step."""
    data = stats.to_dict()
    accepted = data.pop("accepted_per_step")
    data.pop("drafted_per_step")
    if rows == 1:  # per-step counts are summed over rows, so the histogram is per row only at batch 1
        histogram: dict[str, int] = {}
        for count in accepted:
            key = str(count + 1)
            histogram[key] = histogram.get(key, 0) + 1
        data["accept_length_histogram"] = histogram
    return data


def _batches(samples: list[Sample], size: int) -> list[list[int]]:
    """Sample indices in batches of `size`, never mixing categories (per-category stats stay exact)."""
    by_category: dict[str, list[int]] = {}
    for index, sample in enumerate(samples):
        by_category.setdefault(sample.category, []).append(index)
    return [group[i : i + size] for group in by_category.values() for i in range(0, len(group), size)]


class CellRun:
    """One cell, run a unit (one repeat of one batch, every turn) at a time, so that a sweep can interleave
    the units of several cells: slow drift of a shared machine (load, clock, caches) then falls on every
    cell alike instead of on whichever cells ran during it. A failure marks the record failed and ends
    the cell; it never raises out of here."""

    def __init__(self, cell: Cell, workspace: Workspace, reference: dict[str, list[int]] | None = None) -> None:
        self.cell = cell
        self.record: dict[str, Any] = {"cell_id": cell.cell_id, "cell": cell.model_dump(mode="json"),
                                       "status": "ok", "error": None, "samples": [], "calls": [], "notes": []}
        self.record["load_average_start"] = _load_average()
        self.reference = reference if cell.temperature == 0 else None  # greedy outputs to find partings from
        self.units: list[tuple[int, list[int]]] = []  # (repeat, sample indices of one batch), in run order
        self._seconds = 0.0
        self._peak_bytes = 0
        if cell.load_error is not None:
            self.record.update(status="failed", error=cell.load_error)
            return
        started = time.perf_counter()
        try:
            self._start(workspace, reference)
        except Exception as error:  # a broken method is a failed cell in the report, never a crashed sweep
            self._fail(error)
        self._seconds += time.perf_counter() - started

    @property
    def failed(self) -> bool:
        return self.record["status"] != "ok"

    def _fail(self, error: Exception) -> None:
        self.record.update(status="failed", error=f"{type(error).__name__}: {error}",
                           traceback=traceback.format_exc(limit=8))
        self.units = []

    def _start(self, workspace: Workspace, reference: dict[str, list[int]] | None) -> None:
        cell = self.cell
        self.loaded = workspace.model(cell.model)
        self.samples = workspace.samples(cell)
        self.builder = PromptBuilder(self.loaded.tokenizer, context_length(self.loaded.target), cell.max_new_tokens)
        self.method = (specdec_method(cell, self.loaded, reference) if cell.method == "specdec"
                       else hf_method(cell, self.loaded))
        self.record["chat_template"] = self.builder.uses_chat_template
        self.record["memory_kind"] = PeakMemory(model_device(self.loaded.target)).kind
        first, _ = self.builder.encode([], self.samples[0].turns[0])
        for _ in range(cell.warmup):
            self.method([first])
        self.units = [(repeat, batch) for repeat in range(cell.repeats)
                      for batch in _batches(self.samples, cell.batch_size)]
        self.turn_records: list[list[dict[str, Any]]] = [[] for _ in self.samples]
        self.calls: list[dict[str, Any]] = []
        self.lossless: set[bool] = set()
        self._call_index: dict[tuple[int, int], int] = {}  # (first sample of the batch, turn) -> call index

    def run_unit(self, index: int) -> None:
        """Run unit `index` of `self.units` (every turn of one batch in one repeat)."""
        if self.failed:
            return
        started = time.perf_counter()
        try:
            with PeakMemory(model_device(self.loaded.target)) as memory:
                self._run_unit(*self.units[index])
            self._peak_bytes = max(self._peak_bytes, memory.peak_bytes)
        except Exception as error:
            self._fail(error)
        self._seconds += time.perf_counter() - started

    def _run_unit(self, repeat: int, batch: list[int]) -> None:
        samples, builder, tokenizer = self.samples, self.builder, self.loaded.tokenizer
        history: dict[int, list[tuple[str, str]]] = {i: [] for i in batch}
        for turn in range(max(len(samples[i].turns) for i in batch)):
            rows = [i for i in batch if turn < len(samples[i].turns)]
            encoded = [builder.encode(history[i], samples[i].turns[turn]) for i in rows]
            prompts = [ids for ids, _ in encoded]
            t0, c0 = time.perf_counter(), time.process_time()
            outputs, stats, is_lossless = self.method(prompts)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            if is_lossless is not None:
                self.lossless.add(is_lossless)
            for i, tokens in zip(rows, outputs):
                history[i].append((samples[i].turns[turn], tokenizer.decode(tokens, skip_special_tokens=True)))
            key = (batch[0], turn)
            if key not in self._call_index:  # the first repeat of this call
                self._call_index[key] = len(self.calls)
                self.calls.append({"rows": rows, "turn": turn, "wall_times": [wall], "cpu_times": [cpu],
                                   "stats": None if stats is None else _stats_record(stats, len(rows))})
                for i, tokens, (ids, cut) in zip(rows, outputs, encoded):
                    self.turn_records[i].append({"tokens": tokens, "prompt_tokens": len(ids), "truncated": cut,
                                                 "prompt_key": prompt_key(ids), "call": self._call_index[key]})
                    self._find_parting(self.turn_records[i][-1], ids)
                continue
            call = self.calls[self._call_index[key]]
            call["wall_times"].append(wall)
            call["cpu_times"].append(cpu)
            for i, tokens in zip(rows, outputs):
                if tokens != self.turn_records[i][turn]["tokens"]:
                    self.turn_records[i][turn].setdefault("differs_in_repeats", []).append(repeat)

    def _find_parting(self, turn: dict[str, Any], prompt: list[int]) -> None:
        """Where a greedy turn first differs from the reference's answer to the same prompt, and whether it is a
        near tie there (`benchmarks.ties`): outside the timed call, once per turn."""
        want = None if self.reference is None else self.reference.get(turn["prompt_key"])
        if want is not None and turn["tokens"] != want:
            turn["parted"] = parting(self.loaded.target, prompt, turn["tokens"], want, _eos_ids(self.loaded.target))

    def finish(self) -> dict[str, Any]:
        """The cell's result record."""
        record = self.record
        record["cell_seconds"] = self._seconds
        record["load_average_end"] = _load_average()
        if self.failed:  # set up and ran nothing, or stopped on an error: no samples, no calls
            return record
        turn_records = self.turn_records
        record["samples"] = [{"sample_id": s.sample_id, "category": s.category, "raw_category": s.raw_category,
                              "turns": turn_records[i]} for i, s in enumerate(self.samples)]
        record["calls"] = self.calls
        record["peak_memory_bytes"] = self._peak_bytes
        record["verifier_lossless"] = None if not self.lossless else all(self.lossless)
        truncated = sum(t["truncated"] for turns in turn_records for t in turns)
        if truncated:
            record["notes"].append(f"{truncated} prompt(s) longer than the context minus max_new_tokens were "
                                   "truncated from the left")
        return record


def _load_average() -> float | None:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def execute_cell(cell: Cell, workspace: Workspace, reference: dict[str, list[int]] | None = None,
                 progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Run `cell` alone and return its result record (status "failed" with the error instead of raising)."""
    run = CellRun(cell, workspace, reference)
    for index in range(len(run.units)):
        run.run_unit(index)
        if progress is not None:
            progress(index + 1, len(run.units))
    return run.finish()


def execute_interleaved(cells: list[Cell], workspace: Workspace, references: dict[str, dict[str, list[int]]],
                        on_done: Callable[[dict[str, Any]], None],
                        progress: Callable[[int, int], None] | None = None) -> None:
    """Run `cells` side by side: round i runs unit i of every cell (one repeat of one batch), starting at a
    different cell each round, so no cell always runs right after the same one. Records are handed to
    `on_done` when every cell has finished."""
    runs = [CellRun(cell, workspace, references.get(cell.group)) for cell in cells]
    rounds = max((len(run.units) for run in runs), default=0)
    done = 0
    for index in range(rounds):
        for shift in range(len(runs)):
            run = runs[(index + shift) % len(runs)]
            if index < len(run.units):
                run.run_unit(index)
                done += 1
        if progress is not None:
            progress(done, done + sum(max(0, len(run.units) - index - 1) for run in runs))
    for run in runs:
        on_done(run.finish())
