"""Multi-sample speculative decoding (EMS-SD): throughput of batched autoregressive decoding, the
vanilla padded method and the unpadded cache, at several batch sizes, side by side in one process.

    python -m specdec.benchmarks.batching --out benchmarks/results/batching

EMS-SD's protocol: one fixed list of prompts (here the first `--prompts` Spec-Bench prompts, mixed
categories and lengths); at batch size B it is cut into consecutive batches of B, each run until all
its rows finish (static batching), so every B generates for the same prompts. Reported per cell,
summed over its batches: generated tokens per CPU-second end to end, and decode-only (EMS-SD's TPS:
CPU time minus prefill and drafter setup), tau, the padded mode's cache padding ratio (EMS-SD's R:
holes added while decoding / generated tokens), the verification inputs' padding ratio, and the KV
cache memory (used: the largest [rows, slots] region one forward read, i.e. what an exactly-sized
cache needs; allocated: the preallocated buffers). Every row's output is checked against batched
autoregressive decoding (greedy, so they must be equal). Each cell runs `--warmup` times untimed before its
timed repeats (interleaved across the cells of a batch size); the one-off work of its first call (the cost
model measuring this batch size's verify curve) is reported apart. Each cell (mode, drafter) keeps a cost model of
its own over its runs and batch sizes (`CellCosts`), so no cell's decisions follow from what the cells run before it
taught the controller. The results README is written by hand from `table.md`, `result.json` and `throughput.png`;
`benchmarks/batching_targets.py` checks issue 21's targets on a run (its `targets.md`). With `--aa`, batched
autoregressive decoding runs twice per batch size (the second cell labelled `none-again`, interleaved with the rest):
how far two cells doing the same work read apart in the run, the noise a speedup is read against.

Continuous cells (`--modes continuous continuous-adaptive`) leave EMS-SD's protocol for serving's: the
whole list in one call with at most B rows at once, a finished row's place taken by the next prompt
(`max_batch_size=B`), so one slow row no longer holds up a whole batch; autoregressive decoding is then
run that way too. `speedup.png` compares them with the static cells.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

import specdec
from specdec.costs import CostModel, device_key
from specdec.target import model_device

from .datasets import PromptBuilder, load_dataset
from .machine import machine_info
from .oracle import prompt_key, register_oracle

MODES = ("autoregressive", "padded", "unpadded-kv", "unpadded", "unpadded-adaptive", "continuous",
         "continuous-adaptive")
# "continuous", "continuous-adaptive": not EMS-SD's static batches but continuous batching
# (`max_batch_size=B`): the whole prompt list in one call, at most B rows at once, a finished row's
# place taken by the next prompt. Autoregressive decoding then runs the same way too ("continuous"
# with drafter none) as well as in static batches.
# "unpadded-adaptive": the unpadded mode with each drafter's per-row rules that draft less where
# guesses fail (a batch waits for its slowest row, and on a CPU every verified token costs compute).
# anpd: the heuristic length and no drafting from one-token n-gram matches (min_match=2), the best of
# {paper, heuristic, min_match=2, both} at B=4 and 8 on 32 other Spec-Bench prompts; draft_model: its
# confidence exit (Draft & Verify, gamma 0.4).
ADAPTIVE_OPTIONS = {"anpd": {"schedule": "heuristic", "min_match": 2}, "draft_model": {"schedule": "confidence"}}
# Oracle cells ("oracle@p", unpadded mode): a drafter of known quality that guesses the autoregressive
# output with per-token accuracy p. They show what acceptance speculation needs at each batch size on
# this machine, apart from any real drafter's quality.
ORACLE_PREFIX = "oracle@"
#: The A/A cell's drafter label (`--aa`): batched autoregressive decoding again, the reference cell's work.
AA_LABEL = "none-again"


def load_prompts(tokenizer, context: int, count: int, new_tokens: int, max_prompt: int) -> list[list[int]]:
    samples = load_dataset("spec_bench", per_category=max(1, count // 6 + 1))
    builder = PromptBuilder(tokenizer, min(context, max_prompt + new_tokens), new_tokens)
    prompts = [builder.encode([], sample.turns[0])[0] for sample in samples]
    return prompts[:count]


def run_cell(target, prompts, mode: str, drafter: str, options: dict, new_tokens: int,
             max_batch_size: int | None = None, cost_model: CostModel | None = None) -> specdec.GenerationOutput:
    """mode: autoregressive, padded (vanilla), unpadded (EMS-SD: unpadded cache + packed inputs),
    unpadded-kv (the unpadded cache with inputs padded to the widest row: EMS-SD's ablation),
    unpadded-adaptive (unpadded with the drafter's adaptive draft length), or continuous[-adaptive]
    (unpadded, `max_batch_size` rows at once, refilled from `prompts`). `cost_model`: the cell's own
    (`CellCosts`); None prices with the one kept for the model."""
    kwargs = dict(max_new_tokens=new_tokens, verifier="exact", eos_token_id=[], max_batch_size=max_batch_size,
                  cost_model=cost_model)
    if drafter.startswith(ORACLE_PREFIX):
        options = {**options, "accuracy": float(drafter[len(ORACLE_PREFIX):])}
        drafter = "oracle"
    if mode == "autoregressive":
        return specdec.generate(target, prompts, drafter="none", **kwargs)
    if mode.endswith("-adaptive"):
        options = {**options, **ADAPTIVE_OPTIONS.get(drafter, {})}
    batch_mode = "padded" if mode == "padded" else "unpadded"
    packed = False if mode == "unpadded-kv" else None
    return specdec.generate(target, prompts, drafter=drafter, drafter_options=options, batch_mode=batch_mode,
                            packed_inputs=packed, **kwargs)


class CellCosts:
    """One cost model per cell (mode, drafter), kept across its warm-ups, repeats and batch sizes, as a server
    running that one method would keep it. Sharing the model's own made a cell's decisions depend on the cells
    run before it in the process (pooled acceptance, probe streaks, batch rests and verify corrections learnt
    from other drafters' steps): draft_model at B=2 never drafted after anpd's cells (0.92x of batched AR) and
    drafted alone (1.27-1.39x). The Spec-Bench harness does the same (`execute.specdec_method`)."""

    def __init__(self, target: torch.nn.Module) -> None:
        self._device = device_key(model_device(target))
        self._models: dict[tuple[str, str], CostModel] = {}

    def __call__(self, mode: str, drafter: str) -> CostModel:
        key = (mode, drafter)
        if key not in self._models:
            self._models[key] = CostModel(self._device)
        return self._models[key]


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _cell_row(batch: int, mode: str, drafter: str, runs: list[tuple[float, float, float]],
              outputs: list[specdec.GenerationOutput], reference: list[list[int]]) -> dict:
    """One table row from a cell's repeats (wall, CPU, setup CPU) and its last run's batch outputs."""
    stats = [out.stats for out in outputs]
    tokens = sum(s.new_tokens for s in stats)
    slots = sum(s.input_slots for s in stats)
    cpu = _median([c for _, c, _ in runs])
    decode_cpu = _median([c - setup for _, c, setup in runs])
    wall = min(w for w, _, _ in runs)
    drafted = sum(s.drafted_tokens for s in stats)
    return {
        "batch": batch, "mode": mode, "drafter": drafter, "batches": len(outputs), "tokens": tokens,
        "seconds": wall, "cpu_seconds": cpu, "decode_cpu_seconds": decode_cpu,
        "cpu_seconds_all": [c for _, c, _ in runs], "setup_cpu_seconds_all": [s for _, _, s in runs],
        "seconds_all": [w for w, _, _ in runs],
        "tokens_per_second": tokens / wall, "tokens_per_cpu_second": tokens / cpu,
        "decode_tokens_per_cpu_second": tokens / decode_cpu,
        "tau": tokens / sum(s.steps for s in stats),
        "acceptance_rate": sum(s.accepted_tokens for s in stats) / drafted if drafted else 0.0,
        "equal_to_autoregressive": [seq for out in outputs for seq in out.sequences] == reference,
        "kv_padding_ratio": sum(s.kv_holes_added for s in stats) / tokens if tokens else 0.0,
        "input_padding_ratio": 1.0 - sum(s.useful_input_slots for s in stats) / slots if slots else 0.0,
        "kv_cache_bytes": max(s.kv_cache_bytes for s in stats), "kv_used_bytes": max(s.kv_used_bytes for s in stats),
        "batch_steps": sum(s.batch_steps for s in stats),
        "row_tau": [tau for s in stats for tau in s.row_tau],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--prompts", type=int, default=16,
                        help="the fixed prompt list, cut into consecutive batches of B at every batch size")
    parser.add_argument("--drafters", nargs="+", default=["anpd", "draft_model"])
    parser.add_argument("--modes", nargs="+", default=list(MODES[1:]),
                        choices=MODES[1:], help="speculative cells per drafter (autoregressive always runs)")
    parser.add_argument("--oracle-accuracies", type=float, nargs="*", default=[1.0, 0.8, 0.6, 0.4],
                        help="oracle cells (unpadded mode): per-token chance that the oracle's guess is right")
    parser.add_argument("--oracle-length", type=int, default=3, help="tokens the oracle guesses per step")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--max-prompt-tokens", type=int, default=384, help="left-truncate prompts to this")
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs per cell, interleaved across the cells of a batch size so that changing "
                             "load from other jobs hits every cell alike; the median CPU time is reported")
    parser.add_argument("--warmup", type=int, default=1,
                        help="untimed runs of every cell at each batch size before the timed repeats: a cell's "
                             "first call pays one-off work (the cost model measuring this batch size's verify "
                             "curve, ~2-4 s here), which would otherwise land in one of its repeats; its CPU "
                             "seconds are reported apart (first_call_setup_cpu_seconds)")
    parser.add_argument("--aa", action="store_true",
                        help=f"run batched autoregressive decoding twice per batch size (the second labelled "
                             f"{AA_LABEL}): the run's noise between two cells doing the same work")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (1 gives steadier numbers when other jobs share the CPU)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    pair = specdec.load_default()
    target, tokenizer = pair.target, pair.tokenizer
    options = {"anpd": {}, "draft_model": {"model": pair.draft}}
    context = target.config.max_position_embeddings
    all_prompts = load_prompts(tokenizer, context, args.prompts, args.new_tokens, args.max_prompt_tokens)
    specdec.generate(target, all_prompts[:2], drafter="none", max_new_tokens=4)  # warm-up
    if args.oracle_accuracies:
        register_oracle()
        greedy = specdec.generate(target, all_prompts, drafter="none", max_new_tokens=args.new_tokens,
                                  eos_token_id=[]).sequences
        oracle = {"continuations": {prompt_key(p): seq for p, seq in zip(all_prompts, greedy)},
                  "draft_length": args.oracle_length}
        options.update({f"{ORACLE_PREFIX}{accuracy:g}": oracle for accuracy in args.oracle_accuracies})
    result = {"command": "python -m specdec.benchmarks.batching " + " ".join(argv or sys.argv[1:]),
              "machine": machine_info(), "new_tokens": args.new_tokens, "repeats": args.repeats,
              "warmup": args.warmup,
              "prompt_lengths": [len(p) for p in all_prompts], "rows": []}

    rows = result["rows"]
    cell_costs = CellCosts(target)
    for batch in args.batch_sizes:
        batches = [all_prompts[i : i + batch] for i in range(0, len(all_prompts), batch)]
        continuous = any(m.startswith("continuous") for m in args.modes)
        cells = ([("autoregressive", "none")] + ([("autoregressive", AA_LABEL)] if args.aa else [])
                 + ([("continuous", "none")] if continuous else [])
                 + [(m, d) for d in args.drafters for m in args.modes]
                 + [("unpadded", f"{ORACLE_PREFIX}{accuracy:g}") for accuracy in args.oracle_accuracies])
        runs: dict[tuple[str, str], list[tuple[float, float, float]]] = {cell: [] for cell in cells}
        outputs: dict[tuple[str, str], list[specdec.GenerationOutput]] = {}
        first_setup: dict[tuple[str, str], float] = {cell: 0.0 for cell in cells}
        for repeat in range(-args.warmup, args.repeats):
            for mode, drafter in cells:
                start, cpu_start = time.perf_counter(), time.process_time()
                if mode.startswith("continuous"):
                    outs = [run_cell(target, all_prompts, mode, drafter, options.get(drafter, {}), args.new_tokens,
                                     max_batch_size=batch, cost_model=cell_costs(mode, drafter))]
                else:
                    outs = [run_cell(target, prompts, mode, drafter, options.get(drafter, {}), args.new_tokens,
                                     cost_model=cell_costs(mode, drafter)) for prompts in batches]
                setup = sum(out.stats.setup_cpu_time for out in outs)
                if repeat < 0:  # a warm-up run: only its one-off work is kept
                    first_setup[mode, drafter] += setup
                    continue
                runs[mode, drafter].append((time.perf_counter() - start, time.process_time() - cpu_start, setup))
                outputs[mode, drafter] = outs
        reference = [seq for out in outputs["autoregressive", "none"] for seq in out.sequences]  # not the A/A cell
        for mode, drafter in cells:
            row = _cell_row(batch, mode, drafter, runs[mode, drafter], outputs[mode, drafter], reference)
            row["first_call_setup_cpu_seconds"] = first_setup[mode, drafter]
            rows.append(row)
            flag = "" if row["equal_to_autoregressive"] else "  <-- OUTPUT MISMATCH"
            print(f"B={batch:<3} {mode:<17} {drafter:<12} {row['tokens_per_cpu_second']:8.1f} tok/cpu-s "
                  f"{row['decode_tokens_per_cpu_second']:8.1f} decode tok/cpu-s  tau {row['tau']:.2f}"
                  f"  kv pad {row['kv_padding_ratio']:.1%}  input pad {row['input_padding_ratio']:.1%}"
                  f"  kv used {row['kv_used_bytes'] / 2**20:.1f} MiB{flag}", flush=True)
        if args.out is not None:  # after every batch size, so an interrupted sweep keeps what it measured
            result["machine"]["load_average_end"] = _load_average()
            write_outputs(result, args.out)
    return 0 if all(r["equal_to_autoregressive"] for r in rows) else 1


def _load_average() -> list[float] | None:
    try:
        import os

        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def write_outputs(result: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(result, indent=2))
    rows = result["rows"]
    lines = ["| B | batches | mode | drafter | tok/CPU-s | speedup vs AR | decode tok/CPU-s | decode speedup vs AR | "
             "tau | acceptance | KV padding ratio | input padding | KV used MiB | KV allocated MiB | equal | "
             "first call's setup CPU s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    ar = reference_rows(rows)
    for r in rows:
        base = ar[r["batch"]]
        lines.append(f"| {r['batch']} | {r['batches']} | {r['mode']} | {r['drafter']} | {r['tokens_per_cpu_second']:.1f} | "
                     f"{r['tokens_per_cpu_second'] / base['tokens_per_cpu_second']:.2f}x | "
                     f"{r['decode_tokens_per_cpu_second']:.1f} | "
                     f"{r['decode_tokens_per_cpu_second'] / base['decode_tokens_per_cpu_second']:.2f}x | "
                     f"{r['tau']:.2f} | {r['acceptance_rate']:.0%} | {r['kv_padding_ratio']:.1%} | {r['input_padding_ratio']:.1%} | "
                     f"{r['kv_used_bytes'] / 2**20:.1f} | {r['kv_cache_bytes'] / 2**20:.1f} | "
                     f"{'yes' if r['equal_to_autoregressive'] else '**NO**'} | "
                     f"{r.get('first_call_setup_cpu_seconds', 0.0):.2f} |")
    (out / "table.md").write_text("\n".join(lines) + "\n")
    figure, (axis, decode_axis, pad_axis) = plt.subplots(1, 3, figsize=(16, 4.8))
    series = sorted({(r["mode"], r["drafter"]) for r in rows if not r["drafter"].startswith(ORACLE_PREFIX)})
    for mode, drafter in series:
        label = f"{drafter} ({mode})" if drafter != "none" else (
            "autoregressive (continuous)" if mode == "continuous" else "autoregressive")
        style = {"unpadded": "-", "unpadded-adaptive": "-", "unpadded-kv": "-.", "padded": "--"}.get(mode, ":")
        marker = "^" if mode.endswith("-adaptive") else "o"
        for ax, key in ((axis, "tokens_per_cpu_second"), (decode_axis, "decode_tokens_per_cpu_second")):
            points = [(r["batch"], r[key]) for r in rows if r["mode"] == mode and r["drafter"] == drafter]
            ax.plot(*zip(*points), style, marker=marker, label=label)
        if mode == "padded":
            pads = [(r["batch"], 100 * r["kv_padding_ratio"]) for r in rows
                    if r["mode"] == mode and r["drafter"] == drafter]
            pad_axis.plot(*zip(*pads), "--", marker="o", label=f"{drafter}: KV holes / generated tokens")
            inputs = [(r["batch"], 100 * r["input_padding_ratio"]) for r in rows
                      if r["mode"] == mode and r["drafter"] == drafter]
            pad_axis.plot(*zip(*inputs), ":", marker="s", label=f"{drafter}: input padding")
    for ax in (axis, decode_axis, pad_axis):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    axis.set_ylabel("generated tokens per CPU-second (median)")
    axis.set_title("End to end (prefill included)")
    decode_axis.set_ylabel("generated tokens per decode CPU-second (median)")
    decode_axis.set_title("Decode only (EMS-SD's TPS)")
    pad_axis.set_ylabel("%")
    pad_axis.set_title("Padding of the padded mode")
    figure.tight_layout()
    figure.savefig(out / "throughput.png", dpi=120)
    plt.close(figure)
    if any(r["drafter"].startswith(ORACLE_PREFIX) for r in rows):
        _plot_break_even(plt, rows, ar, out / "break_even.png")
    if any(r["mode"].startswith("continuous") for r in rows):
        _plot_speedup(plt, rows, ar, out / "speedup.png")


def reference_rows(rows: list[dict]) -> dict[int, dict]:
    """Per batch size, the row every ratio is taken over: batched autoregressive decoding (not its A/A copy)."""
    return {r["batch"]: r for r in rows if r["mode"] == "autoregressive" and r["drafter"] == "none"}


def _plot_speedup(plt, rows: list[dict], ar: dict[int, dict], path: Path) -> None:
    """Speedup over static batched autoregressive decoding per batch size: static vs continuous cells."""
    figure, axis = plt.subplots(figsize=(7.5, 4.8))
    cells = sorted({(r["mode"], r["drafter"]) for r in rows if r["mode"] not in ("autoregressive", "padded", "unpadded-kv")
                    and not r["drafter"].startswith(ORACLE_PREFIX)})
    for mode, drafter in cells:
        points = [(r["batch"], r["tokens_per_cpu_second"] / ar[r["batch"]]["tokens_per_cpu_second"])
                  for r in rows if r["mode"] == mode and r["drafter"] == drafter]
        label = "autoregressive (continuous)" if drafter == "none" else f"{drafter} ({mode})"
        axis.plot(*zip(*points), "-" if mode.startswith("continuous") else ":",
                  marker="^" if mode.endswith("-adaptive") else "o", label=label)
    _save_speedup_plot(plt, figure, axis, path, "batch size (rows at once)",
                       "speedup over static batched autoregressive (tok/CPU-s)",
                       "Static batches vs continuous batching, end to end", legend_size=8)


def _save_speedup_plot(plt, figure, axis, path: Path, xlabel: str, ylabel: str, title: str, legend_size: int) -> None:
    """The speedup plots' common frame: a line at 1.0 (autoregressive decoding), log2 batch axis."""
    axis.axhline(1.0, color="black", linewidth=0.8)
    axis.set_xscale("log", base=2)
    axis.set_xlabel(xlabel)
    axis.set_ylabel(ylabel)
    axis.set_title(title)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=legend_size)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def _plot_break_even(plt, rows: list[dict], ar: dict[int, dict], path: Path) -> None:
    """Speedup over autoregressive decoding per batch size: oracles of known accuracy beside the real drafters."""
    figure, axis = plt.subplots(figsize=(7.5, 4.8))
    labels = sorted({r["drafter"] for r in rows if r["drafter"].startswith(ORACLE_PREFIX)}, reverse=True)
    cells = [("unpadded", label) for label in labels] + sorted(
        {(r["mode"], r["drafter"]) for r in rows if r["mode"] in ("unpadded", "unpadded-adaptive")
         and not r["drafter"].startswith(ORACLE_PREFIX)})
    for mode, drafter in cells:
        chosen = [r for r in rows if r["mode"] == mode and r["drafter"] == drafter]
        points = [(r["batch"], r["tokens_per_cpu_second"] / ar[r["batch"]]["tokens_per_cpu_second"]) for r in chosen]
        accept = sum(r["acceptance_rate"] for r in chosen) / len(chosen)
        oracle = drafter.startswith(ORACLE_PREFIX)
        label = f"{drafter} ({mode}), acceptance {accept:.0%}" if not oracle else f"{drafter}, acceptance {accept:.0%}"
        axis.plot(*zip(*points), ":" if oracle else "-", marker="s" if oracle else "o", label=label)
    _save_speedup_plot(plt, figure, axis, path, "batch size", "speedup over batched autoregressive (tok/CPU-s, end to end)",
                       "What acceptance a batch needs: oracles of known accuracy vs real drafters", legend_size=7)


if __name__ == "__main__":
    raise SystemExit(main())
