"""Spreads a sweep's cells over Ray workers, each an actor that owns its own copy of the models.

    specdec bench --preset full --out DIR --ray             # a local Ray cluster on this machine
    specdec bench --preset full --out DIR --ray auto        # join a running cluster (ray start --head)

Results are the same records the local backend writes (outputs and taus identical; only timings
differ), streamed back to the driver, which stores each as it finishes so a sweep stays resumable.
Drafters must be installed (entry points) on every node; in-process registrations of the driver do
not travel, except the harness's own oracle, which each worker registers itself.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from .cells import Cell


def _worker_class() -> Any:
    import ray

    @ray.remote(num_cpus=1)
    class BenchWorker:
        """One model-owning process; cells run one at a time on it."""

        def __init__(self, threads: int) -> None:
            import torch

            from .execute import Workspace

            torch.set_num_threads(threads)
            self.workspace = Workspace()

        def run(self, cell: dict[str, Any], reference: dict[str, list[int]] | None) -> dict[str, Any]:
            from .execute import execute_cell

            return execute_cell(Cell.model_validate(cell), self.workspace, reference)

    return BenchWorker


class RayBackend:
    """`address=None` starts a local cluster with this machine's cores; otherwise connects to `address`."""

    def __init__(self, address: str | None = None, num_workers: int | None = None, threads_per_worker: int = 1,
                 num_cpus: int | None = None) -> None:
        try:
            import ray
        except ImportError as error:
            raise RuntimeError("--ray needs Ray: pip install 'specdec[bench]' (or pip install ray)") from error
        self._ray = ray
        self._started = False
        if not ray.is_initialized():
            kwargs: dict[str, Any] = dict(include_dashboard=False, logging_level="ERROR", log_to_driver=False)
            if address is None:
                kwargs["num_cpus"] = num_cpus or os.cpu_count() or 1
            else:
                kwargs["address"] = address
            ray.init(**kwargs)
            self._started = True
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.num_workers = max(1, num_workers or cpus)
        self.threads = threads_per_worker
        self._workers: list[Any] = []

    def _ensure_workers(self, count: int) -> list[Any]:
        worker_cls = _worker_class()
        while len(self._workers) < count:
            self._workers.append(worker_cls.remote(self.threads))
        return self._workers[:count]

    def run(self, cells: list[Cell], references: dict[str, dict[str, list[int]]],
            on_done: Callable[[dict[str, Any]], None]) -> None:
        if not cells:
            return
        ray = self._ray
        workers = self._ensure_workers(min(self.num_workers, len(cells)))
        queue = list(cells)
        running: dict[Any, Any] = {}
        reference_refs = {group: ray.put(ref) for group, ref in references.items()}

        def submit(worker: Any) -> None:
            cell = queue.pop(0)
            ref = worker.run.remote(cell.model_dump(mode="json"), reference_refs.get(cell.group))
            running[ref] = (worker, cell)

        for worker in workers:
            if queue:
                submit(worker)
        while running:
            finished, _ = ray.wait(list(running), num_returns=1)
            worker, cell = running.pop(finished[0])
            try:
                record = ray.get(finished[0])
            except ray.exceptions.RayError as error:  # the worker died (out of memory, killed): a failed cell
                record = {"cell_id": cell.cell_id, "cell": cell.model_dump(mode="json"), "status": "failed",
                          "error": f"Ray worker failed: {type(error).__name__}: {error}", "samples": [],
                          "calls": [], "notes": []}
                self._workers.remove(worker)
                worker = self._ensure_workers(len(self._workers) + 1)[-1]
            on_done(record)
            if queue:
                submit(worker)

    def close(self) -> None:
        for worker in self._workers:
            self._ray.kill(worker)
        self._workers = []
        if self._started:
            self._ray.shutdown()
            self._started = False
