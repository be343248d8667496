"""Stop 78: the nominal costs seeded calls price with (`specdec.nominal_costs`) against what this machine measures.
Greedy calls (live decisions) of draft_model, layer_skip and ppd_draft_model on the batching benchmark's first four
prompts (Spec-Bench's, 12-384 tokens) teach one cost model the drafters' costs; prints, as shares of a plain step,
the measured verify curve and each drafter's fitted cost per level and per fed token beside the nominal ones.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s78/nominal_vs_measured.py
"""

import subprocess

import torch
from specdec.benchmarks.batching import load_prompts

import specdec
import specdec.costs as costs
from specdec.nominal_costs import NominalDrafter, nominal_table
from specdec.registry import create

torch.set_num_threads(1)
pair = specdec.load_default()
target, tok = pair.target, pair.tokenizer
prompts = load_prompts(tok, target.config.max_position_embeddings, 16, 96, 384)[:4]
cells = [("draft_model", {"model": pair.draft}), ("layer_skip", None), ("ppd_draft_model", None)]
measured = costs.CostModel(costs.device_key("cpu"))
nominal = {}
for name, options in cells:
    drafter = create("drafter", name, options)
    for prompt in prompts:
        specdec.generate(target, [prompt], drafter=drafter, max_new_tokens=96, cost_model=measured)
    nominal[name] = NominalDrafter(drafter.nominal_cost(), name != "layer_skip")
table, guess = measured.table(), nominal_table("cpu", nominal)
version = subprocess.run(
    ["git", "describe", "--always", "--dirty"], capture_output=True, text=True
).stdout.strip()
print(f"# library {version}")
for label, t in (("measured", table), ("nominal", guess)):
    plain = t.verify(1, 1)
    curve = [round(t.verify(1, 1 + e) / plain, 3) for e in (1, 2, 3, 4, 8, 16, 32)]
    print(f"{label:9s} verify at 1, 2, 3, 4, 8, 16, 32 extra inputs / plain step: {curve}")
    for name, _ in cells:
        _, per_level, per_node, per_lag = t.draft_line(name)
        print(
            f"{label:9s} {name:16s} a level {(per_level + per_node) / plain:.3f}, a fed token {per_lag / plain:.4f}, "
            f"a 600-token prepare {t.prepare(name, 600) / plain:.2f} plain steps"
        )
