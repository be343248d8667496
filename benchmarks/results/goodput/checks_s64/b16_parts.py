"""anpd static batch of B: per step the engine's phase times (draft, verify, other) for resting (no row looking) and
looking steps, against none's steps; CPU seconds of the call."""
import sys, time, statistics as S
import torch
import specdec
from specdec.benchmarks.batching import load_prompts
from specdec.costs import CostModel, device_key
from specdec.target import context_length, model_device
torch.set_num_threads(1)
pair = specdec.load_default()
prompts = load_prompts(pair.tokenizer, context_length(pair.target), 16, 64, 384)
B = int(sys.argv[1])
costs = {c: CostModel(device_key(model_device(pair.target))) for c in ("none", "anpd")}
for rep in range(4):
    for cell in ("none", "anpd"):
        t = time.process_time()
        out = specdec.generate(pair.target, prompts[:B], drafter=cell, max_new_tokens=64, verifier="exact", eos_token_id=[],
                               cost_model=costs[cell], controller={"trace": True} if cell == "anpd" else True)
        t = time.process_time() - t
        st = out.stats
        if cell == "none":
            print(f"rep {rep} none cpu {t:.3f} draft {st.draft_time:.3f} verify {st.verify_time:.3f} other {st.other_time:.3f} per step other {st.other_time/st.batch_steps*1000:.2f}ms verify {st.verify_time/st.batch_steps*1000:.2f}ms")
            continue
        tr = st.controller["trace"]
        rest = [x for x in tr if not any(c is not None for c in x["choice"])]
        look = [x for x in tr if any(c is not None for c in x["choice"])]
        def m(xs, k): return 1000 * S.mean([x.get(k, 0.0) for x in xs]) if xs else float("nan")
        print(f"rep {rep} anpd cpu {t:.3f} draft {st.draft_time:.3f} verify {st.verify_time:.3f} other {st.other_time:.3f} | rest {len(rest)} steps: d {m(rest,'draft'):.2f} v {m(rest,'verify'):.2f} o {m(rest,'other'):.2f} ms | look {len(look)}: d {m(look,'draft'):.2f} v {m(look,'verify'):.2f} o {m(look,'other'):.2f} ms, verified {sum(sum(x['verified']) for x in look)}")
