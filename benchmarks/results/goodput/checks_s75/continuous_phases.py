"""Stop 75: draft_model (or another drafter) under the controller in continuous batching of at most B rows over the
batching benchmark's 16 prompts (64 new tokens, exact verifier), three rounds on one cost model, each beside
continuous plain decoding: the CPU-time ratio, each call's phase times (perf_counter) and setup CPU time (prefill,
drafter setup and the prompts' `prepare` as rows join), and the controller's trace summed over drafted steps.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s75/continuous_phases.py 4 draft_model
"""

import sys
import time

import numpy as np
import torch
from specdec.benchmarks.batching import load_prompts

import specdec
import specdec.costs as costs

torch.set_num_threads(1)
B = int(sys.argv[1])
drafter = sys.argv[2]
pair = specdec.load_default()
target, tok = pair.target, pair.tokenizer
prompts = load_prompts(tok, target.config.max_position_embeddings, 16, 64, 384)
cm = costs.CostModel(costs.device_key("cpu"))
opts = {"model": pair.draft} if drafter == "draft_model" else {}
for r in range(3):
    t = time.process_time()
    out = specdec.generate(
        target,
        prompts,
        drafter=drafter,
        drafter_options=opts,
        max_new_tokens=64,
        eos_token_id=[],
        verifier="exact",
        cost_model=cm,
        max_batch_size=B,
        controller={"trace": True},
    )
    dt = time.process_time() - t
    t = time.process_time()
    plain = specdec.generate(
        target, prompts, drafter="none", max_new_tokens=64, eos_token_id=[], max_batch_size=B
    )
    dn = time.process_time() - t
    c = out.stats.controller
    for label, st in (("spec", out.stats), ("none", plain.stats)):
        print(
            f"   {label}: prefill {st.prefill_time:.3f} draft {st.draft_time:.3f} verify {st.verify_time:.3f} other {st.other_time:.3f} setup_cpu {st.setup_cpu_time:.3f} batch steps {st.batch_steps}"
        )
    tr = c["trace"]
    dsteps = [x for x in tr if sum(x["verified"])]
    print(
        r,
        f"speed/none {dn / dt:.3f} batch steps {out.stats.batch_steps} tau {out.stats.new_tokens / out.stats.steps:.2f}",
        {
            k: v
            for k, v in c.items()
            if k
            in ("probes", "plain_reasons", "mean_verified_nodes", "mean_expected_tokens", "drafter_row_steps")
        },
    )
    if dsteps:
        acc = sum(sum(x["accepted"]) for x in dsteps)
        ver = sum(sum(x["verified"]) for x in dsteps)
        exp = sum(sum(x["expected"]) for x in dsteps)
        print(
            "   drafted batch steps",
            len(dsteps),
            "verified",
            ver,
            "accepted",
            acc,
            "expected(sum)",
            round(exp, 1),
            "mean draft ms",
            round(np.mean([x.get("draft", 0) for x in dsteps]) * 1e3, 2),
            "verify ms",
            round(np.mean([x.get("verify", 0) for x in dsteps]) * 1e3, 2),
            "other ms",
            round(np.mean([x.get("other", 0) for x in dsteps]) * 1e3, 2),
            "| plain verify ms",
            round(
                np.mean([x.get("verify", 0) for x in tr if not sum(x["verified"]) and "verify" in x]) * 1e3, 2
            ),
            "other",
            round(
                np.mean([x.get("other", 0) for x in tr if not sum(x["verified"]) and "other" in x]) * 1e3, 2
            ),
        )
