"""anpd in a static batch of B of the batching benchmark's prompts (64 new tokens), side by side with `none`, four
repeats, a fresh cost model each (so anpd's first call measures its costs): per call the process CPU seconds and the
engine's phase seconds, and for anpd the mean phase milliseconds of resting steps (no row looks) and looking steps.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s64/b16_parts.py 16
"""
import statistics
import sys
import time

import torch
from specdec.benchmarks.batching import load_prompts

import specdec
from specdec.costs import CostModel, device_key
from specdec.target import context_length, model_device

torch.set_num_threads(1)
pair = specdec.load_default()
prompts = load_prompts(pair.tokenizer, context_length(pair.target), 16, 64, 384)
batch = int(sys.argv[1])
costs = {cell: CostModel(device_key(model_device(pair.target))) for cell in ("none", "anpd")}


def mean_ms(steps: list[dict], key: str) -> float:
    return 1000 * statistics.mean(step.get(key, 0.0) for step in steps) if steps else float("nan")


for repeat in range(4):
    for cell in ("none", "anpd"):
        started = time.process_time()
        out = specdec.generate(pair.target, prompts[:batch], drafter=cell, max_new_tokens=64, verifier="exact",
                               eos_token_id=[], cost_model=costs[cell],
                               controller={"trace": True} if cell == "anpd" else True)
        seconds = time.process_time() - started
        stats = out.stats
        if cell == "none":
            print(f"rep {repeat} none cpu {seconds:.3f} draft {stats.draft_time:.3f} verify {stats.verify_time:.3f} "
                  f"other {stats.other_time:.3f} per step other {stats.other_time / stats.batch_steps * 1000:.2f}ms "
                  f"verify {stats.verify_time / stats.batch_steps * 1000:.2f}ms")
            continue
        trace = stats.controller["trace"]
        rest = [step for step in trace if all(choice is None for choice in step["choice"])]
        look = [step for step in trace if any(choice is not None for choice in step["choice"])]
        print(f"rep {repeat} anpd cpu {seconds:.3f} draft {stats.draft_time:.3f} verify {stats.verify_time:.3f} "
              f"other {stats.other_time:.3f} | rest {len(rest)} steps: d {mean_ms(rest, 'draft'):.2f} "
              f"v {mean_ms(rest, 'verify'):.2f} o {mean_ms(rest, 'other'):.2f} ms | look {len(look)}: "
              f"d {mean_ms(look, 'draft'):.2f} v {mean_ms(look, 'verify'):.2f} o {mean_ms(look, 'other'):.2f} ms, "
              f"verified {sum(sum(step['verified']) for step in look)}")
