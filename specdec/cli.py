"""The `specdec` command line. `list` and `generate` live here; the other subcommands are the offline
tools (specdec.tools) and the benchmark (specdec.benchmarks), imported only when used (see SUBCOMMANDS)."""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> ("module:function", one-line help). Each function takes argv (list[str]) and returns an exit code.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "bench": ("specdec.benchmarks.cli:main", "run a benchmark sweep (Spec-Bench format) with reports and plots"),
    "search-layers": ("specdec.tools.layer_search:main", "Bayesian search of a layer-skip set"),
    "profile": ("specdec.tools.ppd.profile:main", "measure forward latency vs tree size (PPD sizing)"),
    "train-ppd": ("specdec.tools.ppd.train:main", "train PPD prompt-token embeddings for a model"),
    "rank-tokens": ("specdec.tools.rank_tokens:main", "rank a draft model's tokens for a reduced draft vocabulary"),
    "train-default": ("specdec.tools.zoo.train:main", "train the bundled default model pair (recipe)"),
    "evaluate-default": ("specdec.tools.zoo.evaluate:main", "evaluate the bundled default model pair"),
}


def _cmd_list(args: argparse.Namespace) -> int:
    from .registry import list_plugins

    infos = list_plugins()
    for kind in ("drafter", "verifier"):
        print(f"{kind}s:")
        for info in (i for i in infos if i.kind == kind):
            if info.error:
                print(f"  {info.name:<14} [{info.origin}] FAILED TO LOAD: {info.error}")
            else:
                print(f"  {info.name:<14} [{info.origin}] {info.description}")
    return 0


def _parse_options(pairs: list[str]) -> dict:
    """KEY=VALUE pairs; values are parsed as JSON when they can be (numbers, lists, true/false)."""
    import json

    options = {}
    for pair in pairs:
        if "=" not in pair:
            raise SystemExit(f"option {pair!r} must look like KEY=VALUE")
        key, value = pair.split("=", 1)
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options


def _cmd_generate(args: argparse.Namespace) -> int:
    from .api import generate

    streamer = None
    tokenizer = None
    if args.stream:
        from transformers import TextStreamer

        from .api import load_model

        model, tokenizer = load_model(args.model, device=args.device, dtype=args.dtype)
        if tokenizer is None:
            raise SystemExit("--stream needs a tokenizer beside the model")
        streamer = TextStreamer(tokenizer, skip_prompt=True)
    else:
        model = args.model
    out = generate(
        model, args.prompt, tokenizer=tokenizer, drafter=args.drafter, verifier=args.verifier,
        drafter_options=_parse_options(args.drafter_option), verifier_options=_parse_options(args.verifier_option),
        max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
        seed=args.seed, streamer=streamer, **({} if args.stream else {"device": args.device, "dtype": args.dtype}),
    )
    if streamer is None:
        print(args.prompt + out.text[0] if out.text else out.sequences[0])
    lossless = "lossless" if out.verifier_lossless else "lossy"
    print(f"[{out.drafter} + {out.verifier} ({lossless})] {out.stats.summary()}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec", description="Speculative decoding for transformers models.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list drafters and verifiers, with origin and load errors").set_defaults(
        func=_cmd_list)
    gen = sub.add_parser("generate", help="generate text with speculative decoding")
    gen.add_argument("--model", required=True, help='local model directory, or "default" for the bundled model')
    gen.add_argument("--prompt", required=True)
    gen.add_argument("--drafter", default="anpd")
    gen.add_argument("--verifier", default="auto")
    gen.add_argument("--drafter-option", action="append", default=[], metavar="KEY=VALUE")
    gen.add_argument("--verifier-option", action="append", default=[], metavar="KEY=VALUE")
    gen.add_argument("--max-new-tokens", type=int, default=128)
    gen.add_argument("--temperature", type=float, default=0.0)
    gen.add_argument("--top-k", type=int, default=None)
    gen.add_argument("--top-p", type=float, default=None)
    gen.add_argument("--seed", type=int, default=None)
    gen.add_argument("--device", default=None, help='where to load the model, e.g. "cuda" (default: the CPU)')
    gen.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"],
                     help="precision to load the model in (default: the checkpoint's; the bundled pair's is float32)")
    gen.add_argument("--stream", action="store_true", help="print tokens as they are committed")
    gen.set_defaults(func=_cmd_generate)
    for name, (_, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        target, _ = SUBCOMMANDS[argv[0]]
        module_name, function = target.split(":")
        return int(getattr(importlib.import_module(module_name), function)(argv[1:]) or 0)
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except Exception as error:  # the CLI prints the clear message our errors carry, not a traceback
        from .errors import SpecDecError

        if isinstance(error, (SpecDecError, ValueError, FileNotFoundError, TypeError)):
            print(f"specdec: error: {error}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    raise SystemExit(main())
