"""specdec's draft_model drafter vs transformers' assisted generation, side by side in one process.

On the same prompts (Spec-Bench: a few first turns of every subtask; HumanEval prompts), greedy:

    hf_greedy        target.generate()                                   (the reference output)
    hf_assisted      target.generate(assistant_model=draft)              (transformers' defaults)
    hf_assisted_k    ... num_assistant_tokens=K, no confidence exit      (same K as specdec's fixed)
    specdec_*        specdec.generate(drafter="draft_model", ...)        fixed K, heuristic,
                                                                         confidence exit, tree

Every output must equal hf_greedy token for token. Methods run interleaved per prompt (order
rotated) so load on a shared machine hits them alike. tau is tokens per target forward (counted
with a forward hook for transformers, from specdec's stats). Writes JSON + Markdown.

    python -m specdec.benchmarks.draft_model_vs_assisted --per-subtask 3 --humaneval 6
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

import specdec

from .machine import machine_info

MT_BENCH = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


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
    """name -> how to run it. HF settings are passed to generate(); specdec ones are drafter options."""
    return {
        "hf_greedy": {"kind": "hf", "assisted": None},
        "hf_assisted": {"kind": "hf", "assisted": {}},
        "hf_assisted_k": {"kind": "hf", "assisted": {"num_assistant_tokens": k,
                                                     "assistant_confidence_threshold": 0.0}},
        "specdec_fixed": {"kind": "specdec", "options": {"model": draft, "k": k}},
        "specdec_heuristic": {"kind": "specdec", "options": {"model": draft, "k": k, "schedule": "heuristic"}},
        "specdec_confidence": {"kind": "specdec", "options": {"model": draft, "k": 2 * k, "schedule": "confidence",
                                                              "confidence_threshold": 0.4,
                                                              "adaptive_threshold": True,
                                                              "target_acceptance": 0.8}},
        "specdec_tree": {"kind": "specdec", "options": {"model": draft, "k": tree_k, "branches": branches,
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
    started = time.perf_counter()
    if spec["kind"] == "hf":
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        tokens = hf_run(target, draft, ids, max_new, spec["assisted"], pad_id)
        elapsed = time.perf_counter() - started
        forwards = counter.calls - before
        record = {"tokens": tokens, "seconds": elapsed, "target_forwards": forwards}
        if spec["assisted"] is not None:
            record["tau"] = len(tokens) / max(forwards, 1)  # assisted decoding has no separate prefill
        return record
    out = specdec.generate(target, ids, tokenizer=tokenizer, drafter="draft_model", drafter_options=spec["options"],
                           verifier="exact", max_new_tokens=max_new)
    elapsed = time.perf_counter() - started
    stats = out.stats
    return {"tokens": out.sequences[0], "seconds": elapsed, "target_forwards": counter.calls - before,
            "tau": stats.mean_accepted, "acceptance": stats.acceptance_rate,
            "draft_s": stats.draft_time, "verify_s": stats.verify_time, "other_s": stats.other_time,
            "prefill_s": stats.prefill_time, "draft_cache_peak_bytes": stats.drafter_stats.get("draft_cache_peak_bytes")}


def first_difference(a: list[int], b: list[int]) -> int | None:
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def summarize(records: list[dict], methods: list[str]) -> dict[str, dict[str, dict]]:
    """Per category (and 'all'): tokens/s = total tokens / total seconds; mean tau; speedups."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        groups[record["category"]].append(record)
        groups["all"].append(record)
    table: dict[str, dict[str, dict]] = {}
    for category, rows in groups.items():
        table[category] = {}
        for method in methods:
            runs = [row["runs"][method] for row in rows]
            tokens = sum(len(r["tokens"]) for r in runs)
            seconds = sum(r["seconds"] for r in runs)
            taus = [r["tau"] for r in runs if "tau" in r]
            table[category][method] = {
                "prompts": len(runs), "tokens": tokens, "seconds": seconds,
                "tokens_per_s": tokens / seconds if seconds else 0.0,
                "tau": sum(taus) / len(taus) if taus else None,
                "identical": sum(row["identical"][method] for row in rows),
            }
        base = table[category]["hf_greedy"]["tokens_per_s"]
        assisted = table[category]["hf_assisted"]["tokens_per_s"]
        best_hf = max(table[category][m]["tokens_per_s"] for m in methods if m.startswith("hf_assisted"))
        for method in methods:
            cell = table[category][method]
            cell["speedup_vs_greedy"] = cell["tokens_per_s"] / base if base else None
            cell["ratio_vs_hf_assisted"] = cell["tokens_per_s"] / assisted if assisted else None
            cell["ratio_vs_best_hf_assisted"] = cell["tokens_per_s"] / best_hf if best_hf else None
    return table


