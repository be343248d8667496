"""Does a PPD prompt prediction's own top-1 probability say whether its candidate is accepted? The smallest tree (one
candidate, one prompt, one ensemble token) drafting every step on Spec-Bench's 30 first turns, 128 tokens: per category
the accepted share by predicted probability (bins 0-0.2, 0.2-0.4, ..., 0.8-1) and the AUC of the probability as a
predictor of acceptance. From the repo root:

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/ppd_look_s54/confidence.py
"""
import sys
from pathlib import Path

import numpy as np
import torch
from specdec.drafters.ppd.drafter import PPDDrafter

import specdec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "variant_ab_s52"))
from _prompts import default_pair_and_prompts  # noqa: E402

CATEGORIES = ["mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag"]
OPTIONS = {"schedule": "profile", "tree_size": 2, "num_prompts": 1, "num_ept": 1}


class Recording(PPDDrafter):
    """Records (category, top-1 probability of the prediction drafted from, accepted count) per drafted step."""

    category = ""
    log: list[tuple[str, float, int]] = []

    def propose(self, state):
        prediction = self._predictions.get(state.row_ids[0])
        self._top1 = None if prediction is None else torch.softmax(prediction[0], -1).max().item()
        return super().propose(state)

    def observe(self, state, draft, verdict, committed, extra_logits):
        if self._top1 is not None:
            self.log.append((self.category, self._top1, int(verdict.num_accepted[0])))
        super().observe(state, draft, verdict, committed, extra_logits)


pair, prompts = default_pair_and_prompts(CATEGORIES)
for category, ids in prompts:
    Recording.category = category
    specdec.generate(pair.target, ids, max_new_tokens=128, drafter=Recording(Recording.Options(**OPTIONS)))
for category in CATEGORIES + ["all"]:
    rows = [(p, a > 0) for c, p, a in Recording.log if category in (c, "all")]
    prob, hit = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
    bins = np.digitize(prob, [0.2, 0.4, 0.6, 0.8])
    shares = " ".join(f"[{i}] n={int((bins == i).sum())} acc={hit[bins == i].mean():.2f}" for i in range(5)
                      if (bins == i).any())
    pos, neg = prob[hit], prob[~hit]
    auc = ((pos[:, None] > neg[None]).mean() + 0.5 * (pos[:, None] == neg[None]).mean()) if len(pos) and len(neg) \
        else float("nan")
    print(f"{category:15s} n={len(prob)} accepted={hit.mean():.3f} auc={auc:.3f} {shares}")
