"""Typical acceptance vs rejection sampling on the bundled default pair (see docs/verifiers.md).

1. Same drafts: for each GSM8K test question the draft model samples a K-token chain (q returned);
   one target forward scores it; `typical` and `rejection` (mean of 20 coin draws) verify it.
2. End to end: `specdec.generate` with the draft_model drafter and each verifier (tau).

Run: python docs/examples/typical_vs_rejection.py  (CPU, a few minutes)
"""

from __future__ import annotations

import json

import torch
from specdec.verifiers.rejection import RejectionVerifier
from specdec.verifiers.typical import TypicalVerifier

import specdec
from specdec.data import data_file
from specdec.draft import Draft
from specdec.sampling import SamplingParams, process_logits, sample

K, PROMPTS, COINS = 4, 40, 20


def main() -> None:
    torch.set_num_threads(1)
    pair = specdec.load_default()
    target, draft, tokenizer = pair.target, pair.draft, pair.tokenizer
    with data_file("gsm8k").open(encoding="utf-8") as handle:  # GSM8K test, shipped with specdec
        questions = [json.loads(line)["question"] for line in handle][:PROMPTS]
    prompts = [tokenizer(q)["input_ids"][-48:] for q in questions]
    for setting in (SamplingParams(temperature=1.0), SamplingParams(temperature=0.7, top_p=0.9)):
        generator = torch.Generator().manual_seed(0)
        typical, rejection = [], []
        for prompt in prompts:
            context = torch.tensor([prompt])
            tokens, qs = [], []
            with torch.no_grad():
                for _ in range(K):
                    q = process_logits(draft(context).logits[:, -1], setting)
                    token = sample(q, generator)
                    tokens.append(token)
                    qs.append(q)
                    context = torch.cat([context, token[:, None]], dim=1)
                logits = target(context).logits[:, len(prompt) - 1 :]
            chain = Draft.chain(torch.stack(tokens, dim=1), q=torch.stack(qs, dim=1))
            typical.append(float(TypicalVerifier().verify(chain, logits, setting, generator).num_accepted))
            rejection.append(sum(float(RejectionVerifier().verify(chain, logits, setting, generator).num_accepted)
                                 for _ in range(COINS)) / COINS)
        print(f"T={setting.temperature} top_p={setting.top_p}, same drafts (chain K={K}, {len(prompts)} prompts): "
              f"accepted/step typical {sum(typical) / len(typical):.3f}, rejection {sum(rejection) / len(rejection):.3f}")
        for verifier in ("rejection", "typical"):
            out = specdec.generate(target, prompts[:16], tokenizer=tokenizer, drafter="draft_model",
                                   drafter_options={"model": draft, "k": K}, verifier=verifier,
                                   temperature=setting.temperature, top_p=setting.top_p, seed=0, max_new_tokens=48)
            print(f"  end to end {verifier}: tau {out.stats.mean_accepted:.3f}, "
                  f"acceptance rate {out.stats.acceptance_rate:.3f}")


if __name__ == "__main__":
    main()