def markdown(result: dict) -> str:
    methods = result["methods"]
    lines = [f"# draft_model vs transformers assisted generation ({result['pair']})", "",
             f"Command: `{result['command']}`", "",
             f"Machine: {result['machine'].get('cpu')}, {result['machine'].get('cores')} cores, torch threads "
             f"{result['settings']['threads']}, load average at start {result['load_start']} / end "
             f"{result['load_end']}. {result['note']}", "",
             f"Settings: {json.dumps(result['settings'])}; K tuning: {json.dumps(result['k_tuning'])}", "",
             f"Prompts finished: {result['prompts_done']} of {result['prompts_planned']}. Weights: target "
             f"{result['target_fingerprint']}, draft {result['draft_fingerprint']}.", "",
             "tokens/s = new tokens / wall seconds summed over a category's prompts; speedup is vs plain "
             "`target.generate()` greedy; `vs HF` is vs `generate(assistant_model=draft)` with transformers' "
             "defaults; `vs best HF` is vs the faster of the two HF assisted settings. tau = new tokens per "
             "target forward. `same` = prompts whose output equals plain greedy token for token.", ""]
    header = "| category | method | tok/s | speedup | vs HF | vs best HF | tau | same |"
    lines += [header, "|---|---|---|---|---|---|---|---|"]
    for category, cells in result["summary"].items():
        for method in methods:
            c = cells[method]
            tau = f"{c['tau']:.2f}" if c["tau"] is not None else "1.00" if method == "hf_greedy" else "-"
            lines.append(f"| {category} | {method} | {c['tokens_per_s']:.1f} | {c['speedup_vs_greedy']:.2f}x | "
                         f"{c['ratio_vs_hf_assisted']:.2f} | {c['ratio_vs_best_hf_assisted']:.2f} | {tau} | "
                         f"{c['identical']}/{c['prompts']} |")
    lines += ["", "## specdec faster than HF assisted (defaults / best setting) in every category?", ""]
    for method in methods:
        if method.startswith("specdec"):
            worst = min((cells[method]["ratio_vs_hf_assisted"], cat) for cat, cells in result["summary"].items())
            worst_best = min((cells[method]["ratio_vs_best_hf_assisted"], cat)
                             for cat, cells in result["summary"].items())
            lines.append(f"- {method}: worst ratio vs HF defaults {worst[0]:.2f} ({worst[1]}), vs best HF "
                         f"{worst_best[0]:.2f} ({worst_best[1]})")
    if result["mismatches"]:
        lines += ["", "## Outputs differing from plain greedy", ""]
        lines += [f"- {m['id']} {m['method']}: first difference at token {m['at']}" for m in result["mismatches"]]
    return "\n".join(lines) + "\n"


