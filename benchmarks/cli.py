"""`specdec bench`: run a sweep from a preset, a YAML/JSON config or flags, then write the report.

    specdec bench --preset quick --out benchmarks/results/quick
    specdec bench --config sweep.yaml --out results/ --ray
    specdec bench --model ./my-model --drafter anpd --drafter oracle:draft_length=8 \\
        --dataset spec_bench --categories qa,rag --per-category 5 --out results/

Flags override the preset or config file. Exit status: 0 when every cell ran and every lossless
method matched the greedy baseline, 1 when something failed (listed in results.md), 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from specdec.errors import SpecDecError

from .config import (
    DatasetSpec,
    DrafterSpec,
    SweepConfig,
    builtin_drafters,
    check_plugins,
    load_config,
    parse_config,
    preset,
)


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_drafter(text: str) -> DrafterSpec:
    """NAME or NAME:KEY=VALUE,KEY=VALUE (values parsed as JSON when they can be). The key `label` is the
    cell's name in the results, not a drafter option: `none:label=none-again` is a second cell of plain
    decoding (an A/A cell)."""
    name, _, rest = text.partition(":")
    options = {}
    label = None
    for pair in filter(None, rest.split(",")):
        if "=" not in pair:
            raise SystemExit(f"specdec bench: error: drafter option {pair!r} must look like KEY=VALUE")
        key, value = pair.split("=", 1)
        if key == "label":
            label = value
        else:
            options[key] = _parse_value(value)
    return DrafterSpec(name=name, options=options, label=label)


def parse_dataset(text: str, categories: list[str] | None, per_category: int | None) -> DatasetSpec:
    """KIND or KIND:PATH (kinds: spec_bench, humaneval, gsm8k, text)."""
    kind, _, path = text.partition(":")
    return DatasetSpec(kind=kind, path=path or None, categories=categories, per_category=per_category)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="output directory (resumes if it has cells.jsonl)")
    parser.add_argument("--fresh", action="store_true",
                        help="measure every cell again instead of resuming (after a code change)")
    parser.add_argument("--config", type=Path, help="sweep config (.yaml, .yml or .json)")
    parser.add_argument("--preset", choices=["quick", "full"], help="quick: every drafter, 2 prompts per category")
    parser.add_argument("--model", help='"default" (the bundled pair) or a local model directory')
    parser.add_argument("--draft", help="draft model directory for --model (assisted baseline, draft_model)")
    parser.add_argument("--device", help='where to load the models, e.g. "cuda" (default: the CPU)')
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"],
                        help="the models' dtype (default: the checkpoint's; the bundled pair's is float32)")
    parser.add_argument("--drafter", action="append", metavar="NAME[:K=V,...]",
                        help="drafter to run (repeatable); `@draft` as a value means the model's draft; "
                             "`label=NAME` names the cell (two cells of one drafter, e.g. an A/A `none`)")
    parser.add_argument("--verifier", action="append", help="verifier(s) (repeatable; default exact)")
    parser.add_argument("--dataset", action="append", metavar="KIND[:PATH]",
                        help="spec_bench, humaneval, gsm8k or text:FILE (repeatable)")
    parser.add_argument("--categories", help="comma-separated categories to keep")
    parser.add_argument("--per-category", type=int, help="first N prompts of each category")
    parser.add_argument("--baseline", action="append", choices=["hf_generate", "hf_prompt_lookup", "hf_assisted"],
                        help="transformers baselines to measure (default: all that apply)")
    parser.add_argument("--max-new-tokens", type=int)
    parser.add_argument("--temperature", type=float)
    parser.add_argument("--batch-size", type=int, action="append", help="batch size(s) (repeatable)")
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--warmup", type=int)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--threads", type=int,
                        help="torch threads (per Ray worker with --ray); presets use 1 with the bundled model")
    parser.add_argument("--sequential", action="store_true",
                        help="run cells one after another, each stored as it finishes, instead of interleaving "
                             "their batches (the default: ratios then share the machine's drift; results are "
                             "stored when all cells finish)")
    parser.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                        help="spread cells over Ray workers: a local cluster, or ADDRESS (e.g. auto, ray://host:10001)")
    parser.add_argument("--ray-workers", type=int, help="number of Ray workers (default: the cluster's CPUs)")
    parser.add_argument("--no-progress", action="store_true")
    return parser


def config_from_args(args: argparse.Namespace) -> SweepConfig:
    if args.config is not None and args.preset is not None:
        raise SystemExit("specdec bench: error: give --config or --preset, not both")
    if args.config is not None:
        base = load_config(args.config).model_dump()
    elif args.preset is not None:
        base = preset(args.preset, args.model or "default").model_dump()
    else:
        base = {"models": [{"path": "default"}], "drafters": [d.model_dump() for d in builtin_drafters()]}
    overrides: dict[str, Any] = {}
    if args.model is not None:
        overrides["models"] = [{"path": args.model, "draft": args.draft}]
    elif args.draft is not None:
        overrides["models"] = [{**m, "draft": args.draft} for m in base["models"]]
    placement = {k: v for k, v in (("device", args.device), ("dtype", args.dtype)) if v is not None}
    if placement:
        overrides["models"] = [{**m, **placement} for m in overrides.get("models", base["models"])]
    if args.drafter:
        overrides["drafters"] = [parse_drafter(d).model_dump() for d in args.drafter]
    categories = args.categories.split(",") if args.categories else None
    if args.dataset:
        overrides["datasets"] = [parse_dataset(d, categories, args.per_category).model_dump() for d in args.dataset]
    elif categories is not None or args.per_category is not None:
        datasets = base.get("datasets") or [DatasetSpec().model_dump()]
        overrides["datasets"] = [{**d, **({"categories": categories} if categories else {}),
                                  **({"per_category": args.per_category} if args.per_category else {})}
                                 for d in datasets]
    for flag, key in (("verifier", "verifiers"), ("baseline", "baselines"), ("max_new_tokens", "max_new_tokens"),
                      ("temperature", "temperature"), ("batch_size", "batch_sizes"), ("repeats", "repeats"),
                      ("warmup", "warmup"), ("seed", "seed"), ("threads", "threads")):
        value = getattr(args, flag)
        if value is not None:
            overrides[key] = value
    return parse_config({**base, **overrides}, source="command line")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    from .report import write_report
    from .runner import run_sweep

    backend = None
    try:
        config = config_from_args(args)
        check_plugins(config.with_none())  # before Ray starts or any model loads
        if args.ray is not None:
            from .ray_backend import RayBackend

            backend = RayBackend(None if args.ray == "local" else args.ray, num_workers=args.ray_workers,
                                 threads_per_worker=config.threads or 1)
        started = time.perf_counter()
        cells, records = run_sweep(config, args.out, backend=backend, show_progress=not args.no_progress,
                                   fresh=args.fresh, interleave=not args.sequential)
        elapsed = time.perf_counter() - started
    except (SpecDecError, ValueError, FileNotFoundError) as error:
        sys.stdout.flush()  # the error is the last line even when stdout and stderr share a pipe
        print(f"specdec bench: error: {error}", file=sys.stderr)
        return 2
    finally:
        if backend is not None:
            backend.close()
    command = "specdec bench " + shlex.join(argv)
    result = write_report(cells, records, config, args.out, command=command, sweep_seconds=elapsed)
    failures = result["summary"]["failures"]
    for cell in result["summary"]["cells"]:
        if cell["status"] != "ok":
            print(f"  {cell['label']:<32} b={cell['batch_size']}  FAILED")
            continue
        overall = cell["categories"]["overall"]
        tau = (overall.get("decode") or {}).get("tau")
        speedup = overall.get("speedup")
        print(f"  {cell['label']:<32} b={cell['batch_size']}  speedup "
              f"{'-' if speedup is None else f'{speedup:.2f}x':>6}  tau {'-' if tau is None else f'{tau:.2f}':>5}  "
              f"greedy check: {cell['equality']['status']}")
    print(f"wrote {args.out / 'results.md'}, results.json and {len(result['plots'])} plots in {elapsed:.0f} s")
    return _verdict(failures, len(result["summary"]["cells"]), args.out / "results.md")


def _verdict(failures: list[dict[str, Any]], cells: int, report: Path) -> int:
    """The exit status, and a last line saying the same thing (a log's tail is what people read)."""
    sys.stdout.flush()  # keep this order when stdout and stderr share a pipe
    for failure in failures:
        print(f"FAILURE: {failure['label']} (batch {failure['batch_size']}): {failure['kind']}", file=sys.stderr)
    if failures:
        labels = {(f["label"], f["batch_size"]) for f in failures}
        print(f"specdec bench: FAILED: {len(labels)} of {cells} cells failed or differ from the greedy baseline; "
              f"see {report}", file=sys.stderr)
        return 1
    print(f"specdec bench: ok: {cells} cells ran and every lossless method matched the greedy baseline")
    return 0
