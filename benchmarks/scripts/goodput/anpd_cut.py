"""anpd under the goodput controller against its constant rule on one target, alternating, with the controller's
trace: per verified width, the measured verify seconds, the cost table's price, expected and accepted tokens;
and why steps were plain. A diagnostic for the controller's cut of a free drafter (stop 43's closing note).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/scripts/goodput/anpd_cut.py /work/second/target [rounds]
"""

from __future__ import annotations

import collections
import sys
import time

import torch
from specdec.benchmarks.datasets import PromptBuilder, load_dataset

import specdec
from specdec.api import load_model
from specdec.costs import CostModel, device_key
from specdec.target import context_length


def main() -> None:
    torch.set_num_threads(1)
    model, tokenizer = load_model(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    builder = PromptBuilder(tokenizer, context_length(model), 64)
    prompts = [builder.encode([], sample.turns[0])[0] for sample in load_dataset("spec_bench", None, None, 2)]
    costs = CostModel(device_key("cpu"))
    speeds: dict[str, list[float]] = collections.defaultdict(list)
    for round_index in range(rounds):
        last = round_index == rounds - 1
        for schedule in ("goodput", "constant"):
            seconds, tokens, trace = 0.0, 0, []
            counts: collections.Counter = collections.Counter()
            for prompt in prompts:
                started = time.process_time()
                out = specdec.generate(model, prompt, tokenizer=tokenizer, drafter="anpd", verifier="exact",
                                       drafter_options={"schedule": schedule}, max_new_tokens=64, cost_model=costs,
                                       **({"controller": {"trace": True}} if schedule == "goodput" else {}))
                seconds += time.process_time() - started
                tokens += len(out.sequences[0])
                controller = out.stats.controller or {}
                trace += controller.get("trace", [])
                counts.update({"steps": out.stats.steps, "drafted": sum(out.stats.drafted_per_step),
                               "no draft": out.stats.no_draft_row_steps, **controller.get("plain_reasons", {})})
            speeds[schedule].append(tokens / seconds)
            if last:
                print(schedule, dict(counts))
            if last and schedule == "goodput":
                by_width: dict[int, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0])
                for step in trace:
                    row = by_width[step["verified"][0]]
                    row[0] += 1
                    row[1] += step.get("verify", 0.0)
                    row[2] += step["expected"][0]
                    row[3] += step["accepted"][0] if step["accepted"] else 0
                table = costs.table()
                print("  engine overhead priced per step (drafter, drafted): "
                      + ", ".join(f"{key} {1e3 * value:.3f} ms" for key, value in sorted(table.overheads.items())))
                for width in sorted(by_width):
                    steps, verify, expected, accepted = by_width[width]
                    print(f"  verified {width:2d}: steps {steps:4d}, verify {1e3 * verify / steps:6.3f} ms (priced "
                          f"{1e3 * table.verify(1, 1 + width):6.3f} behind a short cache), expected tokens "
                          f"{expected / steps:5.2f}, committed {1 + accepted / steps:5.2f}")
    print("tokens per CPU second:", {name: [round(v, 1) for v in values] for name, values in speeds.items()})


if __name__ == "__main__":
    main()
