"""Metrics from cell records, per category and overall, defined as Spec-Bench defines them.

- per-sample tokens/s = sum of new tokens over the sample's turns / sum of their wall times (and the
  same by this process's CPU time, `speedup_cpu`: cells run one after another, minutes apart, so when
  other jobs share the CPU the CPU-time ratio is the steadier one);
- speedup = mean per-sample tokens/s of the method / the same for the baseline (a ratio of means),
  computed per timed repeat, then mean and std over repeats;
- tau = tokens committed per decoding step, bonus included (1.00 for plain decoding);
- acceptance rate = accepted / drafted; acceptance by draft position d = steps that accepted at least
  d nodes / steps whose draft reached depth d;
- equality: greedy outputs compared token by token with the reference cell. A mismatch where the
  method claims to be lossless is a failure, listed on its own, never averaged away.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from .cells import Cell
from .ties import first_difference

OVERALL = "overall"


def _sample_speeds(record: dict[str, Any], category: str | None, clock: str = "wall") -> list[list[float]]:
    """Per repeat, the per-sample tokens/s of the samples in `category` (None = all), by wall-clock
    time or by this process's CPU time (`clock="cpu"`: steadier when other jobs share the CPU and
    cells run minutes apart; [] for records made before CPU times were recorded)."""
    calls = record["calls"]
    key = f"{clock}_times"
    if calls and key not in calls[0]:
        return []
    repeats = len(calls[0][key]) if calls else 0
    speeds: list[list[float]] = [[] for _ in range(repeats)]
    for sample in record["samples"]:
        if category is not None and sample["category"] != category:
            continue
        tokens = sum(len(turn["tokens"]) for turn in sample["turns"])
        for repeat in range(repeats):
            wall = sum(calls[turn["call"]][key][repeat] for turn in sample["turns"])
            speeds[repeat].append(tokens / wall if wall > 0 else 0.0)
    return speeds


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _speedup(record: dict[str, Any], baseline: dict[str, Any] | None, category: str | None,
             clock: str = "wall") -> tuple[float | None, float | None]:
    if baseline is None or baseline.get("status") != "ok":
        return None, None
    ours, theirs = _sample_speeds(record, category, clock), _sample_speeds(baseline, category, clock)
    ratios = [statistics.fmean(a) / statistics.fmean(b) for a, b in zip(ours, theirs)
              if a and b and statistics.fmean(b) > 0]
    if not ratios:
        return None, None
    return statistics.fmean(ratios), (statistics.stdev(ratios) if len(ratios) > 1 else None)


def _decode_stats(record: dict[str, Any], category: str | None) -> dict[str, Any] | None:
    """Summed GenerationStats over the calls of `category` (calls never mix categories)."""
    categories = {i: s["category"] for i, s in enumerate(record["samples"])}
    chosen = [c["stats"] for c in record["calls"]
              if c["stats"] is not None and (category is None or categories[c["rows"][0]] == category)]
    if not chosen:
        return None
    total: dict[str, Any] = defaultdict(float)
    by_depth_accepted: list[int] = []
    by_depth_drafted: list[int] = []
    histogram: dict[str, int] = defaultdict(int)
    for stats in chosen:
        for key in ("steps", "new_tokens", "drafted_tokens", "accepted_tokens", "draft_time", "verify_time",
                    "other_time", "prefill_time"):
            total[key] += stats[key]
        for source, target in ((stats["accepted_by_depth"], by_depth_accepted),
                               (stats["drafted_by_depth"], by_depth_drafted)):
            target.extend([0] * (len(source) - len(target)))
            for depth, value in enumerate(source):
                target[depth] += value
        for length, count in stats.get("accept_length_histogram", {}).items():
            histogram[length] += count
    drafted = total["drafted_tokens"]
    timed = total["draft_time"] + total["verify_time"] + total["other_time"] + total["prefill_time"]
    return {
        "tau": total["new_tokens"] / total["steps"] if total["steps"] else None,
        "acceptance_rate": total["accepted_tokens"] / drafted if drafted else None,
        "acceptance_by_position": [a / d if d else None for a, d in zip(by_depth_accepted, by_depth_drafted)],
        "drafted_by_position": by_depth_drafted,
        "time_split": {k: total[f"{k}_time"] / timed if timed else None
                       for k in ("draft", "verify", "other", "prefill")},
        "time_seconds": {k: total[f"{k}_time"] for k in ("draft", "verify", "other", "prefill")},
        "accept_length_histogram": dict(sorted(histogram.items(), key=lambda kv: int(kv[0]))),
        "steps": int(total["steps"]),
    }


def _per_sample_tau(record: dict[str, Any]) -> list[float]:
    """tau of every sample (over its turns), from its own row's counts even when it ran in a batch."""
    taus = []
    for index, sample in enumerate(record["samples"]):
        steps = tokens = 0
        for turn in sample["turns"]:
            call = record["calls"][turn["call"]]
            if call["stats"] is None:
                return []
            row = call["rows"].index(index)
            steps += call["stats"]["row_steps"][row]
            tokens += call["stats"]["row_new_tokens"][row]
        if steps:
            taus.append(tokens / steps)
    return taus


