"""One run's goodput decisions, step by step: the draft width the controller chose to verify, against the
acceptance it measured and the cost of the step, for anpd and layer_skip on one Spec-Bench prompt.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/goodput_decisions.py [category]

Writes decisions.png and decisions.json into benchmarks/results/goodput/. A warm-up call on another prompt first (the cost
curve is measured at first use; pooled acceptance priors come from it), then the traced call.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from specdec.benchmarks.datasets import PromptBuilder, load_dataset

import specdec
from specdec.costs import cost_model_for
from specdec.target import context_length

HERE = Path(__file__).resolve().parent / "results" / "goodput"


def main() -> int:
    torch.set_num_threads(1)
    category = sys.argv[1] if len(sys.argv) > 1 else "qa"
    target, draft, tokenizer = specdec.load_default()
    builder = PromptBuilder(tokenizer, context_length(target), 128)
    samples = [s for s in load_dataset("spec_bench", per_category=8) if s.category == category]
    warm, traced = builder.encode([], samples[7].turns[0])[0], builder.encode([], samples[6].turns[0])[0]
    runs = {}
    for name in ("anpd", "layer_skip"):
        drafter = specdec.registry.create("drafter", name, {})
        specdec.generate(target, warm, drafter=drafter, max_new_tokens=128)
        out = specdec.generate(target, traced, drafter=drafter, max_new_tokens=128, controller={"trace": True})
        runs[name] = {"trace": out.stats.controller["trace"], "summary": out.stats.summary(),
                      "no_draft_share": out.stats.no_draft_share}
    costs = cost_model_for(target, "cpu").live
    curve = costs.curves[(True, 1)]
    data = {"category": category, "prompt": f"spec_bench {category} #6 (first turn)",
            "verify_curve_batch1": {"extra_inputs": list(curve.extras), "seconds": list(curve.seconds)},
            "runs": runs}
    (HERE / "decisions.json").write_text(json.dumps(data, indent=1) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 2, figsize=(13, 8), sharex="col")
    for column, (name, run) in enumerate(runs.items()):
        trace = run["trace"]
        steps = range(len(trace))
        proposed = [t["proposed"][0] for t in trace]
        verified = [t["verified"][0] for t in trace]
        accepted = [t["accepted"][0] for t in trace]
        expected = [t["expected"][0] - 1 for t in trace]
        verify_ms = [1000 * t["verify"] for t in trace]
        draft_ms = [1000 * t["draft"] for t in trace]
        ax = axes[0][column]
        ax.bar(steps, proposed, color="lightgray", label="proposed by the drafter")
        ax.bar(steps, verified, color="tab:blue", label="verified (chosen width)")
        ax.set_ylabel("nodes")
        ax.set_title(f"{name}: {run['summary'].split('|')[0]}| no-draft share {run['no_draft_share']:.0%}",
                     fontsize=9)
        ax.legend(fontsize=7)
        ax = axes[1][column]
        ax.plot(steps, expected, "o-", ms=3, label="expected accepted (controller)")
        ax.plot(steps, accepted, "s", ms=3, label="accepted (measured)")
        ax.set_ylabel("tokens")
        ax.legend(fontsize=7)
        ax = axes[2][column]
        ax.plot(steps, verify_ms, label="verification forward")
        ax.plot(steps, draft_ms, label="drafting + decisions")
        ax.axhline(1000 * curve.seconds[0], color="gray", linestyle=":", label="plain step (measured curve)")
        ax.set_ylabel("ms")
        ax.set_xlabel("step")
        ax.legend(fontsize=7)
    fig.suptitle(f"Goodput controller decisions, default model, Spec-Bench {category} prompt, batch 1, CPU",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(HERE / "decisions.png", dpi=110)
    print(f"wrote {HERE / 'decisions.png'} and decisions.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
