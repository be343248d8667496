"""Paired ratios from a Spec-Bench sweep's `cells.jsonl`: per category, the geometric mean over calls and repeats of
cell B's process CPU time over cell A's for the same call in the same repeat (the harness interleaves cells call by
call, so both ran minutes apart at most). The machine's slow drifts cancel in the pair: within a call and repeat the
cells' deviations from their own means correlate 0.54-0.77 on this machine (printed first), while a single call's
CPU time spreads 14-16% (sd of its log) across the three repeats.

    .venv/bin/python benchmarks/results/goodput/checks_s64/paired.py /work/runs/s62_sb
"""
import json
import sys

import numpy as np

PAIRS = [("draft_model", "draft_model(schedule=heuristic)"), ("layer_skip", "layer_skip(schedule=own)"),
         ("anpd", "anpd(schedule=constant)"), ("ppd_draft_model", "ppd_draft_model(schedule=constant)")]
ALONE = ["anpd", "draft_model", "layer_skip", "ppd", "ppd_draft_model", "auto"]


def main(folder: str) -> None:
    cells = {c["cell"]["label"]: c for c in map(json.loads, open(f"{folder}/cells.jsonl"))}
    none = cells["none"]
    categories = [none["samples"][call["rows"][0]]["category"] for call in none["calls"]]

    def logs(label: str, index: int) -> np.ndarray:
        return np.log(np.array(cells[label]["calls"][index]["cpu_times"]))

    def deviations(label: str) -> np.ndarray:
        return np.concatenate([logs(label, i) - logs(label, i).mean() for i in range(len(categories))])

    for other in ("anpd", "draft_model", "auto"):
        x, y = deviations("none"), deviations(other)
        print(f"# none and {other}: correlation of per-call deviations {np.corrcoef(x, y)[0, 1]:.2f}, "
              f"sd {x.std():.3f} / {y.std():.3f}")

    def paired(a: str, b: str, category: str | None) -> float:
        chosen = [i for i, c in enumerate(categories) if category is None or c == category]
        return float(np.exp(np.mean(np.concatenate([logs(b, i) - logs(a, i) for i in chosen]))))

    order = list(dict.fromkeys(categories))
    print("| A | over B | " + " | ".join(order) + " | all calls |")
    print("|---|---|" + "---|" * (len(order) + 1))
    for a, b in [(a, "none") for a in ALONE if a in cells] + [p for p in PAIRS if p[0] in cells and p[1] in cells]:
        print(f"| {a} | {b} | " + " | ".join(f"{paired(a, b, c):.3f}" for c in order) + f" | {paired(a, b, None):.3f} |")


if __name__ == "__main__":
    main(sys.argv[1])
