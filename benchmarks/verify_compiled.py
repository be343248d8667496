"""The cost of verifying k tokens against 1 (k = 1..16), eager against compiled (issue 20 point 7).

    python -m specdec.benchmarks.verify_compiled --out benchmarks/results/runtime/verify_compiled

For each model: a runner holding a context of random tokens verifies a chain of k inputs, again and again
on the same slots (nothing committed). `eager` is the runtime as `generate` runs it by default (on a CPU in
fp32 with the oneDNN view); `compiled` is `generate(..., compile=True)`: static shapes (k padded to a power
of two, the fixed cache capacity read whole) under torch.compile, timed after its compilation (reported
apart). Logits of both agree on the argmax at every position (checked). Process CPU time, one thread.
Models: the bundled default target and a random-weight model shaped like Qwen2.5-0.5B (24 layers, hidden
896, 14 query and 2 KV heads, a 151,936-token vocabulary).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from specdec.draft import tree_layout
from specdec.target import TargetRunner, static_width

from .machine import machine_info


def qwen_05b_shaped() -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                         rope_theta=1000000.0, tie_word_embeddings=True, attn_implementation="sdpa")
    return Qwen2ForCausalLM(config).eval()


def _chain(k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, 1000, (1, k), generator=torch.Generator().manual_seed(k))
    parents = torch.cat([torch.zeros(1, 1, dtype=torch.long), torch.arange(k - 1)[None]], dim=1)
    depths, visible = tree_layout(parents)
    return ids, depths, visible


def _time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.process_time()
        fn()
        times.append(time.process_time() - started)
    return statistics.median(times)


def measure(model: torch.nn.Module, context: int, widths: list[int], repeats: int) -> dict:
    capacity = context + static_width(max(widths)) + 2
    prompt = torch.randint(0, 1000, (1, context), generator=torch.Generator().manual_seed(0))
    rows = {}
    runners = {"eager": TargetRunner(model, 1, capacity), "compiled": TargetRunner(model, 1, capacity, compile=True)}
    with torch.inference_mode():
        for runner in runners.values():
            runner.prefill(prompt, [context])
        compile_seconds: dict[int, float] = {}
        for k in widths:
            ids, depths, visible = _chain(k)
            eager_logits = runners["eager"].verify_forward(ids, depths, visible, chain=True)
            bucket = static_width(k)
            started = time.perf_counter()
            compiled_logits = runners["compiled"].verify_forward(ids, depths, visible, chain=True)
            if bucket not in compile_seconds:
                compile_seconds[bucket] = time.perf_counter() - started
            same = bool(torch.equal(eager_logits.argmax(-1), compiled_logits.argmax(-1)))
            row = {"bucket": bucket, "argmax_equal": same}
            for name, runner in runners.items():
                row[name] = _time(lambda r=runner, a=(ids, depths, visible): r.verify_forward(*a, chain=True), repeats)
            rows[k] = row
            print(f"  k={k:2d} eager {row['eager'] * 1000:8.2f} ms  compiled {row['compiled'] * 1000:8.2f} ms"
                  f"  (width {bucket}, argmax equal: {same})", flush=True)
    for runner in runners.values():
        runner.release()
    return {"context": context, "rows": rows, "compile_seconds": compile_seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-width", type=int, default=16)
    parser.add_argument("--models", nargs="+", default=["default", "qwen2.5-0.5b-shaped"])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    widths = list(range(1, args.max_width + 1))
    results = {}
    for name in args.models:
        print(name, flush=True)
        # Compiled code is cached per Python function, across models (models of one family share their forward),
        # and torch stops compiling a function after 8 shapes and runs it eagerly: start each model afresh.
        torch._dynamo.reset()
        if name == "default":
            from specdec.zoo import load_default

            model = load_default().target
        else:
            model = qwen_05b_shaped()
        results[name] = measure(model, args.context, widths, args.repeats)
        del model
    result = {"command": "python -m specdec.benchmarks.verify_compiled " + " ".join(argv or sys.argv[1:]),
              "machine": machine_info(), "torch_threads": 1, "results": results}
    lines = [f"`{result['command']}`", "", f"Machine: {result['machine']['cpu']}, {result['machine']['cores']} cores, "
             f"torch {result['machine']['torch']}, 1 thread, process CPU time, context {args.context} tokens.", ""]
    for name, data in results.items():
        one = data["rows"][1]
        lines += [f"### {name}", "", "| k | eager ms | eager / k=1 | compiled ms (width) | compiled / k=1 "
                  "| compiled / eager | argmax equal |", "|---|---|---|---|---|---|---|"]
        for k, row in data["rows"].items():
            lines.append(f"| {k} | {row['eager'] * 1000:.2f} | {row['eager'] / one['eager']:.2f} | "
                         f"{row['compiled'] * 1000:.2f} ({row['bucket']}) | {row['compiled'] / one['compiled']:.2f} | "
                         f"{row['compiled'] / row['eager']:.2f} | {row['argmax_equal']} |")
        lines += ["", "Compilation, seconds per width: " + ", ".join(
            f"{bucket}: {seconds:.0f}" for bucket, seconds in data["compile_seconds"].items()), ""]
    table = "\n".join(lines)
    print(table)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "result.json").write_text(json.dumps(result, indent=2, default=str))
        (args.out / "table.md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
