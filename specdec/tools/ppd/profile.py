"""`specdec profile`: hardware-aware tree sizing (P §4.2.2): measure latency(n) of the verification
forward on this device, take tau(n) from the tree builder's expected acceptance, pick n* = argmax
tau(n)/latency(n), and store it keyed by device so a profile is never silently reused on other hardware.

Under the goodput controller (the default schedule) the tree is cut per step, but the prompt slots
under the root are paid on every drafting step: m prompts x n_ept ensemble tokens inputs, which the
controller cannot cut. How many are worth it depends on the device (on a GPU a dozen extra inputs cost
nothing; on a CPU they cost 20% of a step) and on how much the ensemble adds, which the checkpoint's
accuracies do not say for fewer tokens. So the profile also measures it end to end (`measure_goodput`):
the bundled Spec-Bench prompts decoded under the controller with each (m, n_ept), interleaved, and the
fastest is stored as the entry's "goodput" choice, which the drafter uses where no option says otherwise.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch

from specdec.costs import CostModel, cost_clock, device_key  # one key per device for every measured cost
from specdec.drafters.ppd.profile import load_profile

#: What the goodput choice is timed on: this many Spec-Bench prompts per category, decoding this many tokens. At one
#: prompt and 64 tokens (the answers' openings, where PPD's predictions are accepted least) every choice and plain
#: decoding read within 1.5% of each other on this CPU, noise; over 30 prompts of 128 tokens one ensemble token ran
#: 2% faster than two (`benchmarks/results/goodput/ppd_look_s54`).
GOODPUT_PER_CATEGORY = 2
GOODPUT_TOKENS = 128


def save_profile(path: str | Path, fingerprint: str, key: str, entry: dict) -> dict:
    """Merge one device's entry into the profile file (other devices' entries are kept)."""
    path = Path(path)
    data = load_profile(path) if path.is_file() else {"fingerprint": fingerprint, "devices": {}}
    if data.get("fingerprint") != fingerprint:
        data = {"fingerprint": fingerprint, "devices": {}}  # a new checkpoint: old timings are meaningless
    data["devices"][key] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return data


def _tree_inputs(tree, num_ept: int = 1) -> tuple[torch.Tensor, int]:
    """Input-index parents [1, T] of a state tree laid out as the engine does: [root, nodes, prompts]
    (each prompt as `num_ept` slots, as the drafter lays it out)."""
    layout = tree.layout(num_ept)
    nodes = len(layout["cand_depth"])
    parents = [0] + [p + 1 for p in layout["cand_parent"]]
    for anchor, previous in zip(layout["anchor_node"], layout["parent_slot"]):
        parents.append(1 + nodes + previous if previous >= 0 else anchor + 1)
    return torch.tensor([parents]), len(parents)


def measure_latency(model, trees_by_key: dict[Any, object], context: int, repeats: int, seed: int = 0,
                    num_ept: int = 1) -> dict[Any, float]:
    """Median seconds of one verification forward (mask building included) per tree configuration, on
    a prefix of `context` tokens. Configurations are interleaved each round so load drift on a shared
    machine hits all alike. Key None = plain decoding (one input token)."""
    from specdec.engine import tree_layout
    from specdec.target import TargetRunner

    vocab = model.get_input_embeddings().weight.shape[0]
    generator = torch.Generator().manual_seed(seed)
    prefix = torch.randint(0, vocab, (1, context), generator=generator)
    inputs: dict[Any, tuple[torch.Tensor, int]] = {None: (torch.zeros(1, 1, dtype=torch.long), 1)}
    for key, trees in trees_by_key.items():
        inputs[key] = _tree_inputs(trees.trees[trees.num_prompts], num_ept)
    biggest = max(count for _, count in inputs.values())
    runner = TargetRunner(model, 1, context + biggest + 2)
    runner.prefill(prefix, torch.tensor([context]))
    times: dict[Any, list[float]] = {key: [] for key in inputs}
    for round_index in range(repeats + 1):
        for key, (parents, count) in inputs.items():
            token_ids = torch.randint(0, vocab, (1, count), generator=generator)
            start = time.perf_counter()
            depths, visible = tree_layout(parents)
            runner.verify_forward(token_ids, depths, visible)
            elapsed = time.perf_counter() - start
            if round_index:  # the first round warms up
                times[key].append(elapsed)
    runner.release()
    return {key: sorted(values)[len(values) // 2] for key, values in times.items()}


def plot_profile(entry: dict, path: str | Path, title: str) -> None:
    """Three panels: tau(n), latency(n), tau(n)/latency(n), one curve per prompt count m, n* marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    best, best_m = entry["best_size"], entry["best_num_prompts"]
    plain = 1000 * entry["latency_plain_s"]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for m, curve in sorted(entry["curves"].items()):
        sizes = curve["sizes"]
        tau, latency = curve["tau"], [1000 * t for t in curve["latency_s"]]
        ratio = [t / lat for t, lat in zip(tau, latency)]
        style = "o-" if int(m) == best_m else "o--"
        for ax, values in zip(axes, (tau, latency, ratio)):
            ax.plot(sizes, values, style, label=f"m={m} prompt tokens", alpha=1.0 if int(m) == best_m else 0.5)
    titles = ("tau(n): expected tokens per step", "latency(n): ms per verification forward",
              "tau(n)/latency(n): tokens per ms")
    for ax, label in zip(axes, titles):
        ax.axvline(best, color="red", linestyle="--", label=f"chosen n*={best} (m={best_m})")
        ax.set_xlabel("tree size n (candidates + prompts; excl. root and its m prompts)", fontsize=8)
        ax.set_title(label, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].axhline(1.0, color="gray", linestyle=":", label="plain decode")
    axes[1].axhline(plain, color="gray", linestyle=":", label="plain decode (1 token)")
    axes[2].axhline(1.0 / plain, color="gray", linestyle=":", label="plain decode")
    for ax in axes:
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def goodput_candidates(num_prompts: int, num_ept: int) -> list[tuple[int, int]]:
    """(m, ensemble tokens) pairs to time: every prompt count with 1, 2, 4, ... up to all the ensemble tokens."""
    widths = sorted({1 << i for i in range(num_ept.bit_length()) if 1 << i <= num_ept} | {num_ept})
    return [(m, e) for m in range(1, num_prompts + 1) for e in widths]