def equality(cell: Cell, record: dict[str, Any], reference: dict[str, Any] | None) -> dict[str, Any]:
    """Token-by-token comparison with the reference's greedy outputs. A turn that parts from the reference at a
    near tie of the reference's own logits (`benchmarks.ties`: half-precision rounding) is counted apart, not
    as a mismatch, and so is a later turn of the same sample, whose prompt holds the parted answer."""
    if cell.temperature > 0:
        return {"status": "not checked (sampling)", "failure": False}
    if reference is None or reference.get("status") != "ok":
        return {"status": "not checked (reference failed)", "failure": False}
    expected = {(s["sample_id"], t): turn for s in reference["samples"] for t, turn in enumerate(s["turns"])}
    compared, mismatches, ties, first = 0, 0, 0, None
    for sample in record["samples"]:
        tied = False  # an earlier turn of this sample parted at a tie
        for t, turn in enumerate(sample["turns"]):
            want = expected.get((sample["sample_id"], t))
            if want is None:
                continue
            compared += 1
            if turn["tokens"] == want["tokens"]:
                continue
            parted = turn.get("parted")
            if (parted is not None and parted["tie"]) or (tied and turn.get("prompt_key") != want.get("prompt_key")):
                ties += 1
                tied = True
                continue
            mismatches += 1
            if first is None:
                position = first_difference(turn["tokens"], want["tokens"])
                first = {"sample_id": sample["sample_id"], "turn": t, "position": position,
                         **({"gap": parted["gap"], "tolerance": parted["tolerance"]} if parted else {})}
    claims_lossless = cell.method != "specdec" or record.get("verifier_lossless") is not False
    if mismatches == 0 and ties == 0:
        status = "identical"
    elif mismatches == 0:
        status = f"identical up to near-ties ({ties}/{compared} turns part at a rounding tie)"
    elif claims_lossless:
        status = f"MISMATCH ({mismatches}/{compared} turns differ)"
    else:
        status = f"differs ({mismatches}/{compared} turns; lossy verifier)"
    return {"status": status, "compared": compared, "mismatches": mismatches, "near_ties": ties,
            "first_mismatch": first, "failure": bool(mismatches and claims_lossless)}


def _find(cells: list[Cell], records: list[dict[str, Any]], group: str, batch: int, method: str,
          drafter: str | None = None) -> dict[str, Any] | None:
    for cell, record in zip(cells, records):
        if (cell.group == group and cell.batch_size == batch and cell.method == method
                and (drafter is None or (cell.drafter is not None and cell.drafter.name == drafter
                                         and not cell.drafter.options and cell.drafter.label is None))):
            return record if record.get("status") == "ok" else None
    return None


def summarize(cells: list[Cell], records: list[dict[str, Any]]) -> dict[str, Any]:
    """One summary per cell (per-category metrics + overall) and the list of failures."""
    references = {c.group: r for c, r in zip(cells, records) if c.is_reference}
    summaries, failures = [], []
    for cell, record in zip(cells, records):
        base = {"cell_id": cell.cell_id, "label": cell.label, "method": cell.method, "model": cell.model.name,
                "dataset": cell.dataset.name, "batch_size": cell.batch_size, "verifier": cell.verifier,
                "drafter": None if cell.drafter is None else cell.drafter.model_dump(mode="json"),
                "status": record.get("status", "missing"), "error": record.get("error")}
        if base["status"] != "ok":
            summaries.append(base)
            failures.append({"label": cell.label, "batch_size": cell.batch_size, "dataset": cell.dataset.name,
                             "kind": "cell failed", "detail": record.get("error") or "no result"})
            continue
        hf_base = _find(cells, records, cell.group, cell.batch_size, "hf_generate")
        none_base = _find(cells, records, cell.group, cell.batch_size, "specdec", "none")
        baseline, baseline_name = (hf_base, "hf_generate") if hf_base is not None else (none_base, "none")
        categories = list(dict.fromkeys(s["category"] for s in record["samples"]))  # dataset order
        per_category = {}
        for category in [*categories, OVERALL]:
            key = None if category == OVERALL else category
            speeds = _sample_speeds(record, key)
            speedup, speedup_std = _speedup(record, baseline, key)
            per_category[category] = {
                "samples": len(speeds[0]) if speeds else 0,
                "new_tokens": sum(len(t["tokens"]) for s in record["samples"] if key in (None, s["category"])
                                  for t in s["turns"]),
                "tokens_per_second": _mean([v for repeat in speeds for v in repeat]),
                "speedup": speedup, "speedup_std": speedup_std,
                "speedup_cpu": _speedup(record, baseline, key, clock="cpu")[0],
                "speedup_vs_none": _speedup(record, none_base, key)[0],
                "decode": _decode_stats(record, key),
            }
        check = equality(cell, record, references.get(cell.group))
        if check["failure"]:
            failures.append({"label": cell.label, "batch_size": cell.batch_size, "dataset": cell.dataset.name,
                             "kind": "greedy output differs from the baseline", "detail": check})
        summaries.append({**base, "baseline": baseline_name, "categories": per_category, "equality": check,
                          "per_sample_tau": _per_sample_tau(record), "peak_memory_bytes": record["peak_memory_bytes"],
                          "memory_kind": record["memory_kind"], "verifier_lossless": record.get("verifier_lossless"),
                          "notes": record.get("notes", []), "cell_seconds": record.get("cell_seconds"),
                          "load_average": [record.get("load_average_start"), record.get("load_average_end")], "chat_template": record.get("chat_template"),
                          "truncated_prompts": sum(t["truncated"] for s in record["samples"] for t in s["turns"])})
    return {"cells": summaries, "failures": failures}
