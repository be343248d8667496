"""Stop 73: anpd in static unpadded batches of B on the batching benchmark's 16 prompts (64 new tokens, exact
verifier), interleaved with plain batched decoding for N rounds after 2 warm-up rounds (one cost model for anpd,
kept across rounds): anpd's CPU time over plain decoding's per round; then, from the last round's trace, each step's
observed verify time against the cost table's prediction (at the call's end, context not read), by extra inputs.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s73/b8_trace.py 8 4
"""
import collections
import statistics
import sys
import time

import torch
from specdec.benchmarks.batching import load_prompts

import specdec
from specdec.costs import CostModel, device_key

torch.set_num_threads(1)
batch, rounds = int(sys.argv[1]), int(sys.argv[2])
pair = specdec.load_default()
target, tokenizer = pair.target, pair.tokenizer
prompts = load_prompts(tokenizer, target.config.max_position_embeddings, 16, 64, 384)
batches = [prompts[i:i + batch] for i in range(0, len(prompts), batch)]
costs = CostModel(device_key("cpu"))


def run(drafter: str, trace: bool = False) -> tuple[float, list[specdec.GenerationOutput]]:
    started, outputs = time.process_time(), []
    for rows in batches:
        kwargs = dict(max_new_tokens=64, eos_token_id=[], verifier="exact")
        if drafter == "anpd":
            kwargs.update(batch_mode="unpadded", cost_model=costs, controller={"trace": trace})
        outputs.append(specdec.generate(target, rows, drafter=drafter, **kwargs))
    return time.process_time() - started, outputs


for drafter in ("none", "anpd", "none", "anpd"):
    run(drafter)
ratios = []
for index in range(rounds):
    plain_seconds, _ = run("none")
    anpd_seconds, outputs = run("anpd", trace=index == rounds - 1)
    ratios.append(plain_seconds / anpd_seconds)
print("anpd over AR per round", [round(r, 3) for r in ratios], "mean", round(statistics.mean(ratios), 3))
table = costs.table()
by_extra: dict[int, list[tuple]] = collections.defaultdict(list)
steps = drafted = 0
for output in outputs:
    for step in output.stats.controller["trace"]:
        steps += 1
        if step.get("verify") is None:
            continue
        rows = len(step["rows"])
        extra = step["inputs"] - rows
        drafted += extra > 0
        by_extra[min(extra, 24) // 4 * 4].append((step["verify"], table.verify(rows, step["inputs"], True),
                                                  sum(step["accepted"]), rows))
print("steps", steps, "drafted", drafted)
for extra, items in sorted(by_extra.items()):
    print(f"extra {extra:3d}+ n {len(items):4d} observed {statistics.mean(i[0] for i in items) * 1e3:7.2f} ms "
          f"predicted {statistics.mean(i[1] for i in items) * 1e3:7.2f} ms accepted/step "
          f"{statistics.mean(i[2] for i in items):5.2f} rows {statistics.mean(i[3] for i in items):.1f}")
control = outputs[-1].stats.controller
print(control.get("plain_reasons"))
print({key: control[key] for key in ("no_draft_share", "probes", "mean_verified_nodes", "mean_expected_tokens")})
