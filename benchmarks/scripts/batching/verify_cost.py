"""Where a verification forward's time goes on this CPU (1 thread, CPU time, not wall time).

    .venv/bin/python benchmarks/scripts/batching/verify_cost.py > benchmarks/results/batching/verify_cost.txt

1. TargetRunner.verify_forward on the default target for B in {1, 8}, T in {1, 3, 6} new tokens per
   row (a chain, 300 cached tokens per row), and the split of a B=1 forward between the model's
   linear layers, SDPA and everything else (cProfile with a CPU-time clock).
2. The model's GEMM shapes alone: F.linear (what transformers runs) against a matmul with a
   pre-transposed contiguous weight, for M = 1, 3, 8, 24 rows.
3. One layer's attention for a batch whose rows' cache lengths differ (Spec-Bench-like prompt
   lengths): one dense SDPA with a mask against one SDPA per row over its own slots.
"""

from __future__ import annotations

import cProfile
import pstats
import time

import torch
import torch.nn.functional as F

import specdec
from specdec.target import TargetRunner


def cpu_us(fn, repeats: int = 40) -> float:
    """Median-of-3 CPU microseconds per call."""
    for _ in range(3):
        fn()
    results = []
    for _ in range(3):
        start = time.process_time()
        for _ in range(repeats):
            fn()
        results.append((time.process_time() - start) / repeats * 1e6)
    return sorted(results)[1]


def main() -> None:
    torch.set_num_threads(1)
    pair = specdec.load_default()
    model = pair.target.eval()
    print("## 1. verify_forward, CPU ms per forward (300 cached tokens per row)")
    for batch in (1, 8):
        runner = TargetRunner(model, batch, 600)
        runner.prefill(torch.randint(1, 8000, (batch, 300)), torch.full((batch,), 300))
        for steps in (1, 3, 6):
            ids = torch.randint(1, 8000, (batch, steps))
            depths = torch.arange(steps)[None].expand(batch, steps)
            visible = torch.ones(steps, steps, dtype=torch.bool).tril()[None].expand(batch, steps, steps)
            with torch.inference_mode():
                ms = cpu_us(lambda r=runner, i=ids, d=depths, v=visible: r.verify_forward(i, d, v), repeats=20) / 1000
            print(f"B={batch} T={steps}: {ms:.2f} ms")
            if batch == 1 and steps in (1, 3):
                profiler = cProfile.Profile(time.process_time)
                with torch.inference_mode():
                    profiler.enable()
                    for _ in range(20):
                        runner.verify_forward(ids, depths, visible)
                    profiler.disable()
                stats = pstats.Stats(profiler).stats
                total = sum(entry[2] for entry in stats.values())  # tottime summed = profiled CPU time
                linear = sum(entry[2] for key, entry in stats.items() if key[2] == "<built-in method torch._C._nn.linear>")
                sdpa = sum(entry[2] for key, entry in stats.items()
                           if key[2] == "<built-in method torch._C._nn.scaled_dot_product_attention>")
                print(f"    profiled split per forward: linear {linear / 20 * 1e3:.2f} ms, SDPA {sdpa / 20 * 1e3:.2f} ms, "
                      f"rest (Python, norms, RoPE, mask, cache) {(total - linear - sdpa) / 20 * 1e3:.2f} ms")
        runner.release()

    print("\n## 2. GEMMs of the target, CPU us per call: F.linear vs pre-transposed weight")
    shapes = {"q/k/v/o 384x384": (384, 384), "gate/up 1024x384": (1024, 384), "down 384x1024": (384, 1024),
              "LM head 8192x384": (8192, 384)}
    for name, (out_features, in_features) in shapes.items():
        weight = torch.randn(out_features, in_features)
        transposed = weight.t().contiguous()
        cells = []
        for rows in (1, 3, 8, 24):
            x = torch.randn(rows, in_features)
            linear = cpu_us(lambda x=x, w=weight: F.linear(x, w))
            cells.append(f"M={rows}: {linear:.0f} / {cpu_us(lambda x=x, w=transposed: x @ w):.0f}")
        print(f"{name}: " + ", ".join(cells))

    print("\n## 3. one layer's attention, 4 queries per row, CPU us: dense SDPA vs one SDPA per row")
    lengths = [37, 45, 45, 46, 79, 94, 384, 384, 60, 120, 200, 50, 70, 300, 90, 40]
    heads, dim, steps = 6, 64, 4
    for batch in (2, 4, 8, 16):
        kv = torch.tensor(lengths[:batch]) + 32 + steps
        width = int(kv.max())
        q = torch.randn(batch, heads, steps, dim)
        keys, values = torch.randn(batch, heads, width, dim), torch.randn(batch, heads, width, dim)
        allowed = torch.arange(width)[None, None, :] <= (kv[:, None] - steps + torch.arange(steps)[None, :])[:, :, None]
        mask = torch.zeros(batch, 1, steps, width).masked_fill(~allowed[:, None], torch.finfo(torch.float32).min)
        masks = [mask[b : b + 1, :, :, : int(kv[b])] for b in range(batch)]

        def per_row(q=q, keys=keys, values=values, kv=kv, masks=masks, batch=batch) -> torch.Tensor:
            return torch.cat([F.scaled_dot_product_attention(q[b : b + 1], keys[b : b + 1, :, : int(kv[b])],
                                                             values[b : b + 1, :, : int(kv[b])], attn_mask=masks[b])
                              for b in range(batch)])

        dense = cpu_us(lambda q=q, k=keys, v=values, m=mask: F.scaled_dot_product_attention(q, k, v, attn_mask=m))
        print(f"B={batch} (masked-out slots per row {int(batch * width - kv.sum()) / batch:.0f}): "
              f"dense {dense:.0f}, per row {cpu_us(per_row):.0f}")


if __name__ == "__main__":
    main()
