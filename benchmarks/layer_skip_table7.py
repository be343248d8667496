"""Replicate Draft & Verify's Table 7 (searched vs hand-picked skip sets) and Table 3 (adaptive exit vs
fixed draft length) for `layer_skip` on one model, plus the search's best-so-far curve.

For a searched skip set with a attention and m MLP blocks, the hand-picked sets skip the same counts:
first (layers 0..), middle (centred), last (..L-1) and random (seeded draws). Every configuration runs
greedy generation over the same evaluation prompts (HumanEval prompts + GSM8K *test* questions, never
used by the search) in one process; each repeat times the plain-decoding baseline and then every
configuration, and speedups are per-repeat ratios to that repeat's baseline (median over repeats).

    python benchmarks/layer_skip_table7.py --model default --skip-file specdec/zoo/default/layer_skip.json \
        --search-cache benchmarks/results/layer_skip/search_cache.json --out-dir benchmarks/results/layer_skip

`--write-calibration FILE` writes the calibration prompts used for the search (stdlib source chunks and
GSM8K *train* questions) and exits.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from specdec.benchmarks.datasets import default_path, load_gsm8k, load_humaneval
from specdec.benchmarks.machine import machine_info
from specdec.drafters.layerskip.skipset import SkipSet, read_skip_file

from specdec.data import data_file
from specdec.tools.layer_search import SearchSettings, default_calibration_texts, measure


def hand_picked_sets(searched: SkipSet, layers: int, random_draws: int, seed: int) -> dict[str, SkipSet]:
    """First / middle / last / random sets with the searched set's attention and MLP counts."""
    a, m = len(searched.attention), len(searched.mlp)

    def middle(count: int) -> tuple[int, ...]:
        start = (layers - count) // 2
        return tuple(range(start, start + count))

    sets = {
        "first": SkipSet(attention=tuple(range(a)), mlp=tuple(range(m))),
        "middle": SkipSet(attention=middle(a), mlp=middle(m)),
        "last": SkipSet(attention=tuple(range(layers - a, layers)), mlp=tuple(range(layers - m, layers))),
    }
    rng = random.Random(seed)
    for draw in range(random_draws):
        sets[f"random{draw + 1}"] = SkipSet(attention=tuple(rng.sample(range(layers), a)),
                                            mlp=tuple(rng.sample(range(layers), m)))
    return sets


def best_of_budget(cache: dict, attention: int, mlp: int) -> SkipSet | None:
    """The best set (by the search's objective) among those the search evaluated that skip exactly
    `attention` attention and `mlp` MLP blocks; None when it evaluated none."""
    best, best_value = None, float("-inf")
    for key, entry in cache["evaluations"].items():
        skip = SkipSet.from_mask(tuple(int(c) for c in key))
        if (len(skip.attention), len(skip.mlp)) == (attention, mlp) and entry["tokens_per_second"] > best_value:
            best, best_value = skip, entry["tokens_per_second"]
    return best


def evaluation_prompts(tokenizer: Any, per_source: int, humaneval: Path, gsm8k: Path) -> tuple[list[list[int]], str]:
    samples = load_humaneval(humaneval)[:per_source] + load_gsm8k(gsm8k)[:per_source]
    prompts = [list(tokenizer(s.turns[0])["input_ids"]) for s in samples]
    return prompts, f"first {per_source} of {humaneval} and first {per_source} of {gsm8k} (Question/Answer frame)"


