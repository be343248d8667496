"""Is the target's confidence in the token it last committed a predictor of whether the draft model's next token is
right? Greedy answers of the default target (HF generate, 128 new tokens) to Spec-Bench's prompts (5 per category), both
models run once over each full sequence; binned by the target's top probability. From the repository root:
`OMP_NUM_THREADS=2 .venv/bin/python benchmarks/results/goodput/checks_s62/conf_corr.py` (output in README.md)."""
import sys

import numpy as np
import torch

sys.path.insert(0, "benchmarks/results/goodput/variant_ab_s52")
from _prompts import default_pair_and_prompts  # noqa: E402

pair, calls = default_pair_and_prompts(["mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag"])
rows = []  # (category, confidence of the last committed token, whether the draft's next token is right)
for category, ids in calls:
    with torch.no_grad():
        sequence = pair.target.generate(torch.tensor([ids]), max_new_tokens=128, do_sample=False)[0]
        target_logits = pair.target(sequence[None]).logits[0].float()
        draft_logits = pair.draft(sequence[None]).logits[0].float()
    confidence = torch.softmax(target_logits, -1).max(-1).values  # [i]: the target's confidence in token i + 1
    right = (target_logits.argmax(-1) == draft_logits.argmax(-1)).tolist()  # [i]: the draft right about token i + 1
    for i in range(len(ids), len(sequence) - 2):  # token i committed with confidence[i - 1]; the draft predicts i + 1
        rows.append((category, confidence[i - 1].item(), right[i]))
edges = [0, 0.3, 0.5, 0.7, 0.9, 0.97, 0.995, 1.01]
print("confidence of the last committed token -> P(the draft's next token right)")
for low, high in zip(edges, edges[1:]):
    chosen = [r[2] for r in rows if low <= r[1] < high]
    if chosen:
        print(f"  [{low:.3f},{high:.3f}) n={len(chosen):5d} P(right)={np.mean(chosen):.2f}")
print(f"overall {np.mean([r[2] for r in rows]):.2f}")
for category in sorted({r[0] for r in rows}):
    chosen = [r for r in rows if r[0] == category]
    sure = [r[2] for r in chosen if r[1] >= 0.9]
    unsure = [r[2] for r in chosen if r[1] < 0.9]
    print(f"{category}: base {np.mean([r[2] for r in chosen]):.2f}, confidence >= 0.9: {np.mean(sure) if sure else 0:.2f} "
          f"({len(sure)}), < 0.9: {np.mean(unsure) if unsure else 0:.2f} ({len(unsure)})")
