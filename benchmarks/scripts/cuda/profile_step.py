"""Where a decoding step's time goes on a GPU: the bundled pair in bf16, specdec's plain decoding (`none`) and
`ppd` against transformers' greedy `generate`, timed side by side, then one call of each under torch.profiler
(host-side runtime calls per generated token: kernel launches, synchronisations, copies).

    python benchmarks/scripts/cuda/profile_step.py [--dtype bfloat16] [--tokens 64] > profile.txt
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

import specdec
from specdec.zoo import load_default

RUNTIME_CALLS = ("cudaLaunchKernel", "cudaStreamSynchronize", "cudaMemcpyAsync", "cudaEventSynchronize",
                 "cudaDeviceSynchronize", "cudaEventRecord")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    pair = load_default(device=args.device, dtype=getattr(torch, args.dtype))
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else lambda: None
    target, tokenizer = pair.target, pair.tokenizer
    prompt = tokenizer("Write a short story about a robot who learns to paint.")["input_ids"]
    ids = torch.tensor([prompt], device=args.device)

    def hf() -> int:
        out = target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, min_new_tokens=args.tokens,
                              max_new_tokens=args.tokens)
        return out.shape[1] - ids.shape[1]

    def ours(drafter: str) -> int:
        out = specdec.generate(target, prompt, tokenizer=tokenizer, drafter=drafter, verifier="exact",
                               max_new_tokens=args.tokens)
        return len(out.sequences[0])

    runs = {"hf_generate": hf, "none": lambda: ours("none"), "ppd": lambda: ours("ppd"),
            "layer_skip": lambda: ours("layer_skip")}
    for fn in runs.values():
        fn(), fn()  # warm-up (cost curves, kernels)
    where = torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device
    print(f"{where}, {args.dtype}, {args.tokens} new tokens; ms per generated token, "
          "median of 5 alternating rounds")
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(5):
        for name, fn in runs.items():
            sync()
            started = time.perf_counter()
            count = fn()
            sync()
            times[name].append(1e3 * (time.perf_counter() - started) / max(1, count))
    for name, values in times.items():
        print(f"  {name:12s} {sorted(values)[2]:7.2f}")
    for name, fn in runs.items():
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            count = fn()
        events = {e.key: e for e in prof.key_averages()}
        calls = ", ".join(f"{c} {events[c].count / count:.1f}" for c in RUNTIME_CALLS if c in events)
        gpu = sum(e.self_device_time_total for e in prof.key_averages()) / 1e3 / count
        print(f"\n## {name}: per token: {calls}; GPU busy {gpu:.2f} ms")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18, max_name_column_width=60))


if __name__ == "__main__":
    main()