def write_calibration(path: Path, stdlib_chunks: int, gsm8k_train: Path, gsm8k_lines: int) -> None:
    """Calibration prompts for the search: stdlib source chunks + the first GSM8K train questions."""
    records = [{"prompt": text, "source": "stdlib"} for text in default_calibration_texts(stdlib_chunks)]
    with gsm8k_train.open() as handle:
        for line, _ in zip(handle, range(gsm8k_lines)):
            records.append({"prompt": f"Question: {json.loads(line)['question']}\nAnswer:", "source": "gsm8k-train"})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def run_configs(model: Any, prompts: list[list[int]], configs: dict[str, tuple[SkipSet, SearchSettings]],
                baseline_settings: SearchSettings, repeats: int, ranking: list[int] | None = None) -> dict[str, dict]:
    """Each repeat: baseline first, then every configuration; speedup = ratio to that repeat's baseline."""
    measure(model, prompts[:1], None, baseline_settings)  # warm-up
    rows: dict[str, dict] = {name: {"runs": []} for name in ["baseline", *configs]}
    for repeat in range(repeats):
        base = measure(model, prompts, None, baseline_settings)
        rows["baseline"]["runs"].append({**asdict(base), "speedup_wall": 1.0, "speedup_cpu": 1.0})
        print(f"[repeat {repeat + 1}/{repeats}] baseline {base.wall_tokens_per_second:.1f} tok/s wall, "
              f"{base.cpu_tokens_per_second:.1f} tok/s cpu", flush=True)
        for name, (skip, settings) in configs.items():
            result = measure(model, prompts, skip, settings, ranking=ranking)
            wall = result.wall_tokens_per_second / base.wall_tokens_per_second
            cpu = result.cpu_tokens_per_second / base.cpu_tokens_per_second
            rows[name]["runs"].append({**asdict(result), "speedup_wall": wall, "speedup_cpu": cpu})
            print(f"  {name:<16} speedup wall {wall:.3f} cpu {cpu:.3f}  tau {result.tau:.2f} "
                  f" acceptance {result.acceptance:.1%}", flush=True)
    for name, row in rows.items():
        runs = row["runs"]
        for clock in ("wall", "cpu"):
            row[f"speedup_{clock}"] = statistics.median(r[f"speedup_{clock}"] for r in runs)
            row[f"tokens_per_second_{clock}"] = statistics.median(r[f"{clock}_tokens_per_second"] for r in runs)
        row["tau"] = runs[-1]["tau"]  # greedy: identical in every repeat
        row["acceptance"] = runs[-1]["acceptance"]
        row["draft_forwards_per_token"] = runs[-1]["draft_forwards"] / runs[-1]["tokens"]
        # Wall-clock cost split from the engine's stats (median over repeats): explains the speedups.
        row["draft_ms_per_draft_forward"] = statistics.median(
            1000 * r["draft_seconds"] / r["draft_forwards"] for r in runs) if runs[-1]["draft_forwards"] else 0.0
        row["verify_ms_per_step"] = statistics.median(1000 * r["verify_seconds"] / r["steps"] for r in runs)
        row["drafted_per_step"] = runs[-1]["draft_forwards"] / runs[-1]["steps"]
        row["speedup_cpu_runs"] = [r["speedup_cpu"] for r in runs]
        if name in configs:
            row["skip"] = configs[name][0].model_dump()
            row["settings"] = configs[name][1].model_dump()
    return rows


