"""specdec's draft_model drafter vs transformers' assisted generation, side by side in one process.

On the same prompts (Spec-Bench: a few first turns of every subtask; HumanEval prompts), greedy:

    hf_greedy        target.generate()                                   (the reference output)
    hf_assisted      target.generate(assistant_model=draft)              (transformers' defaults)
    hf_assisted_k    ... num_assistant_tokens=K, no confidence exit      (same K as specdec's fixed)
    specdec_*        specdec.generate(drafter="draft_model", ...)        fixed K, heuristic,
                                                                         confidence exit, tree

Every output must equal hf_greedy token for token. Timing: each repeat runs every method on the
same prompt back to back (order rotated per prompt and repeat), so load drift on a shared machine
hits all methods alike; per prompt and method the *minimum* over repeats of wall time and of this
process's CPU time is kept (the least-disturbed run), and a category's tokens/s is its tokens over
the sum of those minima. tau is tokens per target forward (counted with a forward hook for
transformers, from specdec's stats). Writes JSON + Markdown.

    python -m specdec.benchmarks.draft_model_vs_assisted --per-subtask 3 --humaneval 4 --repeats 2

`--tune` instead compares draft-length policies of specdec's drafter on held-out text (GSM8K
*train* questions and standard-library modules the default pair never trained on), never on the
benchmark prompts; that is how the drafter's default policy was chosen.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from specdec.drafters.draft_model import DraftModelOptions

import specdec
from specdec.data import data_file

from .machine import machine_info

MT_BENCH = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")


def load_prompts(spec_bench: Path, humaneval: Path, per_subtask: int, humaneval_count: int) -> list[dict]:
    """First turns: `per_subtask` per Spec-Bench subtask (mt_bench spread over its 8 categories),
    then the first `humaneval_count` HumanEval prompts. Deterministic: file order."""
    by_subtask: dict[str, list[dict]] = defaultdict(list)
    with open(spec_bench, encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    mt_seen: set[str] = set()
    for row in rows:
        category = row["category"]
        subtask = "mt_bench" if category in MT_BENCH else category
        if subtask == "mt_bench":
            if category in mt_seen:
                continue
            mt_seen.add(category)
        if len(by_subtask[subtask]) < per_subtask:
            by_subtask[subtask].append({"id": f"spec_bench/{row['question_id']}", "category": subtask,
                                        "text": row["turns"][0]})
    prompts = [p for group in by_subtask.values() for p in group]
    with gzip.open(humaneval, "rt", encoding="utf-8") as handle:
        for line in list(handle)[:humaneval_count]:
            row = json.loads(line)
            prompts.append({"id": row["task_id"], "category": "humaneval", "text": row["prompt"]})
    return prompts


class ForwardCounter:
    """Counts forward calls of a model (target verification passes, for transformers' tau)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.calls = 0
        self.handle = model.register_forward_pre_hook(self._hook)

    def _hook(self, module, args) -> None:
        self.calls += 1


def hf_run(target, draft, ids: list[int], max_new: int, assisted: dict | None, pad_id: int | None) -> list[int]:
    input_ids = torch.tensor([ids])
    kwargs: dict[str, Any] = dict(do_sample=False, max_new_tokens=max_new, attention_mask=torch.ones_like(input_ids),
                                  pad_token_id=pad_id)
    if assisted is None:
        return target.generate(input_ids, **kwargs)[0, len(ids):].tolist()
    # transformers reads the assistant settings from the *assistant's* generation config (passing
    # them to target.generate() has no effect), so set them there for this call only.
    config = draft.generation_config
    saved = {name: getattr(config, name, None) for name in assisted}
    try:
        for name, value in assisted.items():
            setattr(config, name, value)
        out = target.generate(input_ids, assistant_model=draft, **kwargs)
    finally:
        for name, value in saved.items():
            setattr(config, name, value)
    return out[0, len(ids):].tolist()


def build_methods(draft, k: int, tree_k: int, branches: int) -> dict[str, dict]:
    """name -> how to run it. HF settings are passed to generate(); specdec ones are drafter options.
    `specdec_default` passes only the model: whatever `drafter="draft_model"` does by default."""
    return {
        "hf_greedy": {"kind": "hf", "assisted": None},
        "hf_assisted": {"kind": "hf", "assisted": {}},
        "hf_assisted_k": {"kind": "hf", "assisted": {"num_assistant_tokens": k,
                                                     "assistant_confidence_threshold": 0.0}},
        "hf_assisted_heuristic": {"kind": "hf", "assisted": {"num_assistant_tokens": k,
                                                             "num_assistant_tokens_schedule": "heuristic_transient",
                                                             "assistant_confidence_threshold": 0.0}},
        "specdec_default": {"kind": "specdec", "options": {"model": draft}},
        "specdec_fixed": {"kind": "specdec", "options": {"model": draft, "k": k, "schedule": "constant"}},
        "specdec_heuristic": {"kind": "specdec", "options": {"model": draft, "k": k, "schedule": "heuristic",
                                                             "min_k": 1}},  # transformers' rule
        "specdec_confidence": {"kind": "specdec", "options": {"model": draft, "k": 12, "schedule": "confidence",
                                                              "confidence_threshold": 0.4,
                                                              "adaptive_threshold": True,
                                                              "target_acceptance": 0.8}},
        "specdec_tree": {"kind": "specdec", "options": {"model": draft, "k": tree_k, "schedule": "constant",
                                                        "branches": branches,
                                                        "branch_depth": 1}},
    }


def hf_assisted_defaults(draft) -> dict[str, Any]:
    """What `generate(assistant_model=draft)` uses when not told otherwise (the draft's generation
    config, falling back to transformers' global defaults), plus whether the threshold adapts."""
    from transformers import GenerationConfig
    from transformers.utils import is_sklearn_available

    defaults = GenerationConfig()._get_default_generation_params()
    names = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")
    out = {name: getattr(draft.generation_config, name, None) or defaults.get(name) for name in names}
    out["confidence_threshold_adapts_online"] = bool(is_sklearn_available())
    return out


def run_method(name: str, spec: dict, target, draft, tokenizer, ids: list[int], max_new: int,
               counter: ForwardCounter) -> dict:
    before = counter.calls
    cpu_started = time.process_time()
    started = time.perf_counter()
    if spec["kind"] == "hf":
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        tokens = hf_run(target, draft, ids, max_new, spec["assisted"], pad_id)
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
        forwards = counter.calls - before
        record = {"tokens": tokens, "seconds": elapsed, "cpu_seconds": cpu, "target_forwards": forwards}
        if spec["assisted"] is not None:
            record["tau"] = len(tokens) / max(forwards, 1)  # assisted decoding has no separate prefill
        return record
    out = specdec.generate(target, ids, tokenizer=tokenizer, drafter="draft_model", drafter_options=spec["options"],
                           verifier="exact", max_new_tokens=max_new)
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    stats = out.stats
    return {"tokens": out.sequences[0], "seconds": elapsed, "cpu_seconds": cpu,
            "target_forwards": counter.calls - before,
            "tau": stats.mean_accepted, "acceptance": stats.acceptance_rate,
            "draft_s": stats.draft_time, "verify_s": stats.verify_time, "other_s": stats.other_time,
            "prefill_s": stats.prefill_time, "draft_cache_peak_bytes": stats.drafter_stats.get("draft_cache_peak_bytes")}


def first_difference(a: list[int], b: list[int]) -> int | None:
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def summarize(records: list[dict], methods: list[str]) -> dict[str, dict[str, dict]]:
    """Per category (and 'all'): tokens/s = total tokens / total of the per-prompt minimum seconds
    (wall and CPU separately); mean tau; ratios vs plain greedy and vs transformers' assisted."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        groups[record["category"]].append(record)
        groups["all"].append(record)
    table: dict[str, dict[str, dict]] = {}
    for category, rows in groups.items():
        table[category] = {}
        for method in methods:
            runs = [row["runs"][method] for row in rows]
            tokens = sum(r["new_tokens"] for r in runs)
            seconds = sum(r["seconds"] for r in runs)
            cpu = sum(r["cpu_seconds"] for r in runs)
            taus = [r["tau"] for r in runs if r.get("tau") is not None]
            table[category][method] = {
                "prompts": len(runs), "tokens": tokens, "seconds": seconds, "cpu_seconds": cpu,
                "tokens_per_s": tokens / seconds if seconds else 0.0,
                "tokens_per_cpu_s": tokens / cpu if cpu else 0.0,
                "tau": sum(taus) / len(taus) if taus else None,
                "identical": sum(row["identical"][method] for row in rows),
            }
        hf_assisted = [m for m in methods if m.startswith("hf_assisted")]
        for unit in ("tokens_per_s", "tokens_per_cpu_s"):
            base = table[category]["hf_greedy"][unit]
            assisted = table[category]["hf_assisted"][unit] if "hf_assisted" in methods else 0.0
            best_hf = max((table[category][m][unit] for m in hf_assisted), default=0.0)
            suffix = "" if unit == "tokens_per_s" else "_cpu"
            for method in methods:
                cell = table[category][method]
                cell["speedup_vs_greedy" + suffix] = cell[unit] / base if base else None
                cell["ratio_vs_hf_assisted" + suffix] = cell[unit] / assisted if assisted else None
                cell["ratio_vs_best_hf_assisted" + suffix] = cell[unit] / best_hf if best_hf else None
    return table


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def markdown(result: dict) -> str:
    methods = result["methods"]
    lines = [f"# draft_model vs transformers assisted generation ({result['pair']})", "",
             f"Command: `{result['command']}`", "",
             f"Machine: {result['machine'].get('cpu')}, {result['machine'].get('cores')} cores, torch threads "
             f"{result['settings']['threads']}, load average at start {result['load_start']} / end "
             f"{result['load_end']}. {result['note']}", "",
             f"Settings: {json.dumps(result['settings'])}", "",
             f"Prompts finished: {result['prompts_done']} of {result['prompts_planned']}, "
             f"{result['settings']['repeats']} interleaved repeats each. Weights: target "
             f"{result['target_fingerprint']}, draft {result['draft_fingerprint']}.", "",
             "Per prompt and method the minimum over repeats of wall and of CPU seconds is kept; tok/s = new "
             "tokens / the sum of those minima over a category's prompts. `speedup` is vs plain "
             "`target.generate()` greedy; `vs HF` is vs `generate(assistant_model=draft)` with transformers' "
             "defaults; `vs best HF` is vs the fastest transformers assisted setting in that category (wall / CPU). "
             "tau = new tokens per target forward. `same` = prompts whose output equals plain greedy token for "
             "token in every repeat.", ""]
    lines += ["| category | method | tok/s wall | tok/s CPU | speedup wall | vs HF wall | vs HF CPU | "
              "vs best HF wall | vs best HF CPU | tau | same |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for category, cells in result["summary"].items():
        for method in methods:
            c = cells[method]
            tau = _fmt(c["tau"]) if c["tau"] is not None else "1.00" if method == "hf_greedy" else "-"
            lines.append(f"| {category} | {method} | {c['tokens_per_s']:.1f} | {c['tokens_per_cpu_s']:.1f} | "
                         f"{_fmt(c['speedup_vs_greedy'])}x | {_fmt(c['ratio_vs_hf_assisted'])} | "
                         f"{_fmt(c['ratio_vs_hf_assisted_cpu'])} | {_fmt(c['ratio_vs_best_hf_assisted'])} | "
                         f"{_fmt(c['ratio_vs_best_hf_assisted_cpu'])} | {tau} | {c['identical']}/{c['prompts']} |")
    lines += ["", "## specdec faster than HF assisted in every category? (worst category ratio)", "",
              "| method | vs HF defaults, wall | vs HF defaults, CPU | vs best HF, wall | vs best HF, CPU |",
              "|---|---|---|---|---|"]
    summary = {cat: cells for cat, cells in result["summary"].items() if cat != "all"}
    for method in methods:
        if method.startswith("specdec") and summary:
            worst = [min((cells[method][key] or 0.0, cat) for cat, cells in summary.items())
                     for key in ("ratio_vs_hf_assisted", "ratio_vs_hf_assisted_cpu", "ratio_vs_best_hf_assisted",
                                 "ratio_vs_best_hf_assisted_cpu")]
            lines.append(f"| {method} | " + " | ".join(f"{value:.2f} ({cat})" for value, cat in worst) + " |")
    if result["mismatches"]:
        lines += ["", "## Outputs differing from plain greedy", ""]
        lines += [f"- {m['id']} {m['method']} (repeat {m['repeat']}): first difference at token {m['at']}"
                  for m in result["mismatches"]]
    return "\n".join(lines) + "\n"


TUNE_POLICIES: dict[str, dict[str, Any]] = {
    **{f"fixed k={k}": {"k": k, "schedule": "constant"} for k in (2, 3, 4, 5)},
    **{f"heuristic k={k}": {"k": k, "schedule": "heuristic", "min_k": 1} for k in (2, 3, 4)},
    "heuristic k=3, k_max=24": {"k": 3, "schedule": "heuristic", "min_k": 1, "k_max": 24},
    "heuristic k=3, min_k=0": {"k": 3, "schedule": "heuristic", "min_k": 0},
    "confidence k=12, gamma 0.1": {"k": 12, "schedule": "confidence", "confidence_threshold": 0.1},
    "confidence k=12, gamma 0.4, adaptive": {"k": 12, "schedule": "confidence", "confidence_threshold": 0.4,
                                             "adaptive_threshold": True, "target_acceptance": 0.8},
}


def tune_texts(gsm8k_train: Path, count: int, limit: int) -> list[tuple[str, str]]:
    """Held-out tuning text, never the benchmark prompts: questions from the last lines of GSM8K
    *train* (held out from the default pair's training too) and slices of standard-library
    modules the default pair never trained on (`specdec.tools.zoo.corpus.HELDOUT_MODULES`)."""
    import sysconfig

    from specdec.tools.zoo.corpus import GSM8K_HELDOUT_LINES, HELDOUT_MODULES

    with open(gsm8k_train, encoding="utf-8") as handle:
        lines = handle.readlines()[-GSM8K_HELDOUT_LINES:]
    texts = [("gsm8k_train", json.loads(line)["question"]) for line in lines[:count]]
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    modules = [m for m in HELDOUT_MODULES if m.endswith(".py") and (stdlib / m).is_file()][:count]
    for module in modules:
        source = (stdlib / module).read_text(encoding="utf-8")
        middle = len(source) // 2
        texts.append(("stdlib_code", source[max(0, middle - 4 * limit): middle]))
    return texts


def tune_policies(args, target, draft, tokenizer, counter: ForwardCounter) -> dict[str, Any]:
    """Time every candidate policy on the held-out texts (interleaved repeats, minimum per text),
    and report tokens/s (wall and CPU) per text kind and overall."""
    limit = target.config.max_position_embeddings - args.max_new_tokens
    texts = tune_texts(args.tune_file or data_file("gsm8k_train"), args.tune_prompts, 600)
    specs = {"hf_greedy": {"kind": "hf", "assisted": None},
             "hf_assisted": {"kind": "hf", "assisted": {}}}
    policies = {name: options for name, options in TUNE_POLICIES.items() if not args.policies or name in args.policies}
    specs |= {name: {"kind": "specdec", "options": {"model": draft, **options}} for name, options in policies.items()}
    warm = tokenizer("def f(x):\n    return")["input_ids"]
    for spec in specs.values():
        run_method("warm-up", spec, target, draft, tokenizer, warm, 8, counter)
    per: dict[str, dict[str, list[float]]] = {name: defaultdict(lambda: [0.0, 0.0, 0.0]) for name in specs}
    names = list(specs)
    for index, (kind, text) in enumerate(texts):
        ids = list(tokenizer(text)["input_ids"])[-min(limit, 600):]
        best: dict[str, list[float]] = {}
        for repeat in range(args.repeats):
            shift = (index + repeat) % len(names)
            for name in names[shift:] + names[:shift]:
                run = run_method(name, specs[name], target, draft, tokenizer, ids, args.max_new_tokens, counter)
                old = best.get(name, [len(run["tokens"]), float("inf"), float("inf")])
                best[name] = [len(run["tokens"]), min(old[1], run["seconds"]), min(old[2], run["cpu_seconds"])]
        for name, (tokens, wall, cpu) in best.items():
            for group in (kind, "all"):
                cell = per[name][group]
                cell[0], cell[1], cell[2] = cell[0] + tokens, cell[1] + wall, cell[2] + cpu
        print(f"tune [{index + 1}/{len(texts)}] {kind}: " + " ".join(
            f"{n}={best[n][0] / best[n][2]:.0f}" for n in names), file=sys.stderr)
    table = {name: {group: {"tokens_per_s": t / w, "tokens_per_cpu_s": t / c} for group, (t, w, c) in groups.items()}
             for name, groups in per.items()}
    ranking = sorted((n for n in policies), key=lambda n: -table[n]["all"]["tokens_per_cpu_s"])
    return {"texts": [kind for kind, _ in texts], "repeats": args.repeats, "policies": policies,
            "tokens_per_s": table, "ranking_by_cpu": ranking}


def tune_markdown(result: dict) -> str:
    tuning = result["tuning"]
    groups = sorted({g for cells in tuning["tokens_per_s"].values() for g in cells})
    lines = [f"# draft_model policy tuning on held-out text ({result['pair']})", "",
             f"Command: `{result['command']}`", "",
             f"Machine: {result['machine'].get('cpu')}, {result['machine'].get('cores')} cores, torch threads "
             f"{result['threads']}, load average at start {result['load_start']} / end {result['load_end']}.", "",
             f"Texts: {len(tuning['texts'])} ({', '.join(sorted(set(tuning['texts'])))}), "
             f"{result['max_new_tokens']} new tokens, greedy, minimum of {tuning['repeats']} interleaved repeats "
             f"per text. Weights: target {result['target_fingerprint']}, draft {result['draft_fingerprint']}.", "",
             "| policy | " + " | ".join(f"{g} tok/s wall | {g} tok/s CPU" for g in groups) + " |",
             "|---|" + "---|---|" * len(groups)]
    for name, cells in sorted(tuning["tokens_per_s"].items(), key=lambda item: -item[1]["all"]["tokens_per_cpu_s"]):
        lines.append(f"| {name} | " + " | ".join(
            f"{cells[g]['tokens_per_s']:.1f} | {cells[g]['tokens_per_cpu_s']:.1f}" for g in groups) + " |")
    lines += ["", f"Best specdec policy by CPU tokens/s over all texts: **{tuning['ranking_by_cpu'][0]}**."]
    return "\n".join(lines) + "\n"


def load_pair(args) -> tuple[Any, Any, Any, str]:
    if args.target is None:
        pair = specdec.load_default()
        return pair.target, pair.draft, pair.tokenizer, "specdec default pair"
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.float32, local_files_only=True).eval()
    draft = AutoModelForCausalLM.from_pretrained(args.draft, dtype=torch.float32, local_files_only=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(args.target, local_files_only=True)
    return target, draft, tokenizer, f"{args.target} + {args.draft}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", type=Path, help="target model directory (default: the bundled pair)")
    parser.add_argument("--draft", type=Path, help="draft model directory (with --target)")
    parser.add_argument("--spec-bench", type=Path, help="Spec-Bench question.jsonl (default: shipped with specdec)")
    parser.add_argument("--humaneval-file", type=Path, help="HumanEval.jsonl.gz (default: shipped with specdec)")
    parser.add_argument("--per-subtask", type=int, default=3, help="Spec-Bench prompts per subtask")
    parser.add_argument("--humaneval", type=int, default=4, help="HumanEval prompts")
    parser.add_argument("--repeats", type=int, default=2, help="interleaved repeats per prompt (minimum kept)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--k", type=int, default=3, help="draft length of the fixed schedules (HF and specdec)")
    parser.add_argument("--tree-k", type=int, help="depth of specdec's tree drafts (default: K)")
    parser.add_argument("--branches", type=int, default=2, help="root children of specdec's tree drafts")
    parser.add_argument("--tune", action="store_true",
                        help="compare specdec draft-length policies on held-out text instead (see module doc)")
    parser.add_argument("--tune-file", type=Path, help="GSM8K train.jsonl (default: shipped with specdec)")
    parser.add_argument("--tune-prompts", type=int, default=4, help="texts per kind (GSM8K train, stdlib code)")
    parser.add_argument("--policies", nargs="*", help="with --tune: subset of the candidate policies (names)")
    parser.add_argument("--methods", nargs="*", help="subset of methods to run (hf_greedy always runs)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is steadiest on a shared CPU)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "draft_model")
    parser.add_argument("--tag", default="", help="suffix of the result file names")
    parser.add_argument("--note", default="", help="free text recorded with the results (e.g. 'CPU shared')")
    args = parser.parse_args(argv)
    if (args.target is None) != (args.draft is None):
        parser.error("--target and --draft go together")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    target, draft, tokenizer, pair_name = load_pair(args)
    args.target_fingerprint, args.draft_fingerprint = model_fingerprint(target), model_fingerprint(draft)
    counter = ForwardCounter(target)
    load_start = [round(x, 2) for x in os.getloadavg()]
    command = "python -m specdec.benchmarks.draft_model_vs_assisted " + " ".join(
        argv if argv is not None else sys.argv[1:])
    if args.tune:
        tuning = tune_policies(args, target, draft, tokenizer, counter)
        result = {"pair": pair_name, "command": command, "machine": machine_info(), "threads": args.threads,
                  "load_start": load_start, "load_end": [round(x, 2) for x in os.getloadavg()],
                  "max_new_tokens": args.max_new_tokens, "target_fingerprint": args.target_fingerprint,
                  "draft_fingerprint": args.draft_fingerprint, "tuning": tuning}
        args.out.mkdir(parents=True, exist_ok=True)
        stem = "policy_tuning" + (f"_{args.tag}" if args.tag else "")
        (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
        (args.out / f"{stem}.md").write_text(tune_markdown(result), encoding="utf-8")
        print(tune_markdown(result))
        return 0

    context = target.config.max_position_embeddings
    prompts = load_prompts(args.spec_bench or data_file("spec_bench"), args.humaneval_file or data_file("humaneval"),
                           args.per_subtask, args.humaneval)
    args.planned = len(prompts)
    limit = context - args.max_new_tokens
    args.tree_k = args.tree_k or args.k
    methods_all = build_methods(draft, args.k, args.tree_k, args.branches)
    names = ["hf_greedy"] + [m for m in methods_all if m != "hf_greedy" and (not args.methods or m in args.methods)]

    warm = tokenizer("def f(x):\n    return")["input_ids"]
    for name in names:  # warm-up: first calls pay one-off costs (lazy init, allocator)
        run_method(name, methods_all[name], target, draft, tokenizer, warm, 8, counter)

    records, mismatches = [], []
    for index, prompt in enumerate(prompts):
        ids = list(tokenizer(prompt["text"])["input_ids"])
        truncated = len(ids) > limit
        ids = ids[-limit:]
        runs: dict[str, dict] = {}
        identical = {name: True for name in names}
        for repeat in range(args.repeats):
            shift = (index + repeat) % len(names)  # rotate to spread load drift over methods
            this = {name: run_method(name, methods_all[name], target, draft, tokenizer, ids, args.max_new_tokens,
                                     counter) for name in names[shift:] + names[:shift]}
            reference = this["hf_greedy"]["tokens"] if repeat == 0 else runs["hf_greedy"]["tokens"]
            for name, run in this.items():
                if run["tokens"] != reference:
                    identical[name] = False
                    mismatches.append({"id": prompt["id"], "method": name, "repeat": repeat,
                                       "at": first_difference(run["tokens"], reference)})
                if name not in runs:
                    runs[name] = {**run, "seconds_all": [], "cpu_seconds_all": []}
                runs[name]["seconds_all"].append(run["seconds"])
                runs[name]["cpu_seconds_all"].append(run["cpu_seconds"])
                runs[name]["seconds"] = min(runs[name]["seconds_all"])
                runs[name]["cpu_seconds"] = min(runs[name]["cpu_seconds_all"])
        for run in runs.values():
            run["new_tokens"] = len(run["tokens"])
        records.append({"id": prompt["id"], "category": prompt["category"], "prompt_tokens": len(ids),
                        "truncated": truncated, "runs": runs, "identical": identical})
        line = " ".join(f"{n}={runs[n]['new_tokens'] / runs[n]['cpu_seconds']:.0f}" for n in names)
        print(f"[{index + 1}/{len(prompts)}] {prompt['id']} ({len(ids)} tok) tok/CPU-s: {line}", file=sys.stderr)
        write_results(args, command, pair_name, draft, names, methods_all, records, mismatches, load_start)
    result = write_results(args, command, pair_name, draft, names, methods_all, records, mismatches, load_start)
    print(markdown(result))
    return 0 if not mismatches else 1


def model_fingerprint(model) -> str:
    """A short hash of the weights, so results name the exact checkpoint they measured."""
    import hashlib

    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        digest.update(tensor.detach().float().cpu().numpy().tobytes()[:4096])
    return digest.hexdigest()[:12]


def write_results(args, command, pair_name, draft, names, methods_all, records, mismatches, load_start) -> dict:
    """(Re)write JSON + Markdown with every prompt finished so far (a cut-short run keeps its data)."""
    load_end = [round(x, 2) for x in os.getloadavg()]
    result = {
        "pair": pair_name, "prompts_done": len(records), "prompts_planned": args.planned,
        "draft_fingerprint": args.draft_fingerprint, "target_fingerprint": args.target_fingerprint,
        "command": command,
        "machine": machine_info(), "load_start": load_start, "load_end": load_end,
        "note": args.note or ("CPU shared with other jobs during the run." if load_start[0] > 1.5 else ""),
        "settings": {"max_new_tokens": args.max_new_tokens, "k": args.k, "tree_k": args.tree_k,
                     "branches": args.branches, "threads": args.threads, "per_subtask": args.per_subtask,
                     "humaneval": args.humaneval, "repeats": args.repeats,
                     "hf_assisted_defaults": hf_assisted_defaults(draft)},
        "methods": names,
        "specdec_options": {n: {k: v for k, v in methods_all[n].get("options", {}).items() if k != "model"}
                            for n in names if n.startswith("specdec")},
        "specdec_default_options": DraftModelOptions(model=draft).model_dump(exclude={"model", "tokenizer"}),
        "summary": summarize(records, names),
        "mismatches": mismatches,
        "records": [{**r, "runs": {n: {k: v for k, v in run.items() if k != "tokens"} for n, run in r["runs"].items()}}
                    for r in records],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "draft_model_vs_assisted" + (f"_{args.tag}" if args.tag else "")
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    (args.out / f"{stem}.md").write_text(markdown(result), encoding="utf-8")
    return result


if __name__ == "__main__":
    raise SystemExit(main())
