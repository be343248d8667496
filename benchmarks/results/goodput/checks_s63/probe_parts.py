"""What a draft_model probe in a static batch of 4 is priced at: after three batches of the batching benchmark's
prompts, the cost table's draft line, one-token drafts, the draft model's prepare (its prefill of a row's prompt, and
its runner the first time in a call), the engine's overhead of a drafted and a plain step, and the verify curves
at batch 1 and 4 (ms, at a 50-token context).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s63/probe_parts.py
"""
import torch
from specdec.benchmarks.batching import load_prompts

import specdec
from specdec.costs import CostModel, device_key

torch.set_num_threads(1)
pair = specdec.load_default()
prompts = load_prompts(pair.tokenizer, pair.target.config.max_position_embeddings, 16, 64, 384)
model = CostModel(device_key("cpu"))
for start in (0, 4, 8):
    specdec.generate(pair.target, prompts[start:start + 4], drafter="draft_model", drafter_options={"model": pair.draft},
                     max_new_tokens=64, verifier="exact", eos_token_id=[], cost_model=model)
table, name = model.live, "draft_model"
print("draft line @ctx 50", [round(x * 1e3, 2) for x in table.draft_line(name, 50.0)])
print("draft(1,1,lag0) ms", round(table.draft(name, 1, 1, 0.0, 50.0) * 1e3, 2),
      "draft(1,4)", round(table.draft(name, 1, 4, 0.0, 50.0) * 1e3, 2))
for tokens in (11, 44, 93, 383):
    print("prepare", tokens, round(table.prepare(name, tokens) * 1e3, 2), "ms")
print("overhead drafted/plain ms", round(table.overhead(name, True) * 1e3, 2),
      round(table.overhead(name, False) * 1e3, 2))
for batch in (1, 4):
    print("verify B", batch, [round(table.verify(batch, batch + k, True, 50.0) * 1e3, 2) for k in range(9)])
