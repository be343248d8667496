"""Engine overhead: specdec with drafter `none` against transformers' greedy `generate`, side by side.

    python -m specdec.benchmarks.engine_overhead --out benchmarks/results/engine_overhead

Random-init 8-layer Llama of about 20M parameters, 128 new tokens, interleaved repeats so both
sides see the same machine load; reports the median time of each and their ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import specdec

from .machine import machine_info


def build_model(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=8192, hidden_size=384, intermediate_size=1024, num_hidden_layers=8,
                         num_attention_heads=6, num_key_value_heads=6, max_position_embeddings=1024,
                         tie_word_embeddings=True)
    model = LlamaForCausalLM(config).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (1 gives steadier numbers when other jobs share the CPU)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    model = build_model()
    params = sum(p.numel() for p in model.parameters())
    prompt = torch.randint(0, 8192, (1, args.prompt_tokens), generator=torch.Generator().manual_seed(1))

    def run_hf() -> list[int]:
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                             max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens)
        return out[0, args.prompt_tokens:].tolist()

    def run_specdec() -> list[int]:
        return specdec.generate(model, prompt, drafter="none", verifier="exact",
                                max_new_tokens=args.new_tokens).sequences[0]

    assert run_hf() == run_specdec(), "specdec `none` differs from transformers greedy"  # also warms up
    times: dict[str, list[float]] = {"transformers_generate": [], "specdec_none": []}
    for _ in range(args.repeats):
        for name, fn in (("transformers_generate", run_hf), ("specdec_none", run_specdec)):
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(values) for name, values in times.items()}
    result = {
        "command": "python -m specdec.benchmarks.engine_overhead " + " ".join(argv or sys.argv[1:]),
        "machine": machine_info(),
        "model": {"architecture": "LlamaForCausalLM (random init)", "parameters": params, "layers": 8},
        "new_tokens": args.new_tokens,
        "prompt_tokens": args.prompt_tokens,
        "seconds": times,
        "median_seconds": medians,
        "tokens_per_second": {name: args.new_tokens / value for name, value in medians.items()},
        "specdec_speed_ratio": medians["transformers_generate"] / medians["specdec_none"],
    }
    print(json.dumps({k: result[k] for k in ("median_seconds", "tokens_per_second", "specdec_speed_ratio")},
                     indent=2))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "result.json").write_text(json.dumps(result, indent=2))
        (args.out / "README.md").write_text(
            f"# Engine overhead\n\n`{result['command']}`\n\n"
            f"Machine: {result['machine']['cpu']}, {result['machine']['cores']} cores, torch {result['machine']['torch']}, "
            f"transformers {result['machine']['transformers']}, load average {result['machine'].get('load_average_1min')}"
            f" (other jobs shared the CPU when this is above the core count).\n\n"
            f"| | median s for {args.new_tokens} tokens | tok/s |\n|---|---|---|\n"
            + "".join(f"| {name} | {medians[name]:.3f} | {args.new_tokens / medians[name]:.1f} |\n" for name in medians)
            + f"\nspecdec `none` speed relative to transformers `generate`: **{result['specdec_speed_ratio']:.3f}x** "
              f"(> 1 means specdec is faster).\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
