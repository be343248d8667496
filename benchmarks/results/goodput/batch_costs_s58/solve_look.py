"""Static batches of B: each joint solve's rows (first probs, prepare, weight) and the kept counts, with the price."""
import sys

import torch
from specdec.benchmarks.batching import load_prompts

import specdec
from specdec import controller as C
from specdec.costs import CostModel, device_key
from specdec.target import context_length

torch.set_num_threads(1)
pair = specdec.load_default()
prompts = load_prompts(pair.tokenizer, context_length(pair.target), 16, 64, 384)
batch, groups = int(sys.argv[1]), int(sys.argv[2])
name = sys.argv[3] if len(sys.argv) > 3 else "draft_model"
options = {"model": pair.draft} if name == "draft_model" else {}
model = CostModel(device_key("cpu"))
orig = C.GoodputController._solve
log = []
def solve(self, rows, batch, draft_seconds, base=None, margin=0.0):
    out = orig(self, rows, batch, draft_seconds, base, margin)
    if draft_seconds is None and batch > 1:
        t = self.table
        ctx = C.mean_context(r.context for r in rows)
        line = t.draft_line(name, ctx)
        ver = t.verify_from(batch, batch, batch * 8, self.packed, ctx)
        log.append(f"kept={out} base={base and round(base,3)} " + " ".join(
            f"[{','.join(f'{p:.2f}' for p in r.probs[:4])} w={r.weight:.3f} prep={r.prepare:.0f} sunk={r.sunk}]" for r in rows)
            + f" draftline={[round(x*1000,2) for x in line[:3]]} ver(ms)@w1..4={[round(ver[batch*k-batch]*1000,2) for k in (1,2,3,4)]}")
    return out
C.GoodputController._solve = solve
def run(group, trace):
    return specdec.generate(pair.target, group, drafter=name, drafter_options=options, max_new_tokens=64,
                            verifier="exact", eos_token_id=[], cost_model=model, controller={"trace": trace})
run(prompts[:batch], False)
for start in range(0, groups * batch, batch):
    log.clear()
    out = run(prompts[start:start + batch], True)
    print("batch", start // batch, "steps", out.stats.batch_steps, "tau", round(out.stats.mean_accepted, 2))
    for line in log[:25]:
        print("  ", line)
