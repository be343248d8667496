"""Stop 59 check, `python after_dm.py [draft_model|none|anpd]` from the repository root: does running draft_model slow the target's later plain decoding in the same process? none before / after."""
import sys
import time

import torch
from specdec.benchmarks.datasets import PromptBuilder, load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

import specdec
from specdec.costs import CostModel, device_key
from specdec.target import context_length

torch.set_num_threads(1)
tgt = AutoModelForCausalLM.from_pretrained("/work/second/target", dtype=torch.float32).eval()
draft = AutoModelForCausalLM.from_pretrained("/work/second/draft128/final", dtype=torch.float32).eval()
tok = AutoTokenizer.from_pretrained("/work/second/target")
builder = PromptBuilder(tok, context_length(tgt), 64)
calls = [builder.encode([], s.turns[0])[0] for s in load_dataset("spec_bench", per_category=2)]
middle = sys.argv[1] if len(sys.argv) > 1 else "draft_model"
def rnd(name, cm):
    t0 = time.process_time()
    for ids in calls:
        specdec.generate(tgt, ids, max_new_tokens=64, cost_model=cm, drafter=name,
                         drafter_options={"model": draft} if name == "draft_model" else {})
    return time.process_time() - t0
cm_none, cm_mid = CostModel(device_key("cpu")), CostModel(device_key("cpu"))
rnd("none", cm_none)
before = [rnd("none", cm_none) for _ in range(3)]
mid = [rnd(middle, cm_mid) for _ in range(2)]
after = [rnd("none", cm_none) for _ in range(3)]
print(f"middle={middle}: none before {[round(b, 3) for b in before]} | {middle} {[round(m, 3) for m in mid]} | none after {[round(a, 3) for a in after]}")
