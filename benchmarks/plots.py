"""matplotlib figures of a sweep: speedup by category and method, tau distribution, acceptance by
draft position. One set of PNGs per (model, dataset) group."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402

from .metrics import OVERALL  # noqa: E402


def _ok(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in cells if c["status"] == "ok"]


def _name(cell: dict[str, Any]) -> str:
    return cell["label"] + (f" b={cell['batch_size']}" if cell["batch_size"] != 1 else "")


def speedup_by_category(cells: list[dict[str, Any]], path: Path, title: str) -> Path | None:
    cells = [c for c in _ok(cells) if c["categories"][OVERALL]["speedup"] is not None]
    if not cells:
        return None
    categories = [k for k in cells[0]["categories"] if k != OVERALL] + [OVERALL]
    width = 0.8 / len(cells)
    fig, ax = plt.subplots(figsize=(max(9, 1.3 * len(categories) + 0.25 * len(cells) * len(categories)), 5.5))
    cmap = plt.get_cmap("tab20")
    for index, cell in enumerate(cells):
        values = [cell["categories"].get(k, {}).get("speedup") or 0.0 for k in categories]
        xs = [x + (index - (len(cells) - 1) / 2) * width for x in range(len(categories))]
        ax.bar(xs, values, width=width, label=_name(cell), color=cmap(index % 20))
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(categories)), categories, rotation=20)
    ax.set_ylabel(f"speedup vs {cells[0]['baseline']} (ratio of mean tok/s)")
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def tau_distribution(cells: list[dict[str, Any]], path: Path, title: str) -> Path | None:
    cells = [c for c in _ok(cells) if c.get("per_sample_tau")]
    if not cells:
        return None
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(cells) + 1.8))
    ax.boxplot([c["per_sample_tau"] for c in cells], orientation="horizontal", showmeans=True)
    ax.set_yticks(range(1, len(cells) + 1), [_name(c) for c in cells])
    ax.set_xlabel("tau per sample: tokens committed per step, bonus included (1.0 = no speculation)")
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)


def acceptance_by_position(cells: list[dict[str, Any]], path: Path, title: str) -> Path | None:
    cells = [c for c in _ok(cells) if (c["categories"][OVERALL].get("decode") or {}).get("acceptance_by_position")]
    if not cells:
        return None
    fig, ax = plt.subplots(figsize=(9, 5))
    markers = "osD^v<>ph*"
    for index, cell in enumerate(cells):
        rates = cell["categories"][OVERALL]["decode"]["acceptance_by_position"]
        points = [(d + 1, r) for d, r in enumerate(rates) if r is not None]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker=markers[index % len(markers)], label=_name(cell))
    ax.set_xlabel("draft position (depth in the draft tree)")
    ax.set_ylabel("acceptance rate at that position")
    ax.set_ylim(0, 1.05)
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def write_plots(summary_cells: list[dict[str, Any]], out_dir: Path) -> list[Path]:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for cell in summary_cells:
        groups.setdefault((cell["model"], cell["dataset"]), []).append(cell)
    written = []
    for (model, dataset), cells in groups.items():
        suffix = "" if len(groups) == 1 else f"_{model}_{dataset}".replace("/", "_").replace(":", "_")
        title = f"{model} on {dataset}"
        for fn, stem in ((speedup_by_category, "speedup_by_category"), (tau_distribution, "tau_distribution"),
                         (acceptance_by_position, "acceptance_by_position")):
            path = fn(cells, out_dir / f"{stem}{suffix}.png", title)
            if path is not None:
                written.append(path)
    return written