def tune_k(candidates: list[int], texts: list[str], target, draft, tokenizer, max_new: int, limit: int,
           counter: ForwardCounter) -> tuple[int, dict[int, float]]:
    """Pick K for the fixed schedules on held-out text (GSM8K *train* questions, never the
    benchmark prompts): the K with the best specdec fixed-K tokens/s."""
    speeds: dict[int, float] = {}
    warm = {"kind": "specdec", "options": {"model": draft, "k": candidates[0]}}
    run_method("warm-up", warm, target, draft, tokenizer, list(tokenizer(texts[0])["input_ids"]), 8, counter)
    for k in candidates:
        spec = {"kind": "specdec", "options": {"model": draft, "k": k}}
        tokens = seconds = 0.0
        for text in texts:
            ids = list(tokenizer(text)["input_ids"])[-limit:]
            run = run_method("tune", spec, target, draft, tokenizer, ids, max_new, counter)
            tokens, seconds = tokens + len(run["tokens"]), seconds + run["seconds"]
        speeds[k] = tokens / seconds
        print(f"tune: k={k} {speeds[k]:.1f} tok/s", file=sys.stderr)
    return max(speeds, key=speeds.get), speeds


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
    parser.add_argument("--spec-bench", type=Path, default=DATA / "spec_bench" / "question.jsonl")
    parser.add_argument("--humaneval-file", type=Path, default=DATA / "humaneval" / "HumanEval.jsonl.gz")
    parser.add_argument("--per-subtask", type=int, default=3, help="Spec-Bench prompts per subtask")
    parser.add_argument("--humaneval", type=int, default=6, help="HumanEval prompts")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--k", type=int, default=4, help="draft length of the fixed schedules (HF and specdec)")
    parser.add_argument("--tree-k", type=int, help="depth of specdec's tree drafts (default: K)")
    parser.add_argument("--branches", type=int, default=2, help="root children of specdec's tree drafts")
    parser.add_argument("--tune-k", type=int, nargs="*", default=[],
                        help="candidate K values: pick --k by specdec fixed-K speed on GSM8K train questions")
    parser.add_argument("--tune-file", type=Path, default=DATA / "gsm8k" / "train.jsonl")
    parser.add_argument("--tune-prompts", type=int, default=4)
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
    context = target.config.max_position_embeddings
    prompts = load_prompts(args.spec_bench, args.humaneval_file, args.per_subtask, args.humaneval)
    args.planned = len(prompts)
    args.target_fingerprint, args.draft_fingerprint = model_fingerprint(target), model_fingerprint(draft)
    limit = context - args.max_new_tokens
    counter = ForwardCounter(target)
    load_start = [round(x, 2) for x in os.getloadavg()]
    tuning = None
    if args.tune_k:
        with open(args.tune_file, encoding="utf-8") as handle:
            texts = [json.loads(line)["question"] for line, _ in zip(handle, range(args.tune_prompts))]
        args.k, speeds = tune_k(args.tune_k, texts, target, draft, tokenizer, args.max_new_tokens, limit, counter)
        tuning = {"file": str(args.tune_file), "prompts": len(texts), "tokens_per_s_by_k": speeds, "chosen_k": args.k}
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
        order = names[index % len(names):] + names[: index % len(names)]  # rotate to spread load drift
        runs = {name: run_method(name, methods_all[name], target, draft, tokenizer, ids, args.max_new_tokens,
                                 counter) for name in order}
        reference = runs["hf_greedy"]["tokens"]
        identical = {name: runs[name]["tokens"] == reference for name in names}
        for name in names:
            if not identical[name]:
                mismatches.append({"id": prompt["id"], "method": name,
                                   "at": first_difference(runs[name]["tokens"], reference)})
        records.append({"id": prompt["id"], "category": prompt["category"], "prompt_tokens": len(ids),
                        "truncated": truncated, "runs": runs, "identical": identical})
        line = " ".join(f"{n}={len(runs[n]['tokens']) / runs[n]['seconds']:.0f}" for n in names)
        print(f"[{index + 1}/{len(prompts)}] {prompt['id']} ({len(ids)} tok) tok/s: {line}", file=sys.stderr)

        write_results(args, argv, pair_name, draft, names, methods_all, records, mismatches, tuning, load_start)
    result = write_results(args, argv, pair_name, draft, names, methods_all, records, mismatches, tuning, load_start)
    print(markdown(result))
    return 0 if not mismatches else 1


def model_fingerprint(model) -> str:
    """A short hash of the weights, so results name the exact checkpoint they measured."""
    import hashlib

    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        digest.update(tensor.detach().float().cpu().numpy().tobytes()[:4096])
    return digest.hexdigest()[:12]


def write_results(args, argv, pair_name, draft, names, methods_all, records, mismatches, tuning,
                  load_start) -> dict:
    """(Re)write JSON + Markdown with every prompt finished so far (a cut-short run keeps its data)."""
    load_end = [round(x, 2) for x in os.getloadavg()]
    result = {
        "pair": pair_name, "prompts_done": len(records), "prompts_planned": args.planned,
        "draft_fingerprint": args.draft_fingerprint, "target_fingerprint": args.target_fingerprint,
        "command": "python -m specdec.benchmarks.draft_model_vs_assisted " + " ".join(argv if argv is not None
                                                                                     else sys.argv[1:]),
        "machine": machine_info(), "load_start": load_start, "load_end": load_end,
        "note": args.note or ("CPU shared with other jobs during the run." if load_start[0] > 1.5 else ""),
        "settings": {"max_new_tokens": args.max_new_tokens, "k": args.k, "tree_k": args.tree_k,
                     "branches": args.branches, "threads": args.threads, "per_subtask": args.per_subtask,
                     "humaneval": args.humaneval, "hf_assisted_defaults": hf_assisted_defaults(draft)},
        "k_tuning": tuning,
        "methods": names,
        "specdec_options": {n: {k: v for k, v in methods_all[n].get("options", {}).items() if k != "model"}
                            for n in names if n.startswith("specdec")},
        "summary": summarize(records, names),
        "mismatches": mismatches,
        "records": [{**r, "runs": {n: {k: v for k, v in run.items() if k != "tokens"} | {"new_tokens": len(run["tokens"])}
                                   for n, run in r["runs"].items()}} for r in records],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "draft_model_vs_assisted" + (f"_{args.tag}" if args.tag else "")
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    (args.out / f"{stem}.md").write_text(markdown(result), encoding="utf-8")
    return result


if __name__ == "__main__":
    raise SystemExit(main())
