"""Writes a sweep's results: results.json (machine, config, per-cell and per-category metrics, failures),
results.md (tables, failures first) and the PNG plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .cells import Cell
from .config import SweepConfig
from .machine import machine_info
from .metrics import OVERALL, summarize
from .plots import write_plots

SHARED_CPU_NOTE = ("The CPU was shared with other jobs during this run (load average above the core count), so "
                   "absolute tokens/s are noisy. Cells run one after another, so a load change between cells moves the "
                   "wall-clock speedups; the CPU-time column (this process's CPU seconds) is the steadier ratio.")


def _fmt(value: float | None, spec: str = ".2f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def _speed(category: dict[str, Any] | None) -> str:
    if not category or category.get("speedup") is None:
        return "-"
    std = category.get("speedup_std")
    return f"{category['speedup']:.2f}x" + (f" ±{std:.2f}" if std is not None else "")


def _dataset_line(config: SweepConfig) -> str:
    parts = []
    for spec in config.datasets:
        subset = "all prompts" if spec.per_category is None else f"first {spec.per_category} per category"
        cats = "all categories" if not spec.categories else ", ".join(spec.categories)
        parts.append(f"{spec.name} ({cats}; {subset})")
    return "; ".join(parts)


def markdown(result: dict[str, Any], config: SweepConfig) -> str:
    machine = result["machine"]
    lines = [f"# specdec benchmark{': ' + config.note if config.note else ''}", ""]
    if result.get("command"):
        lines += [f"Command: `{result['command']}`", ""]
    lines += [
        f"Machine: {machine.get('cpu')}, {machine.get('cores')} cores ({machine.get('torch_threads')} torch threads), "
        f"torch {machine.get('torch')}, transformers {machine.get('transformers')}, specdec commit "
        f"`{(machine.get('git_commit') or '?')[:10]}`{' (with uncommitted changes)' if machine.get('git_dirty') else ''}, "
        f"load average at start {_fmt(machine.get('load_average_1min'), '.1f')}, at end "
        f"{_fmt(result.get('load_average_end'), '.1f')}.",
        "",
        f"Settings: max_new_tokens={config.max_new_tokens}, temperature={config.temperature}, "
        f"repeats={config.repeats}, warm-up runs={config.warmup}, batch sizes={config.batch_sizes}. "
        f"Prompts: {_dataset_line(config)}. Wall time {result.get('sweep_seconds', 0):.0f} s "
        f"(cells: {result.get('cells_seconds', 0):.0f} s, including resumed ones).",
        "",
    ]
    if result.get("shared_cpu"):
        lines += [f"**Note:** {SHARED_CPU_NOTE}", ""]
    failures = result["summary"]["failures"]
    if failures:
        lines += [f"## FAILURES ({len(failures)})", ""]
        for failure in failures:
            detail = failure["detail"]
            if isinstance(detail, dict):
                detail = f"{detail['status']}; first at {detail.get('first_mismatch')}"
            lines.append(f"- **{failure['label']}** (batch {failure['batch_size']}, {failure['dataset']}): "
                         f"{failure['kind']}: {str(detail).splitlines()[0] if detail else ''}")
        lines.append("")
    cells = result["summary"]["cells"]
    for dataset in dict.fromkeys(c["dataset"] for c in cells):
        for model in dict.fromkeys(c["model"] for c in cells if c["dataset"] == dataset):
            group = [c for c in cells if c["dataset"] == dataset and c["model"] == model]
            lines += _group_tables(group, model, dataset)
    notes = sorted({note for c in cells for note in c.get("notes", [])})
    lines += ["## Definitions", "",
              "Speedup = mean per-sample tokens/s / the baseline's (Spec-Bench's ratio of means; ± = std over "
              "repeats). tau = tokens committed per decoding step, bonus included (1.00 = plain decoding). "
              "Acceptance = accepted / drafted tokens. Greedy check = outputs token-identical to transformers' "
              "greedy `generate` at batch 1 (a mismatch of a lossless method is listed under FAILURES); 'up to "
              "near-ties': where an output parts from it, the token taken is within the dtype's rounding of the "
              "reference's best logit there (half precision: a forward of k+1 inputs rounds differently from a "
              "one-token step; benchmarks/ties.py). "
              "`oracle(draft_length=k)` replays that reference output: the engine's ceiling at draft length k. "
              "Peak memory is the process's resident set size (CPU) or max allocated (CUDA) during the cell.", ""]
    skipped = []
    if "hf_assisted" in config.baselines and any(m.draft_path is None for m in config.models):
        skipped.append("`hf_assisted` needs a draft model and was not run for models without one")
    if any(b != 1 for b in config.batch_sizes) and set(config.baselines) - {"hf_generate"}:
        skipped.append("transformers' prompt lookup and assisted generation refuse batches: run at batch 1 only")
    if skipped:
        lines += ["Baselines: " + "; ".join(skipped) + ".", ""]
    if notes:
        lines += ["Notes: " + " ".join(f"{note}." for note in notes), ""]
    return "\n".join(lines)


def _group_tables(group: list[dict[str, Any]], model: str, dataset: str) -> list[str]:
    ok = [c for c in group if c["status"] == "ok"]
    categories = [k for k in (ok[0]["categories"] if ok else {}) if k != OVERALL]
    baseline = ok[0]["baseline"] if ok else "hf_generate"
    lines = [f"## {model} on {dataset}", "", f"Speedup vs transformers `{baseline}` (same batch size):", ""]
    header = ["method", "batch", *categories, OVERALL, "overall (CPU time)", "tau", "accept", "tok/s", "prefill/draft/verify/other", "peak MB",
              "greedy check"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for cell in group:
        if cell["status"] != "ok":
            lines.append(f"| {cell['label']} | {cell['batch_size']} | " + " | ".join(["-"] * (len(header) - 3))
                         + f" | FAILED: {(cell.get('error') or '').splitlines()[0][:120]} |")
            continue
        overall = cell["categories"][OVERALL]
        decode = overall.get("decode") or {}
        split = decode.get("time_split") or {}
        split_text = "-" if not split else "/".join(f"{100 * (split.get(k) or 0):.0f}" for k in ("prefill", "draft", "verify", "other")) + "%"
        row = [cell["label"], str(cell["batch_size"]), *[_speed(cell["categories"].get(k)) for k in categories],
               f"**{_speed(overall)}**", _fmt(overall.get("speedup_cpu"), ".2f", "x"), _fmt(decode.get("tau")), _fmt(decode.get("acceptance_rate"), ".1%"),
               _fmt(overall.get("tokens_per_second"), ".1f"), split_text,
               _fmt(cell["peak_memory_bytes"] / 2**20, ".0f"), cell["equality"]["status"]]
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    with_positions = [c for c in ok if ((c["categories"][OVERALL].get("decode") or {}).get("acceptance_by_position"))]
    if with_positions:
        depth = min(8, max(len(c["categories"][OVERALL]["decode"]["acceptance_by_position"]) for c in with_positions))
        lines += ["Acceptance rate by draft position:", "",
                  "| method | batch | " + " | ".join(str(d + 1) for d in range(depth)) + " |", "|" + "---|" * (depth + 2)]
        for cell in with_positions:
            rates = cell["categories"][OVERALL]["decode"]["acceptance_by_position"]
            lines.append(f"| {cell['label']} | {cell['batch_size']} | " + " | ".join(_fmt(rates[d], ".0%") if d < len(rates) else "-"
                                                             for d in range(depth)) + " |")
        lines.append("")
    return lines


def write_report(cells: list[Cell], records: list[dict[str, Any]], config: SweepConfig, out_dir: str | Path,
                 command: str | None = None, machine: dict[str, Any] | None = None,
                 sweep_seconds: float | None = None) -> dict[str, Any]:
    """Write results.json, results.md and the plots into `out_dir`; return the results dict."""
    import os

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    machine = machine or machine_info()
    end_load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    cores = machine.get("cores_usable") or machine.get("cores") or 1
    result = {
        "command": command,
        "machine": machine,
        "load_average_end": end_load,
        "shared_cpu": max(machine.get("load_average_1min") or 0, end_load or 0) > cores,
        "sweep_seconds": sweep_seconds or 0.0,
        # cells may come from earlier, resumed invocations: their own run times add up to the sweep's
        "cells_seconds": sum(r.get("cell_seconds") or 0.0 for r in records),
        "config": json.loads(config.model_dump_json()),
        "summary": summarize(cells, records),
    }
    result["plots"] = [p.name for p in write_plots(result["summary"]["cells"], out)]
    (out / "results.json").write_text(json.dumps(result, indent=1))
    (out / "results.md").write_text(markdown(result, config) + "\n" + "".join(
        f"![{name}]({name})\n" for name in result["plots"]))
    return result
