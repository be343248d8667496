"""Issue 21's batching targets, checked from one run of the batching benchmark (`benchmarks/batching.py`):
each drafter at or above 0.97x of batched autoregressive decoding at every batch size, and above it (> 1.0x)
wherever an oracle cell that is always right (`oracle@1`) beats it.

Ratios are generated tokens per CPU-second (end to end, the median over the run's repeats) over batched
autoregressive decoding of the same run: static cells over static batches of plain decoding, continuous cells
over continuous plain decoding (the same serving protocol; their ratio over the static batches is shown too).
With an A/A cell in the run (`--aa`: static plain decoding again), each miss also says whether it lies within what
that copy read apart from the reference in this run: its farthest reading from 1.0 over the batch sizes, taken
both ways (a pair reading 1.03x says either cell may be 3% off); one pair of identical cells, so a lower bound
on the run's noise. Each target is also read per repeat, paired: the cell's repeat r over its reference's repeat r
(the benchmark interleaves the repeats of a batch size's cells, so the two ran side by side). "Told apart" says
`met` or `missed` only where every repeat's reading lies on that side of the threshold: a sign test, weak at a few
repeats (a cell exactly at its threshold reads all on one given side with chance 1/8 at 3 repeats, 1/32 at 5).

Runs of the same command can be pooled (`pooled`): every repeat's paired reading of every run, over the target's
threshold, their mean and a 90% bootstrap interval of that mean. "Told apart" there says `met` or `missed` where
the interval lies on one side of 1.0 (one noisy repeat no longer decides it, as it does in a single run's sign test).

    .venv/bin/python benchmarks/batching_targets.py benchmarks/results/goodput/batching [OTHER_RUN ...]

Writes targets.md into the first folder and prints it; with other runs also targets_pooled.md there.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from specdec.benchmarks.batching import AA_LABEL, ORACLE_PREFIX, reference_rows
from specdec.benchmarks.goodput_targets import COVERAGE, DRAWS  # (the sweep's bootstrap, the same here)

#: An oracle that is always right: where it beats plain decoding, drafting can pay at that batch size.
ALWAYS_RIGHT = f"{ORACLE_PREFIX}1"
FLOOR = 0.97


def _speed(row: dict) -> float:
    return row["tokens_per_cpu_second"]


def aa_low(rows: list[dict]) -> float | None:
    """The A/A cell's lowest reading, each ratio taken both ways (None: the run has no A/A cell)."""
    ar = reference_rows(rows)
    ratios = [_speed(r) / _speed(ar[r["batch"]]) for r in rows
              if r["mode"] == "autoregressive" and r["drafter"] == AA_LABEL]
    return min(min(x, 1.0 / x) for x in ratios) if ratios else None


def paired(row: dict, base: dict) -> list[float]:
    """The cell's tokens per CPU-second over its reference's, repeat by repeat (empty: no per-repeat times)."""
    cell, reference = row.get("cpu_seconds_all") or [], base.get("cpu_seconds_all") or []
    if not cell or len(cell) != len(reference):
        return []
    return [(row["tokens"] / mine) / (base["tokens"] / theirs) for mine, theirs in zip(cell, reference)]


def told_apart(overs: list[float]) -> str:
    """`met` / `missed` where every repeat's reading over its threshold lies on that side of 1.0, else `no`."""
    if not overs:
        return "-"
    return "met" if min(overs) >= 1.0 else "missed" if max(overs) < 1.0 else "no"


def checks(rows: list[dict]) -> list[tuple[str, bool, float, float, list[float]]]:
    """Per drafter cell and batch size: (what, met, ratio, ratio over its threshold, each repeat's paired ratio
    over its threshold)."""
    ar = reference_rows(rows)
    continuous_ar = {r["batch"]: r for r in rows if r["mode"] == "continuous" and r["drafter"] == "none"}
    oracle = {r["batch"]: _speed(r) / _speed(ar[r["batch"]]) for r in rows
              if r["mode"] == "unpadded" and r["drafter"] == ALWAYS_RIGHT}
    found = []
    for r in rows:
        if r["drafter"] in ("none", AA_LABEL) or r["drafter"].startswith(ORACLE_PREFIX):
            continue
        batch = r["batch"]
        continuous = r["mode"].startswith("continuous")
        base = continuous_ar[batch] if continuous and batch in continuous_ar else ar[batch]
        ratio = _speed(r) / _speed(base)
        over = "continuous plain decoding" if base is not ar[batch] else "static batched plain decoding"
        cell = f"{r['drafter']} ({r['mode']}) B={batch}"
        repeats = paired(r, base)
        found.append((f"{cell} >= {FLOOR}x {over}", ratio >= FLOOR, ratio, ratio / FLOOR,
                      [x / FLOOR for x in repeats]))
        if oracle.get(batch, 0.0) > 1.0:
            found.append((f"{cell} > 1.0x {over} ({ALWAYS_RIGHT} {oracle[batch]:.2f}x there)", ratio > 1.0, ratio,
                          ratio, repeats))
    return found


