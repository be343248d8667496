"""Probe specdec on every tiny model family of tests/families.py and print a table.

For each family: build it (and its 1-layer draft), check the built config against the Family record, probe
how the model takes masks (a dict {layer type: 4-D mask}; a single 4-D float mask), run transformers'
greedy `generate` on a 20-token random prompt for 24 new tokens, and compare with specdec's greedy output:
- "specdec none": `specdec.generate(model, [prompt], drafter="none")`. One row decoding one token at a time
  lets the model build its own masks (TargetRunner._is_plain_chain) unless config.sliding_window is set;
- "none B=2": the same prompt with a second one (17 tokens) in one call, so specdec builds the 4-D masks
  itself (each row is compared with its own transformers run);
- "draft_model": drafter="draft_model" with the family's 1-layer draft (k=3 chains: 4-token verifications).
Columns: dict = the base forward uses a dict {layer type: 4-D mask}; 4d as-is = a single 4-D float mask is
used as given (an all-visible one changes the output); causal4d=ref = one plain causal 4-D mask gives the
model's own output (no: the model has windowed/chunked layers that then lose their window); record = the
built config agrees with the Family record in tests/families.py.

    .venv/bin/python scripts/families_probe.py [--no-draft] [family ...]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from families import FAMILIES, Family, observed, random_prompt  # noqa: E402

import specdec  # noqa: E402

PROMPT_LENGTH = 20
NEW_TOKENS = 24
MASK_LENGTH = 24  # longer than every window / chunk (16)

# Extra rows: (row name, family, attn implementation other than the family's own).
VARIANTS = [("gemma2_sdpa", "gemma2", "sdpa"), ("gpt_oss_sdpa", "gpt_oss", "sdpa"),
            ("llama_fa2", "llama", "flash_attention_2")]


def short_error(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:200]}"


def visibility(kind: str, length: int, window: int | None, chunk: int | None) -> torch.Tensor:
    q = torch.arange(length)[:, None]
    k = torch.arange(length)[None, :]
    visible = k <= q
    if kind == "sliding_attention" and window:
        visible &= q - k < window  # masking_utils.sliding_window_overlay: kv > q - window
    if kind == "chunked_attention" and chunk:
        visible &= q // chunk == k // chunk
    return visible


def float_mask(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    zero = torch.zeros((), dtype=dtype)
    return torch.where(visible, zero, torch.finfo(dtype).min)[None, None]


@torch.no_grad()
def mask_probes(model, family: Family) -> dict[str, str]:
    """Measure what the model does with a dict of masks and with one 4-D float mask."""
    dtype = model.dtype
    ids = torch.tensor([random_prompt(MASK_LENGTH, family.vocab_size, seed=7)])
    reference = model(input_ids=ids, use_cache=False).logits

    def run(mask):
        return model(input_ids=ids, attention_mask=mask, use_cache=False).logits

    def same(logits):
        return bool(torch.allclose(logits, reference, atol=1e-5, rtol=1e-4))

    config = model.config
    window = getattr(config, "sliding_window", None)
    chunk = getattr(config, "attention_chunk_size", None)
    kinds = sorted(set(getattr(config, "layer_types", None) or ["full_attention"]))
    everything = float_mask(torch.ones(MASK_LENGTH, MASK_LENGTH, dtype=torch.bool), dtype)
    result = {}
    # A single 4-D float mask: all-visible must change the output if the mask is used as given.
    try:
        result["mask_4d_as_is"] = "yes" if not same(run(everything)) else "no (rebuilt)"
        causal = float_mask(visibility("full_attention", MASK_LENGTH, None, None), dtype)
        result["causal_4d_equals_ref"] = "yes" if same(run(causal)) else "no"
    except Exception as error:  # report, do not stop the probe
        result["mask_4d_as_is"] = f"error {short_error(error)[:60]}"
        result["causal_4d_equals_ref"] = "-"
    # A dict {layer type: mask}: the right masks must reproduce the output, all-visible ones must change it.
    try:
        right = {kind: float_mask(visibility(kind, MASK_LENGTH, window, chunk), dtype) for kind in kinds}
        wrong = dict.fromkeys(kinds, everything)
        used = same(run(right)) and not same(run(wrong))
        result["dict_mask"] = "yes" if used else "no (ignored or wrong)"
    except Exception as error:
        result["dict_mask"] = f"no ({type(error).__name__})"
    return result


@torch.no_grad()
def probe(row: str, family: Family, attn: str | None, with_draft: bool) -> dict[str, str]:
    out: dict[str, str] = {"family": row, "class": family.model_class}
    start = time.perf_counter()
    try:
        model = family.build(attn_implementation=attn)
        draft = family.build_draft()
    except Exception as error:
        out["build"] = short_error(error)
        return out
    seen = observed(model)
    out["attn"] = seen["attn_implementation"]
    out["layer_types"] = abbreviate(seen["layer_types"])
    window, chunk = seen["sliding_window"], seen["attention_chunk_size"]
    out["window/chunk"] = f"w={window}" if chunk is None else f"w={window} c={chunk}"
    caps = (seen["attn_logit_softcapping"], seen["final_logit_softcapping"])
    out["softcap"] = "-" if caps == (None, None) else f"{caps[0]}/{caps[1]}"
    out["sinks"] = "yes" if seen["attention_sinks"] else "-"
    recorded = {"layer_types": family.layer_types, "sliding_window": family.sliding_window,
                "attention_chunk_size": family.attention_chunk_size,
                "attn_logit_softcapping": family.attn_logit_softcapping,
                "final_logit_softcapping": family.final_logit_softcapping,
                "attention_sinks": family.attention_sinks}
    drift = [key for key, value in recorded.items() if seen[key] != value]
    out["record"] = "ok" if not drift else "DIFFERS: " + ",".join(drift)

    if attn in (None, family.attn_implementation):
        probes = mask_probes(model, family)
        out["dict"] = probes["dict_mask"]
        if (probes["dict_mask"] == "yes") != family.dict_mask:
            out["record"] += " dict-record-wrong"
        out["4d as-is"] = probes["mask_4d_as_is"]
        out["causal4d=ref"] = probes["causal_4d_equals_ref"]
    else:
        out["dict"] = out["4d as-is"] = out["causal4d=ref"] = "(skip)"

    prompts = [random_prompt(PROMPT_LENGTH, family.vocab_size, seed=0),
               random_prompt(PROMPT_LENGTH - 3, family.vocab_size, seed=1)]
    try:
        expected = [hf_greedy(model, prompt) for prompt in prompts]
        out["generate"] = "ok" if all(len(row) == NEW_TOKENS for row in expected) else "short"
    except Exception as error:
        out["generate"] = short_error(error)
        expected = None
    out["specdec none"] = compare(model, prompts[:1], expected, drafter="none")
    out["none B=2"] = compare(model, prompts, expected, drafter="none")
    if with_draft:
        out["draft_model"] = compare(model, prompts[:1], expected, drafter="draft_model",
                                     drafter_options={"model": draft, "k": 3, "schedule": "constant"})
    out["s"] = f"{time.perf_counter() - start:.1f}"
    return out


def hf_greedy(model, prompt: list[int]) -> list[int]:
    ids = torch.tensor([prompt])
    generated = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                               max_new_tokens=NEW_TOKENS, min_new_tokens=0)
    return generated[0, len(prompt):].tolist()


def compare(model, prompts: list[list[int]], expected: list[list[int]] | None, **kwargs) -> str:
    """specdec's greedy tokens against transformers' (`expected`, one list per prompt, run alone)."""
    _forget_support_checks()
    try:
        got = specdec.generate(model, prompts, max_new_tokens=NEW_TOKENS, **kwargs).sequences
    except Exception as error:
        return short_error(error)
    if expected is None:
        return "ran (no reference)"
    problems = []
    for row, (mine, theirs) in enumerate(zip(got, expected)):
        if mine == theirs:
            continue
        first = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
        where = f"row {row} " if len(prompts) > 1 else ""
        problems.append(f"MISMATCH {where}at {first} (got {mine[first:first + 3]} want "
                        f"{theirs[first:first + 3]}, len {len(mine)})")
    return "; ".join(problems) or "match"


def _forget_support_checks() -> None:
    """specdec caches its tree-attention check per (class name, attention implementation); two families
    sharing a class (llama / llama3_128k, qwen2 / qwen2_windows) would otherwise share one verdict."""
    support = sys.modules.get("specdec.model_support")
    checked = getattr(support, "_checked", None)
    if isinstance(checked, dict):
        checked.clear()


def abbreviate(layer_types: tuple[str, ...] | None) -> str:
    if layer_types is None:
        return "(none)"
    short = {"full_attention": "F", "sliding_attention": "S", "chunked_attention": "C"}
    return ",".join(short.get(kind, kind) for kind in layer_types)


CELL = 34  # longer cells are cut in the table and printed in full below it


def print_table(rows: list[dict[str, str]]) -> None:
    columns = ["family", "class", "attn", "layer_types", "window/chunk", "softcap", "sinks", "dict",
               "4d as-is", "causal4d=ref", "record", "generate", "specdec none", "none B=2", "draft_model",
               "build", "s"]
    columns = [c for c in columns if any(c in row for row in rows)]

    def cell(row, column):
        text = row.get(column, "")
        return text if len(text) <= CELL else text[: CELL - 3] + "..."

    widths = {c: max(len(c), *(len(cell(row, c)) for row in rows)) for c in columns}
    print("| " + " | ".join(c.ljust(widths[c]) for c in columns) + " |")
    print("|-" + "-|-".join("-" * widths[c] for c in columns) + "-|")
    for row in rows:
        print("| " + " | ".join(cell(row, c).ljust(widths[c]) for c in columns) + " |")
    long = [(row["family"], c, row[c]) for row in rows for c in columns if len(row.get(c, "")) > CELL]
    if long:
        print("\nin full:")
        for family, column, text in long:
            print(f"  {family} / {column}: {text}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="families (and variants) to probe; default all")
    parser.add_argument("--no-draft", action="store_true", help="skip the draft_model run")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    import transformers

    transformers.logging.set_verbosity_error()
    plan = [(name, family, None) for name, family in FAMILIES.items()]
    plan += [(row, FAMILIES[base], attn) for row, base, attn in VARIANTS]
    if args.names:
        unknown = set(args.names) - {row for row, _, _ in plan}
        if unknown:
            parser.error(f"unknown families {sorted(unknown)}; known: {[row for row, _, _ in plan]}")
        plan = [entry for entry in plan if entry[0] in args.names]
    start = time.perf_counter()
    rows = [probe(row, family, attn, not args.no_draft) for row, family, attn in plan]
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, specdec from "
          f"{Path(specdec.__file__).parent}; prompt {PROMPT_LENGTH} tokens, {NEW_TOKENS} new, greedy")
    print_table(rows)
    print(f"total {time.perf_counter() - start:.1f}s")
    for row, family, _ in plan:
        print(f"  {row}: {family.notes}")


if __name__ == "__main__":
    main()
