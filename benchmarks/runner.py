"""Runs a sweep: checks plugins before any model work, plans cells, runs the reference cells first
(their outputs feed the oracle and the equality check), then the rest, on a local or Ray backend.
Every finished cell is stored at once (interleaved local cells: when the cells run together have all
finished), so an interrupted sweep resumes where it stopped."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from tqdm.auto import tqdm

from . import execute
from .cells import Cell, plan_cells
from .config import SweepConfig, check_plugins
from .store import ResultStore

RESULTS_FILE = "cells.jsonl"
References = dict[str, dict[str, list[int]]]  # group -> prompt key -> reference continuation


class Backend(Protocol):
    def run(self, cells: list[Cell], references: References, on_done: Callable[[dict[str, Any]], None]) -> None:
        """Run every cell and call `on_done(record)` as each finishes, in any order."""


class LocalBackend:
    """This process, models loaded once and shared by the cells.

    `interleave` (the default): the cells run side by side, one batch of one repeat of each in turn
    (`execute.execute_interleaved`), so their ratios are measured under the same machine conditions;
    records are stored when all of them finish. Otherwise one cell after another, each stored as it
    finishes (an interrupted sweep loses at most one cell), but a drift of the machine during a cell then
    lands on that cell's ratios alone: sequential runs of this sweep moved single cells by 5-10%."""

    def __init__(self, show_progress: bool = True, interleave: bool = True) -> None:
        self.workspace: execute.Workspace | None = None
        self.show_progress = show_progress
        self.interleave = interleave

    def run(self, cells: list[Cell], references: References, on_done: Callable[[dict[str, Any]], None]) -> None:
        if self.workspace is None:
            self.workspace = execute.Workspace()
        if self.interleave and len(cells) > 1:
            bar = tqdm(total=0, desc=f"  {len(cells)} cells interleaved", leave=False,
                       disable=not self.show_progress, unit="batch")

            def advance(done: int, total: int) -> None:
                bar.total = total
                bar.n = done
                bar.refresh()

            execute.execute_interleaved(cells, self.workspace, references, on_done, advance)
            bar.close()
            return
        for cell in cells:
            bar = tqdm(total=0, desc=f"  {cell.label} (b={cell.batch_size})", leave=False,
                       disable=not self.show_progress, unit="batch")

            def progress(done: int, total: int, bar: Any = bar) -> None:
                bar.total = total
                bar.n = done
                bar.refresh()

            record = execute.execute_cell(cell, self.workspace, references.get(cell.group), progress)
            bar.close()
            on_done(record)


def reference_continuations(record: dict[str, Any] | None) -> dict[str, list[int]] | None:
    """prompt key -> generated tokens of a finished reference cell (what the oracle replays)."""
    if record is None or record.get("status") != "ok":
        return None
    return {turn["prompt_key"]: turn["tokens"] for sample in record["samples"] for turn in sample["turns"]}


def run_sweep(
    config: SweepConfig,
    out_dir: str | Path,
    backend: Backend | None = None,
    show_progress: bool = True,
    after_cell: Callable[[dict[str, Any]], None] | None = None,
    fresh: bool = False,
    interleave: bool = True,
) -> tuple[list[Cell], list[dict[str, Any]]]:
    """Run every cell not already finished in `out_dir`; return the cells and their records in plan order.
    `fresh`: measure every cell again (an existing results file is kept beside as `.previous`). Resuming is
    keyed on the cell's settings, not the code, so a re-run after a code change needs `fresh`.
    `interleave`: see `LocalBackend` (the default backend); other backends decide for themselves."""
    config = config.with_none()
    load_failures = check_plugins(config)  # unknown names and bad options fail here, before any model loads
    cells = plan_cells(config, load_failures)
    path = Path(out_dir) / RESULTS_FILE
    if fresh and path.is_file():
        path.replace(path.with_name(path.name + ".previous"))
    store = ResultStore(path)
    resumed = sum(store.done(c.cell_id) for c in cells)
    if resumed:
        print(f"resuming: {resumed} of {len(cells)} cells already measured in {path} (--fresh measures them again)",
              file=sys.stderr)
    backend = backend if backend is not None else LocalBackend(show_progress, interleave)
    if config.threads is not None and isinstance(backend, LocalBackend):
        import torch

        torch.set_num_threads(config.threads)  # for this process: the report records it with the machine
    bar = tqdm(total=len(cells), desc="cells", disable=not show_progress, unit="cell")
    bar.update(sum(store.done(c.cell_id) for c in cells))

    def on_done(record: dict[str, Any]) -> None:
        store.add(record)
        bar.update(1)
        if record["status"] != "ok":
            bar.write(f"FAILED {record['cell']['label']}: {record['error']}")
        if after_cell is not None:
            after_cell(record)

    references_cells = [c for c in cells if c.is_reference]
    backend.run([c for c in references_cells if not store.done(c.cell_id)], {}, on_done)
    references: References = {}
    for cell in references_cells:
        continuation = reference_continuations(store.get(cell.cell_id))
        if continuation is not None:
            references[cell.group] = continuation
    backend.run([c for c in cells if not c.is_reference and not store.done(c.cell_id)], references, on_done)
    bar.close()
    return cells, [store.get(c.cell_id) or {} for c in cells]