def pooled(runs: list[list[dict]]) -> list[tuple[str, list[float]]]:
    """Per target, in the order the runs first ask it: every run's paired readings over its threshold, pooled. A
    target is named without the oracle's ratio, which differs from run to run."""
    found: dict[str, list[float]] = {}
    for rows in runs:
        for what, _, _, _, repeats in checks(rows):
            found.setdefault(what.split(f" ({ALWAYS_RIGHT} ")[0], []).extend(repeats)
    return list(found.items())


def mean_interval(readings: list[float], draws: int = DRAWS, seed: int = 0) -> tuple[float, float, float]:
    """The readings' mean and the COVERAGE bootstrap interval of that mean."""
    values = np.asarray(readings, dtype=float)
    means = np.random.default_rng(seed).choice(values, size=(draws, len(values))).mean(axis=1)
    tail = 100 * (1 - COVERAGE) / 2
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(values.mean()), float(low), float(high)


def pooled_table(folders: list[Path]) -> str:
    """The targets read on the runs' repeats pooled (`pooled`, `mean_interval`)."""
    runs = [json.loads((folder / "result.json").read_text())["rows"] for folder in folders]
    names = ", ".join(f"`{folder.name}`" for folder in folders)
    lines = [f"# Issue 21 batching targets, pooled ({names})", "",
             "Each target read on every repeat of every run, paired with its reference's same repeat (tokens per "
             "CPU-second over the reference's), over the target's threshold: their mean, and a "
             f"{COVERAGE:.0%} bootstrap interval of the mean. Told apart: the interval on one side of 1.0.", ""]
    same = [x for rows in runs for r in rows if r["mode"] == "autoregressive" and r["drafter"] == AA_LABEL
            for x in paired(r, reference_rows(rows)[r["batch"]])]
    if same:  # the reference against itself: how far the pooled readings may lean one way
        mean, low, high = mean_interval(same)
        lines += [f"A/A: `{AA_LABEL}` over `none`, every repeat at every batch size ({len(same)}): mean {mean:.3f}, "
                  f"{COVERAGE:.0%} interval {low:.3f}-{high:.3f}. A mean away from 1.0 says the reference ran slow "
                  "(above 1.0) or fast in these runs, and every reading leans the same way.", ""]
    lines += [f"| target | repeats | mean over the threshold | {COVERAGE:.0%} interval | met | told apart |",
              "|---|---|---|---|---|---|"]
    for what, readings in pooled(runs):
        if not readings:
            lines.append(f"| {what} | 0 | - | - | - | - |")
            continue
        mean, low, high = mean_interval(readings)
        told = "met" if low >= 1.0 else "missed" if high < 1.0 else "no"
        lines.append(f"| {what} | {len(readings)} | {mean:.3f} | {low:.3f}-{high:.3f} | "
                     f"{'yes' if mean >= 1.0 else '**no**'} | {told} |")
    return "\n".join(lines) + "\n"


def main(folder: Path, pool: list[Path] | None = None) -> str:
    result = json.loads((folder / "result.json").read_text())
    rows = result["rows"]
    ar = reference_rows(rows)
    lines = [f"# Issue 21 batching targets ({folder.name})", "", f"Command: `{result['command']}`", "",
             f"Ratio: generated tokens per CPU-second (median of {result.get('repeats', '?')} repeats, end to end) "
             "over plain decoding of the same run; static cells over static batches, continuous cells over "
             "continuous plain decoding.", "", "| B | " + " | ".join(("cell", "over static AR", "tau")) + " |",
             "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['batch']} | {r['drafter']} ({r['mode']}) | {_speed(r) / _speed(ar[r['batch']]):.3f} | "
                     f"{r['tau']:.2f} |")
    low = aa_low(rows)
    lines.append("")
    if low is not None:
        lines += [f"A/A: `{AA_LABEL}` (static plain decoding again) reads as far as {low:.3f} from 1.0 (taken both "
                  f"ways) over the batch sizes of this run. A missed target whose measured value over its threshold "
                  f"is at least {low:.3f} is within that spread.", ""]
    header = "| target | met | measured |" + (" a miss within the A/A spread |" if low is not None else "")
    lines += [header + " per repeat, paired, over the threshold | told apart |",
              "|---|---|---|" + ("---|" if low is not None else "") + "---|---|"]
    for what, ok, ratio, over, repeats in checks(rows):
        line = f"| {what} | {'yes' if ok else '**no**'} | {ratio:.3f}x |"
        if low is not None:
            line += " |" if ok else f" {'yes' if over >= low else 'no'} ({over:.3f}) |"
        spread = f"{min(repeats):.3f}-{max(repeats):.3f}" if repeats else "-"
        lines.append(line + f" {spread} | {told_apart(repeats)} |")
    text = "\n".join(lines) + "\n"
    (folder / "targets.md").write_text(text)
    if pool:
        pooled_text = pooled_table([folder, *pool])
        (folder / "targets_pooled.md").write_text(pooled_text)
        text += "\n" + pooled_text
    return text


if __name__ == "__main__":
    folders = [Path(arg) for arg in sys.argv[1:]] or [Path("benchmarks/results/goodput/batching")]
    print(main(folders[0], folders[1:]))
