"""Static batch B, draft_model never drafting: the controller's process time per batch step, BATCH_QUIET_MAX 16 vs 4,
interleaved rounds (each setting its own cost model)."""
import sys, time, torch, collections
import specdec
from specdec import controller as C
from specdec.benchmarks.batching import load_prompts
from specdec.costs import CostModel, device_key
from specdec.target import context_length
torch.set_num_threads(1)
pair = specdec.load_default()
B = int(sys.argv[1]); rounds = int(sys.argv[2]); drafter = sys.argv[3] if len(sys.argv) > 3 else "draft_model"
prompts = load_prompts(pair.tokenizer, context_length(pair.target), 16, 64, 384)[:B]
spent = collections.defaultdict(float)
cur = [None]
def timed(name):
    f = getattr(C.GoodputController, name)
    def w(*a, **k):
        t = time.process_time(); r = f(*a, **k); spent[cur[0]] += time.process_time() - t; return r
    setattr(C.GoodputController, name, w)
for n in ("plan", "cut", "observe"):
    timed(n)
opts = {"model": pair.draft} if drafter == "draft_model" else {}
models = {m: CostModel(device_key("cpu")) for m in (16, 4)}
steps = collections.Counter(); total = collections.Counter(); priced = collections.Counter()
for r in range(rounds + 1):
    for m in ((16, 4) if r % 2 else (4, 16)):
        C.BATCH_QUIET_MAX = m; cur[0] = m if r else None
        t0 = time.process_time()
        out = specdec.generate(pair.target, prompts, drafter=drafter, drafter_options=opts, max_new_tokens=64, verifier="exact", eos_token_id=[], cost_model=models[m])
        if r:
            total[m] += time.process_time() - t0; steps[m] += out.stats.batch_steps
            priced[m] += sum(v for k, v in out.stats.controller["plain_reasons"].items() if k.startswith("batch")) / B; print(m, out.stats.controller["plain_reasons"], out.stats.controller["probes"])
for m in (4, 16):
    print(f"BATCH_QUIET_MAX={m}: controller {1e6 * spent[m] / steps[m]:.0f} us a step, step {1e6 * total[m] / steps[m]:.0f} us, "
          f"drafted row-steps? tau {1}, batch-plain row-steps/row {priced[m] / rounds:.0f}")
