"""ANPD (specdec, chain and tree) against transformers' prompt lookup and plain greedy, side by side.

In one process and on the same prompts it runs plain greedy `model.generate`,
`model.generate(prompt_lookup_num_tokens=K)` and `specdec.generate` with the `anpd` drafter (chain
and tree) and the exact verifier. Every output is checked token for token against plain greedy.
Per category it reports tau (tokens per target forward), tokens/s, speedup over plain greedy, and
the drafter's own time per step as a fraction of the verification forward.

    python -m specdec.benchmarks.anpd_vs_prompt_lookup --model default --prompts-per-category 4
"""

from __future__ import annotations

import argparse
import cProfile
import gzip
import io
import json
import os
import platform
import pstats
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from specdec.drafters.anpd import AnpdOptions

import specdec
from specdec.api import load_model
from specdec.data import data_file
from specdec.target import context_length

METHODS = ("greedy", "prompt_lookup", "anpd_chain", "anpd_tree")


@dataclass
class Run:
    seconds: float  # wall time
    tokens: list[int]
    forwards: int  # target forwards that produced tokens (prefill counted for HF, as it yields one)
    drafter_seconds: float = 0.0
    engine: dict[str, float] = field(default_factory=dict)
    cpu_seconds: float = 0.0  # process CPU time: steadier than wall time when the machine is contended


def load_prompts(categories: list[str], count: int, spec_bench: Path, humaneval: Path) -> dict[str, list[str]]:
    """First `count` prompts per category: Spec-Bench first turns as plain text, HumanEval prompts."""
    prompts: dict[str, list[str]] = {}
    rows = [json.loads(line) for line in spec_bench.read_text().splitlines() if line.strip()] \
        if any(c != "humaneval" for c in categories) else []
    for category in categories:
        if category == "humaneval":
            with gzip.open(humaneval, "rt") as handle:
                prompts[category] = [json.loads(line)["prompt"] for line in handle if line.strip()][:count]
        else:
            found = [row["turns"][0] for row in rows if row["category"] == category][:count]
            if not found:
                raise SystemExit(f"no Spec-Bench prompts in category {category!r}")
            prompts[category] = found
    return prompts


def encode(tokenizer: Any, text: str, limit: int) -> tuple[list[int], bool]:
    """Token ids, left-truncated to `limit` tokens (keeps the end, where the question usually is)."""
    ids = list(tokenizer(text)["input_ids"])
    return (ids[-limit:], True) if len(ids) > limit else (ids, False)


