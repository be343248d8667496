"""Model support is measured, not assumed: before generating on a model we check that our masks and cache
give the logits the model gives by itself, and refuse clearly otherwise.

Three layers of refusal, all before any token is generated:
1. structure (a causal LM head, a forward that takes masks, positions and a cache);
2. the config alone, before any forward runs (an attention implementation that takes no 4-D mask, SDPA
   on a soft-capping model, a layer type we cannot mask): on CUDA a failing kernel can poison the context;
3. a probe through the runtime's own code paths (prefill, tree verification with a wrong branch, ragged
   rows, per-row attention, a scratch forward) running past the longest window and chunk, compared with
   one plain forward of the same model. Its verdict is kept per model object (weakly, dropped with the
   model) with the `attention_signature` it was measured for (class, attention implementation, layer types,
   windows, chunks, soft-capping, dtype, config), and measured again when that changes.
"""

from __future__ import annotations

import inspect
import weakref
from dataclasses import dataclass
from typing import Any

import torch

from .errors import UnsupportedModelError
from .forward_arguments import CACHE_KEYWORDS, cache_keyword
from .layer_attention import (
    LayerAttention,
    attention_implementation,
    attention_signature,
    implementation_problem,
    layer_attention,
)
from .target import ROW_ATTENTION_MIN_WASTE, TargetRunner, context_length, model_device

#: The probe's rows run this many tokens past the longest window or chunk ...
PROBE_MARGIN = 12
#: ... up to this many tokens: a bounded prompt keeps the check cheap on windows and chunks of thousands of
#: tokens (Mistral's 4096, Llama 4's 8192). The window and chunk arithmetic itself is the runtime's and is
#: the same for every size; the tests check it at windows shorter than the text.
PROBE_MAX_SPAN = 1024

# Each checked model's verdict ((feature, what differed) or None) with the signature it was measured for, kept
# only while the model lives (weak keys); a model whose config or attention changed is probed again.
_VERDICTS: weakref.WeakKeyDictionary[Any, tuple[tuple, tuple[str, str] | None]] = weakref.WeakKeyDictionary()


def check_model_supported(model: Any) -> None:
    """Raise `UnsupportedModelError` when specdec cannot serve `model` exactly; probed once per model (and again
    when its attention signature changes)."""
    name = type(model).__name__
    if getattr(model.config, "is_encoder_decoder", False):
        raise UnsupportedModelError(f"{name} is an encoder-decoder model; specdec needs a causal LM",
                                    feature="encoder-decoder")
    if model.get_output_embeddings() is None:
        raise UnsupportedModelError(f"{name} has no language-model head (get_output_embeddings() "
                                    "is None); load it with AutoModelForCausalLM", feature="no language-model head")
    accepted = inspect.signature(model.forward).parameters
    missing = [arg for arg in ("attention_mask", "position_ids") if arg not in accepted]
    if cache_keyword(model) is None:
        missing.append(" or ".join(CACHE_KEYWORDS))
    if missing:
        raise UnsupportedModelError(
            f"{name}.forward does not take {', '.join(missing)}: specdec needs a KV-cache causal LM "
            "it can feed explicit masks and positions (recurrent or stateful models cannot roll back rejected drafts)",
            feature=f"forward without {', '.join(missing)}")
    implementation = attention_implementation(model.config)
    problem = implementation_problem(model)
    if problem is not None:
        feature, why = problem
        raise UnsupportedModelError(f"{name} (attention {implementation!r}): {why}", feature=feature)
    layers = layer_attention(model.config)
    key = attention_signature(model)
    cached = _VERDICTS.get(model)
    if cached is None or cached[0] != key:
        cached = (key, _probe_problem(model, layers))
        _VERDICTS[model] = cached
    if cached[1] is not None:
        feature, what = cached[1]
        raise UnsupportedModelError(f"{name} (attention {implementation!r}, layer types {_describe(layers)}) failed "
                                    f"specdec's tree-attention check: {feature}: {what}", feature=feature)


def _describe(layers: LayerAttention) -> str:
    return ", ".join(kind.name + (f" window {kind.window}" if kind.window else "")
                     + (f" chunk {kind.chunk}" if kind.chunk else "") for kind in layers.kinds)


@dataclass(frozen=True)
class _Case:
    """One probe batch: the rows' prompt lengths, and the code path it exercises (named in a refusal)."""

    feature: str
    lengths: tuple[int, ...]