def measure_goodput(model, checkpoint_path: Path, prompts: list[list[int]], candidates: list[tuple[int, int]],
                    max_new_tokens: int = GOODPUT_TOKENS, rounds: int = 2) -> dict:
    """Seconds (this process's CPU time with one torch thread, else wall time) to decode `prompts` under the
    goodput controller with each (m, n_ept) and with no drafter, interleaved per prompt so load drift hits
    all alike; the fastest pair. Every output is checked equal to plain decoding's. Each pair has a cost model
    of its own: what the controller learns of one (its pooled acceptance, its prompt slots' count and price, its
    failed probes) is kept under the drafter's name, and shared it priced a 1x1 row with the last 3x4 row's
    12 root slots."""
    import specdec
    from specdec.drafters.ppd.drafter import PPDDrafter, PPDOptions

    device = model.get_input_embeddings().weight.device
    clock = cost_clock(device)
    drafters = {"none": None}
    for m, e in candidates:
        drafters[f"{m}x{e}"] = PPDDrafter(PPDOptions(checkpoint=str(checkpoint_path), num_prompts=m, num_ept=e))
    costs = {name: CostModel(device_key(device)) for name in drafters}
    for name, drafter in drafters.items():  # warm-up: cost curves, first-call setup
        specdec.generate(model, prompts[0], drafter=drafter, max_new_tokens=8, cost_model=costs[name])
    seconds = dict.fromkeys(drafters, 0.0)
    for _ in range(rounds):
        for prompt in prompts:
            reference = None
            for name, drafter in drafters.items():
                started = clock()
                out = specdec.generate(model, prompt, drafter=drafter, max_new_tokens=max_new_tokens,
                                       cost_model=costs[name])
                seconds[name] += clock() - started
                reference = out.sequences[0] if reference is None else reference
                if out.sequences[0] != reference:
                    raise RuntimeError(f"ppd {name} changed the greedy output: the runtime is broken")
    best = min((name for name in drafters if name != "none"), key=seconds.__getitem__)
    m, e = (int(x) for x in best.split("x"))
    return {"num_prompts": m, "num_ept": e, "speedup_vs_none": seconds["none"] / seconds[best],
            "seconds": seconds, "prompts": len(prompts), "max_new_tokens": max_new_tokens, "rounds": rounds}


def benchmark_prompts(tokenizer, context: int | None, max_new_tokens: int, per_category: int = 1) -> list[list[int]]:
    """`per_category` prompts of each Spec-Bench category, from the copy shipped in the package."""
    from specdec.benchmarks.datasets import PromptBuilder, load_dataset

    builder = PromptBuilder(tokenizer, context, max_new_tokens)
    return [builder.encode([], sample.turns[0])[0]
            for sample in load_dataset("spec_bench", per_category=per_category)]


