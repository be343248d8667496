"""A cell is the unit of work of a sweep: one method on one model and dataset at one batch size.

Cells are what is resumed (a finished cell id is never re-run) and what Ray spreads over workers.
The id hashes everything that changes a cell's result, so editing the config makes new cells.
"""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import BaseModel, ConfigDict

from .config import DatasetSpec, DrafterSpec, ModelSpec, SweepConfig

Method = Literal["specdec", "hf_generate", "hf_prompt_lookup", "hf_assisted"]


class Cell(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    model: ModelSpec
    dataset: DatasetSpec
    method: Method
    drafter: DrafterSpec | None = None
    verifier: str | None = None
    label: str
    batch_size: int
    max_new_tokens: int
    temperature: float
    repeats: int
    warmup: int
    seed: int
    prompt_lookup_num_tokens: int
    is_reference: bool = False
    load_error: str | None = None  # the drafter failed to import: recorded as a failed cell

    @property
    def cell_id(self) -> str:
        payload = self.model_dump_json(exclude={"load_error", "is_reference"})
        return hashlib.sha1(payload.encode()).hexdigest()[:16]

    @property
    def group(self) -> str:
        """Cells comparable to each other (same model and prompts)."""
        return f"{self.model.name}|{self.dataset.name}"


def plan_cells(config: SweepConfig, load_failures: dict[str, str] | None = None) -> list[Cell]:
    """Every cell of the sweep, the reference cell of each (model, dataset) first.

    The reference is transformers' greedy `generate` at batch 1 (or specdec's `none` when that baseline
    is off): equality is checked against it and the oracle replays it.
    """
    load_failures = load_failures or {}
    common = dict(max_new_tokens=config.max_new_tokens, temperature=config.temperature, repeats=config.repeats,
                  warmup=config.warmup, seed=config.seed, prompt_lookup_num_tokens=config.prompt_lookup_num_tokens)
    several_verifiers = len(config.verifiers) > 1
    cells: list[Cell] = []
    for model in config.models:
        for dataset in config.datasets:
            base = dict(model=model, dataset=dataset, **common)
            group: list[Cell] = []
            reference_method = "hf_generate" if "hf_generate" in config.baselines else "specdec"
            for batch in dict.fromkeys([1, *config.batch_sizes]):  # the reference always runs at batch 1
                wanted = batch in config.batch_sizes
                for name in config.baselines:
                    if not (wanted or (batch == 1 and name == reference_method)):
                        continue
                    if name != "hf_generate" and batch != 1:
                        continue  # transformers' prompt lookup and assisted generation refuse batches
                    if name == "hf_assisted" and model.draft_path is None:
                        continue
                    group.append(Cell(method=name, label=name, batch_size=batch, **base))
                for drafter in config.drafters:
                    if not (wanted or (batch == 1 and drafter.name == "none" and reference_method == "specdec")):
                        continue
                    verifiers = config.verifiers[:1] if drafter.name == "none" else config.verifiers
                    for verifier in verifiers:
                        label = drafter.display + (f"+{verifier}" if several_verifiers and drafter.name != "none"
                                                   else "")
                        group.append(Cell(method="specdec", drafter=drafter, verifier=verifier, label=label,
                                          batch_size=batch, load_error=load_failures.get(drafter.display), **base))
            for index, cell in enumerate(group):
                if cell.batch_size == 1 and cell.method == reference_method and (
                        cell.method != "specdec" or (cell.drafter is not None and cell.drafter.is_plain_none)):
                    group.insert(0, group.pop(index).model_copy(update={"is_reference": True}))
                    break
            cells.extend(group)
    return cells
