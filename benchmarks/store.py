"""Finished cells, one JSON line each, appended and flushed as they finish: what makes sweeps resumable."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


class ResultStore:
    """A JSONL file of cell records. The last record of a cell id wins; a cell counts as done only when
    its record says "ok" (a failed cell is tried again on the next run). A half-written last line
    (the process was killed mid-write) is ignored."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.records: dict[str, dict[str, Any]] = {}
        self.skipped_lines = 0
        if self.path.is_file():
            with open(self.path, encoding="utf-8") as handle:
                for line in handle:
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError:
                        self.skipped_lines += 1
                        continue
                    if isinstance(record, dict) and "cell_id" in record:
                        self.records[record["cell_id"]] = record

    def done(self, cell_id: str) -> bool:
        record = self.records.get(cell_id)
        return record is not None and record.get("status") == "ok"

    def get(self, cell_id: str) -> dict[str, Any] | None:
        return self.records.get(cell_id)

    def add(self, record: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, separators=(",", ":")) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        self.records[record["cell_id"]] = record