class ForwardCounter:
    """Counts top-level forwards of a model (one per target call in transformers' generate)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.count = 0
        self.handle = model.register_forward_hook(self._hook)

    def _hook(self, *_: Any) -> None:
        self.count += 1


def run_hf(model: Any, ids: list[int], max_new_tokens: int, pad_id: int, lookup: int | None) -> Run:
    inputs = torch.tensor([ids])
    extra = {"prompt_lookup_num_tokens": lookup} if lookup else {}
    counter = ForwardCounter(model)
    try:
        cpu, started = time.process_time(), time.perf_counter()
        with torch.no_grad():
            out = model.generate(inputs, attention_mask=torch.ones_like(inputs), do_sample=False,
                                 max_new_tokens=max_new_tokens, pad_token_id=pad_id, **extra)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    finally:
        counter.handle.remove()
    return Run(seconds, out[0, len(ids):].tolist(), counter.count, cpu_seconds=cpu)


def run_anpd(model: Any, ids: list[int], max_new_tokens: int, options: AnpdOptions) -> Run:
    cpu, started = time.process_time(), time.perf_counter()
    out = specdec.generate(model, [ids], drafter="anpd", drafter_options=options, verifier="exact",
                           max_new_tokens=max_new_tokens)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    stats = out.stats
    engine = {"draft_time": stats.draft_time, "verify_time": stats.verify_time, "other_time": stats.other_time,
              "prefill_time": stats.prefill_time, "steps": stats.steps,
              "drafted_tokens": stats.drafted_tokens, "accepted_tokens": stats.accepted_tokens}
    own = stats.drafter_stats  # the drafter's own propose (incl. table build) + observe wall time
    engine["table_build_time"] = own["table_build_seconds"]
    return Run(seconds, out.sequences[0], stats.steps, own["propose_seconds"] + own["observe_seconds"], engine, cpu)


def machine_info(threads: int) -> dict[str, Any]:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    root = Path(__file__).resolve().parents[1]

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return "unknown"

    import transformers

    return {"cpu": cpu, "logical_cores": os.cpu_count(), "torch_threads": threads,
            "load_average_at_start": list(os.getloadavg()), "python": platform.python_version(),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "git_commit": git("rev-parse", "HEAD"), "git_dirty_files": len(git("status", "--porcelain").splitlines())}


def summarize(runs: dict[str, list[Run]]) -> dict[str, dict[str, float]]:
    """Per method: tau, tokens/s and speedup (total greedy time / total method time, same prompts)."""
    greedy_time = sum(r.seconds for r in runs["greedy"])
    greedy_cpu = sum(r.cpu_seconds for r in runs["greedy"])
    table: dict[str, dict[str, float]] = {}
    for method, method_runs in runs.items():
        tokens = sum(len(r.tokens) for r in method_runs)
        seconds = sum(r.seconds for r in method_runs)
        cpu = sum(r.cpu_seconds for r in method_runs)
        row = {"new_tokens": tokens, "seconds": seconds, "cpu_seconds": cpu, "tokens_per_second": tokens / seconds,
               "tau": tokens / max(1, sum(r.forwards for r in method_runs)), "speedup": greedy_time / seconds,
               "speedup_cpu_time": greedy_cpu / cpu}
        if method.startswith("anpd"):
            verify = sum(r.engine["verify_time"] for r in method_runs)
            steps = sum(r.engine["steps"] for r in method_runs)
            drafter = sum(r.drafter_seconds for r in method_runs)
            row.update({
                "drafter_ms_per_step": 1000 * drafter / steps, "verify_ms_per_step": 1000 * verify / steps,
                "drafter_fraction_of_verify": drafter / verify,
                "table_build_ms_per_prompt": 1000 * sum(r.engine["table_build_time"] for r in method_runs)
                / len(method_runs),
                "engine_draft_fraction_of_verify": sum(r.engine["draft_time"] for r in method_runs) / verify,
                "engine_other_fraction_of_verify": sum(r.engine["other_time"] for r in method_runs) / verify,
                "acceptance_rate": sum(r.engine["accepted_tokens"] for r in method_runs)
                / max(1, sum(r.engine["drafted_tokens"] for r in method_runs)),
                "mean_draft_len": sum(r.engine["drafted_tokens"] for r in method_runs) / steps,
            })
        table[method] = row
    return table


def profile_anpd(model: Any, ids: list[int], max_new_tokens: int, options: AnpdOptions) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    run_anpd(model, ids, max_new_tokens, options)
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
    return text.getvalue()


def to_markdown(result: dict[str, Any]) -> str:
    lines = ["# ANPD vs transformers prompt lookup vs plain greedy", "", f"Command: `{result['command']}`", ""]
    lines += [f"- {key}: {value}" for key, value in result["machine"].items()]
    lines += [f"- {note}" for note in result["notes"]]
    lines += ["", "| category | method | tau | tokens/s | speedup vs greedy (wall) | speedup (CPU time) | "
              "drafter/verify | accept rate | identical to greedy |", "|---|---|---|---|---|---|---|---|---|"]
    for category, methods in result["summary"].items():
        for method, row in methods.items():
            fraction = f"{row['drafter_fraction_of_verify']:.2%}" if "drafter_fraction_of_verify" in row else "-"
            accept = f"{row['acceptance_rate']:.1%}" if "acceptance_rate" in row else "-"
            same = result["identical"][category][method]
            lines.append(f"| {category} | {method} | {row['tau']:.2f} | {row['tokens_per_second']:.1f} | "
                         f"{row['speedup']:.2f}x | {row['speedup_cpu_time']:.2f}x | {fraction} | {accept} | {same} |")
    for method in ("anpd_chain", "anpd_tree"):
        lines += ["", f"{method} / prompt lookup, wall-time speed ratio (CPU-time ratio): " + ", ".join(
            f"{c}: {m['prompt_lookup']['seconds'] / m[method]['seconds']:.2f}x "
            f"({m['prompt_lookup']['cpu_seconds'] / m[method]['cpu_seconds']:.2f}x)"
            for c, m in result["summary"].items())]
    if result.get("profiles"):
        for category, text in result["profiles"].items():
            lines += ["", f"## cProfile of one anpd_chain run ({category}), top 25 by own time", "", "```", text.strip(),
                      "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default", help='"default" (specdec.zoo) or a local HF model dir')
    parser.add_argument("--categories", default="summarization,rag,humaneval",
                        help="Spec-Bench categories and/or humaneval, comma separated")
    parser.add_argument("--prompts-per-category", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--n", type=int, default=5, help="ANPD N")
    parser.add_argument("--k", type=int, default=7, help="draft length (ANPD K and prompt_lookup_num_tokens)")
    parser.add_argument("--tree-branches", type=int, default=2)
    parser.add_argument("--tree-max-nodes", type=int, default=None)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is steadier on a shared CPU)")
    parser.add_argument("--spec-bench", type=Path, help="Spec-Bench question.jsonl (default: the copy shipped "
                        "with specdec)")
    parser.add_argument("--humaneval", type=Path, help="HumanEval.jsonl.gz (default: the copy shipped with specdec)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "anpd")
    parser.add_argument("--tag", default="", help="suffix of the result file names")
    parser.add_argument("--profile", action="store_true", help="append a cProfile of one anpd run per category")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    model, tokenizer = load_model(args.model)
    if tokenizer is None:
        raise SystemExit("the model needs a tokenizer beside it")
    context = context_length(model) or 10**9
    limit = context - args.max_new_tokens
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    chain = AnpdOptions(n=args.n, k=args.k)
    tree = AnpdOptions(n=args.n, k=args.k, branches=args.tree_branches, max_nodes=args.tree_max_nodes)
    categories = [c.strip() for c in args.categories.split(",") if c.strip()]
    texts = load_prompts(categories, args.prompts_per_category, args.spec_bench or data_file("spec_bench"),
                         args.humaneval or data_file("humaneval"))
    machine = machine_info(args.threads)

    def run(method: str, ids: list[int]) -> Run:
        if method == "greedy":
            return run_hf(model, ids, args.max_new_tokens, pad_id, None)
        if method == "prompt_lookup":
            return run_hf(model, ids, args.max_new_tokens, pad_id, args.k)
        return run_anpd(model, ids, args.max_new_tokens, chain if method == "anpd_chain" else tree)

    warm = encode(tokenizer, next(iter(texts.values()))[0], limit)[0]
    for method in METHODS:  # warm-up: first calls pay for lazy imports and allocator growth
        run(method, warm[-64:])

    summary, identical, per_prompt, truncated = {}, {}, {}, {}
    for category, category_texts in texts.items():
        runs: dict[str, list[Run]] = {m: [] for m in METHODS}
        truncated[category] = 0
        per_prompt[category] = []
        for index, text in enumerate(category_texts):
            ids, cut = encode(tokenizer, text, limit)
            truncated[category] += cut
            order = METHODS[index % len(METHODS):] + METHODS[: index % len(METHODS)]  # rotate against drift
            results = {method: run(method, ids) for method in order}
            for method in METHODS:
                runs[method].append(results[method])
            record = {"prompt_tokens": len(ids), "truncated": cut}
            for method in METHODS:
                same = results[method].tokens == results["greedy"].tokens
                if not same:
                    print(f"!!! MISMATCH: {method} differs from greedy on {category} prompt {index}", file=sys.stderr)
                record[method] = {"seconds": results[method].seconds, "new_tokens": len(results[method].tokens),
                                  "forwards": results[method].forwards, "identical": same}
            per_prompt[category].append(record)
            print(f"{category} {index}: " + " ".join(
                f"{m}={len(results[m].tokens) / results[m].seconds:.1f}tok/s" for m in METHODS), flush=True)
        summary[category] = summarize(runs)
        identical[category] = {m: all(p[m]["identical"] for p in per_prompt[category]) for m in METHODS}

    notes = [
        "tau = new tokens per target forward (greedy = 1.0; for transformers the prefill forward counts, as it "
        "yields the first token; for specdec the engine's steps)",
        "speedup = total plain-greedy time / total method time on the same prompts, end to end (prefill included); "
        "wall time is the headline, process CPU time is shown too because the machine was contended",
        f"prompts longer than {limit} tokens were truncated from the left to fit the model's context of "
        f"{context} with {args.max_new_tokens} new tokens (Spec-Bench 'Summarize:' prefixes can be cut): "
        f"{truncated}",
        f"prompt lookup: prompt_lookup_num_tokens={args.k}, transformers' default max_matching_ngram_size (2); "
        f"anpd: N={args.n}, K={args.k}, stop_on_miss; tree: branches={args.tree_branches}, "
        f"max_nodes={tree.node_budget}",
        "methods run back to back per prompt in rotating order; generation stops at EOS or max_new_tokens",
        "the CPU was shared with other jobs (see load average); ratios measured side by side are the claim, "
        "absolute tokens/s are not",
    ]
    result = {"command": "python -m specdec.benchmarks.anpd_vs_prompt_lookup " + " ".join(argv or sys.argv[1:]),
              "machine": machine, "notes": notes, "summary": summary, "identical": identical,
              "per_prompt": per_prompt, "load_average_at_end": list(os.getloadavg())}
    if args.profile:
        result["profiles"] = {c: profile_anpd(model, encode(tokenizer, t[0], limit)[0], args.max_new_tokens, chain)
                              for c, t in texts.items()}
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "anpd_vs_prompt_lookup" + (f"_{args.tag}" if args.tag else "")
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=2))
    (args.out / f"{stem}.md").write_text(to_markdown(result))
    print(to_markdown(result))
    mismatched = [f"{c}/{m}" for c, methods in identical.items() for m, same in methods.items() if not same]
    if mismatched:
        print(f"!!! OUTPUTS DIFFER FROM PLAIN GREEDY: {', '.join(mismatched)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