def build_parser():
    import argparse

    parser = argparse.ArgumentParser(prog="specdec profile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help='local model directory or "default"')
    parser.add_argument("--checkpoint", default=None, help="PPD prompt checkpoint (default: the shipped one "
                        "for --model default)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96])
    parser.add_argument("--num-prompts", type=int, nargs="+", default=None,
                        help="prompt counts m to try (the first m of the checkpoint's); default: all of them")
    parser.add_argument("--tree", choices=["dynamic", "static"], default="dynamic")
    parser.add_argument("--context", type=int, default=256, help="prefix length while timing")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--out", default=None, help="profile JSON (default: beside the checkpoint)")
    parser.add_argument("--plot", default=None, help="also write the tau/latency plot here (PNG)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--no-goodput", action="store_true", help="skip measuring the prompt count and ensemble "
                        "width the goodput controller runs fastest with (needs a tokenizer beside the model)")
    return parser


def run_profile(model, checkpoint, sizes: list[int], tree: str, context: int, repeats: int,
                prompt_counts: list[int] | None = None) -> dict:
    """Profile entry for this device: per prompt count m, tau(n) and latency(n); the (m, n) maximising
    tau/latency. Using the first m' < m prompts of a chain is exact (prompt k never sees later ones).
    Every prompt is timed as the checkpoint's n_ept slots: the drafter's default uses all of them."""
    from specdec.drafters.ppd.drafter import _cached_trees
    from specdec.drafters.ppd.trees import prior_accuracies

    accuracies = checkpoint.accuracies or prior_accuracies(checkpoint.num_prompts)
    counts = prompt_counts or [checkpoint.num_prompts]
    if any(not 1 <= m <= checkpoint.num_prompts for m in counts):
        raise ValueError(f"--num-prompts must be within 1..{checkpoint.num_prompts} (the checkpoint's)")
    trees = {(m, n): _cached_trees(json.dumps(accuracies[:m]), m, n, tree) for m in counts for n in sizes}
    latency = measure_latency(model, trees, context, repeats, num_ept=checkpoint.num_ept)
    curves, best, best_ratio = {}, None, -1.0
    for m in counts:
        tau = [trees[m, n].expected_tau for n in sizes]
        lat = [latency[m, n] for n in sizes]
        curves[str(m)] = {"sizes": sizes, "tau": tau, "latency_s": lat,
                          "inputs_per_step": [_tree_inputs(trees[m, n].trees[m], checkpoint.num_ept)[1] for n in sizes]}
        for n, t, seconds in zip(sizes, tau, lat):
            if t / seconds > best_ratio:
                best, best_ratio = (m, n), t / seconds
    return {"curves": curves, "best_num_prompts": best[0], "best_size": best[1],
            "expected_speedup_vs_plain": best_ratio * latency[None], "latency_plain_s": latency[None],
            "tree": tree, "context": context, "repeats": repeats, "torch_threads": torch.get_num_threads(),
            "num_ept": checkpoint.num_ept,
            "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "tau_from": "measured accuracies" if checkpoint.accuracies else "prior (untrained)"}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from specdec.api import load_model
    from specdec.drafters.ppd.drafter import default_checkpoint_path, profile_path_for
    from specdec.drafters.ppd.prompts import PromptCheckpoint

    model, tokenizer = load_model(args.model)
    if args.checkpoint is None and args.model != "default":
        raise SystemExit("specdec profile: --checkpoint is required unless --model default")
    checkpoint_path = Path(args.checkpoint) if args.checkpoint else default_checkpoint_path()
    checkpoint = PromptCheckpoint.load(checkpoint_path)
    checkpoint.check_model(model, str(checkpoint_path))
    key = device_key(model.get_input_embeddings().weight.device)
    counts = args.num_prompts or list(range(1, checkpoint.num_prompts + 1))
    entry = run_profile(model, checkpoint, sorted(set(args.sizes)), args.tree, args.context, args.repeats,
                        sorted(set(counts)))
    if not args.no_goodput:
        if tokenizer is None:
            raise SystemExit("specdec profile: measuring the goodput choice needs a tokenizer beside the model "
                             "(or pass --no-goodput)")
        from specdec.target import context_length

        prompts = benchmark_prompts(tokenizer, context_length(model), GOODPUT_TOKENS, GOODPUT_PER_CATEGORY)
        entry["goodput"] = measure_goodput(model, checkpoint_path, prompts,
                                           goodput_candidates(checkpoint.num_prompts, checkpoint.num_ept))
        choice = entry["goodput"]
        print(f"goodput controller: fastest with m={choice['num_prompts']} and {choice['num_ept']} ensemble "
              f"token(s) per prompt ({choice['speedup_vs_none']:.2f}x plain decoding over {len(prompts)} prompts)")
    out = Path(args.out) if args.out else profile_path_for(checkpoint_path)
    save_profile(out, checkpoint.fingerprint, key, entry)
    for m, curve in entry["curves"].items():
        for n, t, lat in zip(curve["sizes"], curve["tau"], curve["latency_s"]):
            print(f"m={m} n={n:4d} tau={t:.3f} latency={1000 * lat:7.2f} ms  tau/latency={t / (1000 * lat):.4f}/ms")
    print(f"plain decode latency {1000 * entry['latency_plain_s']:.2f} ms; best for {key}: m={entry['best_num_prompts']}"
          f" n={entry['best_size']} (expected speedup {entry['expected_speedup_vs_plain']:.2f}x) -> {out}")
    if args.plot:
        plot_profile(entry, args.plot, f"PPD hardware profile on {key}")
        print(f"plot -> {args.plot}")
    return 0