def plot_search(cache: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    history = cache["history"]
    baseline = cache["baseline"]["tokens_per_second"]
    cost = cache.get("settings", {}).get("objective") == "cost"
    what = "cost model's prediction" if cost else "search timing"
    iterations = [h["iteration"] + 1 for h in history]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    fresh = [(i, h["target"] / baseline) for i, h in zip(iterations, history) if not h["cached"]]
    ax.scatter([i for i, _ in fresh], [s for _, s in fresh], s=10, color="0.6",
               label="skip set evaluated this iteration")
    ax.plot(iterations, [h["best_so_far"] / baseline for h in history], color="C0", lw=2, label="best so far")
    ax.axhline(1.0, color="C3", ls="--", lw=1, label="plain greedy")
    ax.set_xlabel("BO iteration")
    ax.set_ylabel(f"speedup over plain greedy ({what})")
    ax.set_title(f"layer_skip search: {len(cache['evaluations'])} distinct skip sets evaluated")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def searched_row(name: str, table: dict) -> str | None:
    """The searched set a row is compared with: its budget's ("A+M: searched") or the shipped one."""
    if name == "baseline" or name.endswith("searched") or name == "searched (BO)":
        return None
    prefix = name.split(": ")[0] + ": searched" if ": " in name else "searched (BO)"
    return prefix if prefix in table else None


def markdown(results: dict) -> str:
    table7, adaptive = results["table7"], results["adaptive_vs_fixed"]
    lines = ["| skip set | attention skipped | MLP skipped | speedup (CPU time; min-max over repeats) | speedup (wall) "
             "| tau | acceptance | searched / this, paired per repeat (CPU; min-max) |",
             "|---|---|---|---|---|---|---|---|"]
    for name, row in table7.items():
        skip = row.get("skip", {"attention": [], "mlp": []})
        label = "plain greedy (none)" if name == "baseline" else name
        spread = row["speedup_cpu_runs"]
        ref = searched_row(name, table7)
        paired = ""
        if ref is not None:  # both measured in the same repeat against the same baseline
            ratios = [a / b for a, b in zip(table7[ref]["speedup_cpu_runs"], spread)]
            paired = f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})"
        lines.append(f"| {label} | {list(skip['attention'])} | {list(skip['mlp'])} | {row['speedup_cpu']:.3f}x "
                     f"({min(spread):.2f}-{max(spread):.2f}) | "
                     f"{row['speedup_wall']:.3f}x | {row['tau']:.2f} | {row['acceptance']:.1%} | {paired} |")
    lines += ["", "Wall-clock cost per forward (engine stats, median over repeats; the baseline's verify is a "
              "plain 1-token forward):", "",
              "| configuration | draft ms per draft forward | verify ms per step | draft forwards per step |",
              "|---|---|---|---|"]
    for section in (table7, adaptive):
        for name, row in section.items():
            if section is adaptive and name == "baseline":
                continue
            lines.append(f"| {name} | {row['draft_ms_per_draft_forward']:.1f} | {row['verify_ms_per_step']:.1f} | "
                         f"{row['drafted_per_step']:.2f} |")
    lines += ["", "| draft length | speedup (CPU time) | speedup (wall) | tau | acceptance | draft forwards per token |",
              "|---|---|---|---|---|---|"]
    for name, row in adaptive.items():
        if name == "baseline":
            continue
        lines.append(f"| {name} | {row['speedup_cpu']:.3f}x | {row['speedup_wall']:.3f}x | {row['tau']:.2f} | "
                     f"{row['acceptance']:.1%} | {row['draft_forwards_per_token']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--skip-file", help="the searched skip set (default: the one shipped with the model)")
    parser.add_argument("--search-cache", help="search cache JSON for the best-so-far plot")
    parser.add_argument("--out-dir", default="benchmarks/results/layer_skip")
    parser.add_argument("--per-source", type=int, default=4, help="prompts from HumanEval and from GSM8K test each")
    parser.add_argument("--humaneval", type=Path, default=None)
    parser.add_argument("--gsm8k", type=Path, default=None, help="GSM8K test file (evaluation)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--random-draws", type=int, default=3)
    parser.add_argument("--fixed", type=int, nargs="*", default=[1, 2, 4, 8], help="fixed draft lengths to compare")
    parser.add_argument("--budgets", nargs="*", default=[], metavar="A:M",
                        help="also compare, per skip budget of A attention + M MLP blocks, the best set of that "
                             "budget the search evaluated (needs --search-cache) with first/middle/last/random sets "
                             "of the budget: Table 7 at sizes other than the winner's")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--write-calibration", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    if args.write_calibration is not None:
        write_calibration(args.write_calibration, 4, data_file("gsm8k_train"), 4)
        print(f"wrote {args.write_calibration}")
        return 0

    from specdec.drafters.layerskip.skipset import find_shipped_skip_set, load_skip_set

    from specdec.api import load_model

    model, tokenizer = load_model(args.model)
    skip_file = Path(args.skip_file) if args.skip_file else find_shipped_skip_set(model)
    if skip_file is None:
        raise SystemExit("no skip set: run `specdec search-layers` first or pass --skip-file")
    searched = load_skip_set(skip_file, model)
    layers = int(model.config.num_hidden_layers)
    prompts, prompt_desc = evaluation_prompts(tokenizer, args.per_source, args.humaneval or default_path("humaneval"),
                                              args.gsm8k or default_path("gsm8k"))
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()

    # The drafter's defaults: the draft vocabulary the skip file recommends (chosen on calibration data).
    skip_data = read_skip_file(skip_file)
    ranking = skip_data.get("token_ranking")
    draft_vocab = int(skip_data.get("draft_vocab") or 0) if ranking else 0
    adaptive = SearchSettings(max_new_tokens=args.max_new_tokens, max_draft=12, gamma0=0.6, alpha=0.9,
                              draft_vocab=draft_vocab)
    sets = {"searched (BO)": searched}
    if searched.attention or searched.mlp:  # hand-picked sets of an empty budget would all be the searched set
        sets.update(hand_picked_sets(searched, layers, args.random_draws, args.seed))
    search_cache = json.loads(Path(args.search_cache).read_text()) if args.search_cache else None
    for budget in args.budgets:
        if search_cache is None:
            raise SystemExit("--budgets needs --search-cache")
        a, m = (int(n) for n in budget.split(":"))
        best = best_of_budget(search_cache, a, m)
        if best is None:
            raise SystemExit(f"the search evaluated no set with {a} attention + {m} MLP blocks skipped")
        sets[f"{a}+{m}: searched"] = best
        sets.update({f"{a}+{m}: {name}": skip
                     for name, skip in hand_picked_sets(best, layers, args.random_draws, args.seed).items()})
    configs = {name: (skip, adaptive) for name, skip in sets.items()}
    if draft_vocab:
        configs["searched, full vocabulary"] = (searched, adaptive.model_copy(update={"draft_vocab": 0}))
    # What the lean draft forward buys: its fp32 variant (the target's own weights) and transformers'
    # forward with the blocks swapped out (the drafter's path before the lean forward existed).
    configs["searched, lean fp32 weights"] = (searched, adaptive.model_copy(update={"draft_weights": "model"}))
    configs["searched, transformers forward"] = (searched, adaptive.model_copy(update={"fast_forward": False}))
    table7 = run_configs(model, prompts, configs, adaptive, args.repeats, ranking)
    fixed_configs: dict[str, tuple[SkipSet, SearchSettings]] = {"adaptive (K<=12)": (searched, adaptive)}
    for k in args.fixed:
        fixed_configs[f"fixed K={k}"] = (searched, adaptive.model_copy(update={"max_draft": k, "adaptive": False}))
    adaptive_rows = run_configs(model, prompts, fixed_configs, adaptive, args.repeats, ranking)

    info = machine_info()
    results = {
        "command": "python " + " ".join([sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
        "model": str(args.model), "model_layers": layers, "skip_file": str(skip_file),
        "skip_file_metadata": skip_data.get("metadata", {}), "draft_vocab": draft_vocab,
        "prompts": prompt_desc, "num_prompts": len(prompts), "max_new_tokens": args.max_new_tokens,
        "repeats": args.repeats, "threads": args.threads, "seconds": round(time.time() - started, 1),
        "machine": info, "table7": table7, "adaptive_vs_fixed": adaptive_rows,
    }
    (out_dir / "table7.json").write_text(json.dumps(results, indent=1) + "\n")
    (out_dir / "table7.md").write_text(markdown(results))
    if search_cache is not None:
        plot_search(search_cache, out_dir / "search_curve.png")
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
