"""Issue 21's Spec-Bench targets, checked from one run's results (ratios against specdec `none` of the
same run, per category and overall), plus each cell's share of row-steps that verified no draft.

With an A/A cell in the run (`--drafter none:label=none-again`: plain decoding again, the same work as `none`),
each missed target also says whether its shortfall lies within what that copy of `none` read apart from it in
this run (its lowest ratio over the categories and overall): a miss no larger than that is not told apart from
the machine's noise by this run.

Each target also gets a paired bootstrap interval (`bootstrap_overs`): the run's (sample, repeat) units are drawn
again with replacement, the same draws for every cell (unit i of every cell ran in the same round of the
interleaved sweep), and the target is read again on each draw. Its 90% interval of measured value over threshold
says whether the run tells the target apart from its threshold at all: a miss whose interval reaches past 1.0 is
not shown to be one, nor a pass whose interval reaches below it.

    .venv/bin/python benchmarks/goodput_targets.py benchmarks/results/goodput/spec_bench [OTHER_RUN ...]

Writes targets.md into that folder and prints it; with other runs of the same sweep, also the targets read on all
their units pooled (`pooled_units`).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

CATEGORIES = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag", "overall")
#: goodput cell -> the same drafter with its own schedule (its default before issue 21)
BASELINE_OF = {"anpd": "anpd(schedule=constant)", "draft_model": "draft_model(schedule=heuristic)",
               "layer_skip": "layer_skip(schedule=own)", "ppd": "ppd(schedule=profile)",
               "ppd_draft_model": "ppd_draft_model(schedule=constant)"}
#: the A/A cell's label: a second cell of plain decoding (`specdec bench --drafter none:label=none-again`)
AA_LABEL = "none-again"
#: bootstrap draws and the interval's coverage (`bootstrap_overs`)
DRAWS = 2000
COVERAGE = 0.90
#: a target read from a ratio table: (met, the measured value as text, measured value over its threshold)
Reading = tuple[bool, str, float]


def no_draft_shares(folder: Path) -> dict[str, float]:
    shares: dict[str, float] = {}
    for line in (folder / "cells.jsonl").read_text().splitlines():
        record = json.loads(line)
        steps = plain = 0
        for call in record.get("calls", []):
            stats = call.get("stats") or {}
            steps += stats.get("steps", 0)
            plain += stats.get("no_draft_row_steps", 0)
        label = record["cell"].get("label") or record["cell_id"]
        if steps:
            shares[label] = plain / steps
    return shares


def sample_times(folder: Path, clock: str) -> Iterator[tuple[str, str, int, list[float], str]]:
    """Per sample of the specdec cells in cells.jsonl: its cell's label, its category, its tokens, its
    seconds on `clock` ("wall_times" or "cpu_times") per repeat, its turns summed, and its sample id."""
    for line in (folder / "cells.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["status"] != "ok" or record["cell"].get("method") != "specdec":
            continue
        label = record["cell"].get("label") or record["cell_id"]
        calls = record["calls"]
        for sample in record["samples"]:
            tokens = sum(len(turn["tokens"]) for turn in sample["turns"])
            repeats = len(calls[sample["turns"][0]["call"]][clock])
            times = [sum(calls[turn["call"]][clock][r] for turn in sample["turns"]) for r in range(repeats)]
            yield label, sample["category"], tokens, times, sample["sample_id"]


def over_none(speeds: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    base = speeds["none"]
    return {label: {c: v[c] / base[c] for c in CATEGORIES} for label, v in speeds.items()}


def sample_ratios(folder: Path, clock: str, best: bool) -> dict[str, dict[str, float]]:
    """Ratios over `none` recomputed from cells.jsonl with the harness's definition (mean per-sample
    tokens/s over the mean of none's), on `clock`, either over every repeat or each sample's fastest repeat
    (`best`: another job on the machine only ever adds time)."""
    values: dict[str, dict[str, list[float]]] = {}
    for label, category, tokens, times, _ in sample_times(folder, clock):
        speeds = [tokens / min(times)] if best else [tokens / t for t in times]
        for key in (category, "overall"):
            values.setdefault(label, {}).setdefault(key, []).extend(speeds)
    return over_none({label: {c: sum(v) / len(v) for c, v in cats.items()} for label, cats in values.items()})


def pooled_ratios(folder: Path, clock: str) -> dict[str, dict[str, float]]:
    """Ratios over `none` of all tokens over all seconds per category (every repeat): not the harness's
    number, which averages per-sample speeds and so weighs a 9-token translation answer like a 128-token one;
    shown beside it to tell a cell that is slower from one whose short answers are."""
    totals: dict[str, dict[str, list[float]]] = {}
    for label, category, tokens, times, _ in sample_times(folder, clock):
        for key in (category, "overall"):
            tokens_seconds = totals.setdefault(label, {}).setdefault(key, [0.0, 0.0])
            tokens_seconds[0] += tokens
            tokens_seconds[1] += sum(times) / len(times)
    return over_none({label: {c: t / s for c, (t, s) in cats.items()} for label, cats in totals.items()})


def paired_ratios(folder: Path, clock: str) -> dict[str, dict[str, float]]:
    """Per category, the geometric mean over samples and repeats of `none`'s seconds over the cell's on the same
    sample in the same repeat. The harness runs the cells call by call, so the two ran minutes apart at most, and the
    machine's slow drift, which moves a call's time by 13-16% between repeats on this project's CPU, cancels in the
    pair (stop 64, `benchmarks/results/goodput/checks_s64`). For reading only: no target is checked on it."""
    samples = list(sample_times(folder, clock))
    base = {sample: seconds for label, _, _, seconds, sample in samples if label == "none"}
    logs: dict[str, dict[str, list[float]]] = {}
    for label, category, _, seconds, sample in samples:
        for key in (category, "overall"):
            logs.setdefault(label, {}).setdefault(key, []).extend(
                math.log(b / t) for b, t in zip(base[sample], seconds))
    return {label: {c: math.exp(sum(v) / len(v)) for c, v in cats.items()} for label, cats in logs.items()}


def repeat_count(folder: Path) -> int:
    """Repeats of the run's cells (the titles said 3 whatever the run did)."""
    for line in (folder / "cells.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("calls"):
            return len(record["calls"][0]["wall_times"])
    return 0


def unit_speeds(folder: Path, clock: str) -> dict[str, dict[str, list[float]]]:
    """Per cell and category, tokens/s of every (sample, repeat) unit on `clock`, in one order for every cell (by
    sample, then repeat): the harness's ratio over `none` is the mean of a cell's units over the mean of none's."""
    units: dict[str, dict[str, dict[tuple[str, int], float]]] = {}
    for label, category, tokens, times, sample in sample_times(folder, clock):
        cell = units.setdefault(label, {}).setdefault(category, {})
        for repeat, seconds in enumerate(times):
            cell[(sample, repeat)] = tokens / seconds
    return {label: {category: [speeds[key] for key in sorted(speeds)] for category, speeds in cats.items()}
            for label, cats in units.items()}


def drawn_ratios(units: dict[str, dict[str, list[float] | np.ndarray]], picks: dict[str, np.ndarray]
                 ) -> dict[str, dict[str, float]]:
    """The ratio table over `none` on the units `picks` chose per category (overall: all of them)."""
    means: dict[str, dict[str, float]] = {}
    for label, cats in units.items():
        chosen = {category: np.asarray(speeds)[picks[category]] for category, speeds in cats.items()}
        means[label] = {category: float(values.mean()) for category, values in chosen.items()}
        means[label]["overall"] = float(np.concatenate(list(chosen.values())).mean())
    return over_none(means)


def bootstrap_overs(units: dict[str, dict[str, list[float]]], readers: list[Callable[[dict], Reading]],
                    draws: int = DRAWS, seed: int = 0) -> list[tuple[float, float]]:
    """Per target reader, the COVERAGE interval of its measured value over threshold across `draws` paired
    bootstrap draws of the units (the same draw for every cell)."""
    rng = np.random.default_rng(seed)
    arrays = {label: {category: np.asarray(speeds) for category, speeds in cats.items()} for label, cats in units.items()}
    sizes = {category: len(speeds) for category, speeds in arrays["none"].items()}
    overs = np.empty((draws, len(readers)))
    for draw in range(draws):
        picks = {category: rng.integers(0, size, size) for category, size in sizes.items()}
        ratio = drawn_ratios(arrays, picks)  # (arrays made once: `np.asarray` there is then a no-op)
        overs[draw] = [read(ratio)[2] for read in readers]
    tail = 100 * (1 - COVERAGE) / 2
    low, high = np.percentile(overs, [tail, 100 - tail], axis=0)
    return [(float(a), float(b)) for a, b in zip(low, high)]


def table(title: str, ratio: dict[str, dict[str, float]], shares: dict[str, float]) -> list[str]:
    lines = [f"### {title}", "", "| cell | " + " | ".join(CATEGORIES) + " | no-draft share |",
             "|---|" + "---|" * (len(CATEGORIES) + 1)]
    for label, values in ratio.items():
        share = shares.get(label)
        lines.append(f"| {label} | " + " | ".join(f"{values[c]:.3f}" for c in CATEGORIES)
                     + f" | {'-' if share is None else f'{share:.0%}'} |")
    return lines + [""]


def pooled_units(folders: list[Path], clock: str) -> dict[str, dict[str, list[float]]]:
    """The units of several runs of one sweep, run after run (the cells every run has): read as one run of
    all their repeats. For runs of the same code on the same kind of machine; each run's `none` stays paired
    with its own cells through the unit order."""
    runs = [unit_speeds(folder, clock) for folder in folders]
    labels = [label for label in runs[0] if all(label in run for run in runs)]
    return {label: {category: [speed for run in runs for speed in run[label][category]]
                    for category in runs[0][label]} for label in labels}


def main(folder: Path, pool: list[Path] | None = None) -> str:
    results = folder / "results.json"
    command = json.loads(results.read_text())["command"] if results.is_file() else "(partial run: cells.jsonl only)"
    shares = no_draft_shares(folder)
    repeats = repeat_count(folder)
    views = {f"wall clock, mean over the {repeats} repeats (the harness's `speedup_vs_none`)":
             sample_ratios(folder, "wall_times", best=False),
             f"process CPU time, mean over the {repeats} repeats": sample_ratios(folder, "cpu_times", best=False),
             "wall clock, each sample's fastest repeat": sample_ratios(folder, "wall_times", best=True),
             "process CPU time, all tokens over all seconds (not the harness's mean of per-sample speeds; "
             "for reading only, no target is checked on it)": pooled_ratios(folder, "cpu_times"),
             "process CPU time, paired: none's seconds over the cell's on the same sample in the same repeat, "
             "geometric mean (cancels the machine's slow drift; for reading only, no target is checked on it)":
             paired_ratios(folder, "cpu_times")}
    lines = [f"# Issue 21 targets ({folder.name})", "", f"Command: `{command}`", "",
             "Ratio = tokens/s over specdec `none` of the same run (mean per-sample tokens/s, as the harness).",
             "No-draft share: row-steps that verified no draft node (first repeat's calls).", ""]
    for title, ratios in views.items():
        lines += table(title, ratios, shares)
    # Targets are checked on the harness's own number and on CPU time (the machine was shared).
    for (title, ratio), clock in zip(list(views.items())[:2], ("wall_times", "cpu_times")):
        lines += [f"Targets on: {title}", ""] + aa_floor(ratio) + checks(ratio, unit_speeds(folder, clock)) + [""]
    if pool:
        names = ", ".join(f"`{other.name}`" for other in pool)
        lines += [f"## Pooled with {names}", "",
                  f"The units of this run and of {names} (runs of the same sweep on the same code) read as one run: "
                  "ratios are the mean of every unit of every run over `none`'s, the interval draws from all of them.",
                  ""]
        for title, clock in (("wall clock", "wall_times"), ("process CPU time", "cpu_times")):
            units = pooled_units([folder, *pool], clock)
            ratio = drawn_ratios(units, {c: np.arange(len(v)) for c, v in units["none"].items()})
            lines += table(f"{title}, pooled", ratio, shares)
            lines += [f"Targets on: {title}, pooled", ""] + aa_floor(ratio, "these runs pooled") + checks(ratio, units) + [""]
    text = "\n".join(lines) + "\n"
    (folder / "targets.md").write_text(text)
    return text


def aa_low(ratio: dict[str, dict[str, float]]) -> float | None:
    """The A/A cell's lowest ratio to `none` over the categories and overall (None: no A/A cell in the run)."""
    return min(ratio[AA_LABEL].values()) if AA_LABEL in ratio else None


def aa_floor(ratio: dict[str, dict[str, float]], where: str = "this run") -> list[str]:
    """A line on the run's noise floor, when it has an A/A cell."""
    low = aa_low(ratio)
    if low is None:
        return []
    values = ratio[AA_LABEL]
    high = max(values.values())
    return [f"A/A: `{AA_LABEL}` (plain decoding again, `none`'s work) reads {low:.3f}x "
            f"({min(values, key=values.__getitem__)}) to {high:.3f}x ({max(values, key=values.__getitem__)}) "
            f"of `none` in {where} (one pair of identical cells: a lower bound on the run's noise). A missed target "
            f"whose measured value over its threshold is at least {low:.3f} is within that spread.", ""]


def targets(ratio: dict[str, dict[str, float]]) -> list[tuple[str, Callable[[dict], Reading]]]:
    """The targets that apply to this run (which ones, and the best single drafter auto is held to, are read
    from `ratio`), each with its reader: any ratio table -> (met, measured, measured over threshold)."""
    found: list[tuple[str, Callable[[dict], Reading]]] = []
    goodput = [name for name in BASELINE_OF if name in ratio]

    def at_least(name: str, cat: str, threshold: Callable[[dict], float]) -> Callable[[dict], Reading]:
        return lambda r: (r[name][cat] >= threshold(r), f"{r[name][cat]:.3f}x", r[name][cat] / threshold(r))

    def lowest(name: str) -> Callable[[dict], Reading]:
        def read(r: dict) -> Reading:
            worst = min(CATEGORIES, key=lambda c: r[name][c])
            return r[name][worst] >= 0.97, f"lowest {worst} {r[name][worst]:.3f}", r[name][worst] / 0.97
        return read

    for name in goodput:
        found.append((f"{name} >= 0.97x none overall and in every category", lowest(name)))
        own = BASELINE_OF[name]
        if own in ratio:
            for cat in CATEGORIES:
                before = ratio[own][cat]
                if before > 1.05:
                    found.append((f"{name} {cat}: beat none by >5% with its own schedule ({before:.3f}x); "
                                  "keeps >= 97% of that speedup",
                                  at_least(name, cat, lambda r, own=own, cat=cat: 0.97 * r[own][cat])))
    if "ppd" in ratio:
        found.append(("ppd >= 1.0x none overall", at_least("ppd", "overall", lambda r: 1.0)))
    if "auto" in ratio and goodput:
        singles = [n for n in goodput] + [BASELINE_OF[n] for n in goodput if BASELINE_OF[n] in ratio]
        best = max(singles, key=lambda n: ratio[n]["overall"])
        found.append((f"auto >= best single drafter overall within 2% (best: {best} {ratio[best]['overall']:.3f})",
                      at_least("auto", "overall", lambda r, best=best: 0.98 * r[best]["overall"])))
        for cat in CATEGORIES[:-1]:
            best_cat = max(singles, key=lambda n: ratio[n][cat])
            found.append((f"auto within 5% of the best in {cat} (best: {best_cat} {ratio[best_cat][cat]:.3f})",
                          at_least("auto", cat, lambda r, b=best_cat, cat=cat: 0.95 * r[b][cat])))
    return found


def checks(ratio: dict[str, dict[str, float]], units: dict[str, dict[str, list[float]]] | None = None) -> list[str]:
    """The targets as a table: met, measured, whether a miss lies within the A/A spread (with an A/A cell), and
    (given the run's `units`) the paired bootstrap interval of measured over threshold and what it says."""
    found = targets(ratio)
    readings = [read(ratio) for _, read in found]
    low = aa_low(ratio)
    intervals = bootstrap_overs(units, [read for _, read in found]) if units else None
    header = ["target", "met", "measured"] + (["a miss within the A/A spread"] if low is not None else []) + (
        [f"measured / threshold, {COVERAGE:.0%} interval", "told apart"] if intervals else [])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for index, ((what, _), (ok, measured, over)) in enumerate(zip(found, readings)):
        cells = [what, "yes" if ok else "**no**", measured]
        if low is not None:
            cells.append("" if ok else ("yes" if over >= low else "no") + f" ({over:.3f})")
        if intervals:
            a, b = intervals[index]
            cells += [f"{a:.3f}-{b:.3f}", "met" if a >= 1.0 else "missed" if b < 1.0 else "no"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


if __name__ == "__main__":
    folders = [Path(arg) for arg in sys.argv[1:]] or [Path("benchmarks/results/goodput/spec_bench")]
    print(main(folders[0], folders[1:]))