def _cases(layers: LayerAttention, context: int | None) -> list[_Case]:
    """Solo, ragged and per-row batches whose rows (prompt + 3 continuation tokens) fit the model's context."""
    fits = (context - 3) if context is not None else None  # longest prompt whose continuation fits
    length = min(layers.longest_span, PROBE_MAX_SPAN) + PROBE_MARGIN
    if fits is not None:
        length = max(min(length, fits), 2)
    past = f" past the longest window/chunk ({layers.longest_span})" if layers.longest_span else ""
    cases = [
        _Case(f"prefill, tree verification with a wrong branch and a scratch forward{past}", (length,)),
        _Case(f"a ragged batch of two rows{past}", (length, max(length - 5, 1))),
    ]
    # A row far longer than the others takes the per-row attention path of packed batches; a context too short
    # for such a row never reaches that path.
    longest = length + 2 * ROW_ATTENTION_MIN_WASTE + 8
    if fits is None or longest <= fits:
        cases.append(_Case(f"a ragged batch with per-row attention{past}", (length, max(length - 5, 1), longest)))
    return cases


@torch.no_grad()
def _probe_problem(model: Any, layers: LayerAttention) -> tuple[str, str] | None:
    """(the first code path whose logits differ from one plain forward of the same text, by how much), or None."""
    from .engine import tree_layout  # local: engine imports this module's users

    vocab = int(model.get_input_embeddings().weight.shape[0])
    generator = torch.Generator().manual_seed(0)
    tolerance = 1e-3 if model.get_input_embeddings().weight.dtype == torch.float32 else 3e-2
    for case in _cases(layers, context_length(model)):
        batch = len(case.lengths)
        # Per row: a prompt, then the true continuation (3 tokens) that the tree's right branch holds.
        texts = [torch.randint(0, vocab, (length + 3,), generator=generator) for length in case.lengths]
        try:
            references = [_plain_logits(model, text) for text in texts]
            # Kernels chosen without timings: the check is of masks and layouts, which both views share, and a
            # seeded call must read no timing (`specdec.cpu_linear`).
            runner = TargetRunner(model, batch, max(case.lengths) + 16, reproducible=True)
            prompt_ids = torch.zeros(batch, max(case.lengths) - 1, dtype=torch.long)
            for row, (text, length) in enumerate(zip(texts, case.lengths)):
                prompt_ids[row, : length - 1] = text[: length - 1]
            runner.prefill(prompt_ids, torch.tensor(case.lengths) - 1)
            if batch == 1:  # a self-speculating drafter's scratch forward on the committed cache
                length = case.lengths[0]
                got = runner.scratch_forward(texts[0][None, length - 1 : length + 2]).float().cpu()[0]
                error = _relative_error(got, references[0][length - 1 : length + 2])
                if error > tolerance:
                    return case.feature, (f"the scratch forward's logits differ from a plain forward by "
                                          f"{error:.2e} (relative, > {tolerance:.0e})")
            tokens, parents, valid, truth = _trees(texts, case.lengths, vocab)
            depths, visible = tree_layout(parents)
            logits = runner.verify_forward(tokens, depths, visible, valid=valid).float().cpu()
            runner.release()
        except Exception as error:  # any failure inside the model's forward means unsupported
            return case.feature, f"{type(error).__name__}: {error}"
        for row, length in enumerate(case.lengths):
            got = logits[row, truth[row]]
            error = _relative_error(got, references[row][length - 1 : length + 3])
            if error > tolerance:
                return case.feature, (f"row {row} (prompt of {length} tokens) logits differ from a plain "
                                      f"forward by {error:.2e} (relative, > {tolerance:.0e})")
    return None


def _plain_logits(model: Any, text: torch.Tensor) -> torch.Tensor:
    """The model's own logits for one row, with its own masks and no cache: the reference."""
    return model(input_ids=text[None].to(model_device(model)), use_cache=False).logits.float().cpu()[0]


def _trees(texts: list[torch.Tensor], lengths: tuple[int, ...], vocab: int):
    """Verification inputs per row: the root (last prompt token), a wrong branch of 1-2 nodes (width differs
    per row, so rows are padded), then the true continuation as a chain. Returns tokens, input-index
    parents, valid [B, T] and, per row, the input indices of the root and the true chain."""
    rows = []
    for row, (text, length) in enumerate(zip(texts, lengths)):
        wrong = 1 + row % 2
        root, true = text[length - 1 : length], text[length : length + 3]
        wrong_tokens = (true[:wrong] + 1) % vocab
        tokens = torch.cat([root, wrong_tokens, true])
        parents = [0] + list(range(wrong)) + [0] + [1 + wrong + i for i in range(2)]
        rows.append((tokens, parents, [0] + [1 + wrong + i for i in range(3)]))
    width = max(len(tokens) for tokens, _, _ in rows)
    tokens = torch.zeros(len(rows), width, dtype=torch.long)
    parents = torch.zeros(len(rows), width, dtype=torch.long)
    valid = torch.zeros(len(rows), width, dtype=torch.bool)
    for row, (row_tokens, row_parents, _) in enumerate(rows):
        tokens[row, : len(row_tokens)] = row_tokens
        parents[row, : len(row_parents)] = torch.tensor(row_parents)
        valid[row, : len(row_tokens)] = True
    return tokens, parents, valid, [truth for _, _, truth in rows]


def _relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    return float((got - expected).abs().max() / expected.abs().max().clamp(min=1.0))
