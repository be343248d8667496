"""Which token ids a draft model and a target share, checked once before generation.

Speculative decoding with a separate draft model is only meaningful when both models number
tokens the same way. Output sizes may differ by unused rows at the end (checkpoints pad their
embedding matrices to a multiple of 64 or 128; vLLM and llama.cpp accept that too), so the mapping
is "ids [0, shared) are the same token in both models; nothing else is". Draft logits are cut to
the shared ids and padded with -inf up to the target's size, so the draft never proposes a token
the target's vocabulary does not share, and its q is a distribution over the target's ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from specdec.errors import DrafterError


@dataclass(frozen=True)
class VocabMapping:
    """Ids [0, shared) mean the same token in both models (how that was established: `source`)."""

    shared: int
    target_size: int
    draft_size: int
    source: str
    fallback_id: int = 0  # fed to the draft for a committed id it has no embedding row for

    def to_target(self, logits: torch.Tensor) -> torch.Tensor:
        """Draft logits [..., draft_size] -> [..., target_size]; ids outside `shared` get -inf."""
        if self.shared == self.draft_size == self.target_size:
            return logits
        logits = logits[..., : self.shared]
        missing = self.target_size - self.shared
        if missing:
            pad = logits.new_full((*logits.shape[:-1], missing), float("-inf"))
            logits = torch.cat([logits, pad], dim=-1)
        return logits

    def to_draft_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """Token ids the target committed, made safe to embed in the draft model.

        Only a target id in its own unused tail can fall outside the draft's rows; feeding the
        fallback instead costs acceptance, never correctness (the target verifies everything)."""
        if self.target_size <= self.draft_size:
            return ids
        return torch.where(ids < self.draft_size, ids, torch.full_like(ids, self.fallback_id))

    def describe(self) -> str:
        return (f"{self.shared} shared ids (target has {self.target_size} output rows, draft {self.draft_size}; "
                f"{self.source})")


def output_size(model: Any) -> int:
    head = model.get_output_embeddings()
    return int(head.weight.shape[0]) if head is not None else int(model.config.vocab_size)


def _vocab_difference(target_vocab: dict[str, int], draft_vocab: dict[str, int]) -> str:
    """A short human description of how two token->id maps differ."""
    differing = sorted(tok for tok in set(target_vocab) | set(draft_vocab)
                       if target_vocab.get(tok) != draft_vocab.get(tok))
    examples = ", ".join(f"{tok!r}: target {target_vocab.get(tok)} vs draft {draft_vocab.get(tok)}"
                         for tok in differing[:4])
    return (f"the tokenizers differ ({len(target_vocab)} vs {len(draft_vocab)} tokens, {len(differing)} tokens "
            f"with a different id, e.g. {examples})")


def _special_ids(model: Any) -> dict[str, Any]:
    config = model.config
    return {name: getattr(config, name, None) for name in ("bos_token_id", "eos_token_id", "pad_token_id")}


def resolve_vocab(
    target: Any,
    draft: Any,
    target_tokenizer: Any | None,
    draft_tokenizer: Any | None,
    shared_vocab_size: int | None = None,
) -> VocabMapping:
    """Check the pair and return the id mapping, or raise `DrafterError` saying what differs."""
    target_size, draft_size = output_size(target), output_size(draft)
    problem = None
    if target_tokenizer is not None and draft_tokenizer is not None:
        target_vocab, draft_vocab = target_tokenizer.get_vocab(), draft_tokenizer.get_vocab()
        if target_vocab != draft_vocab:
            problem = _vocab_difference(target_vocab, draft_vocab)
        shared, source = len(target_vocab), "tokenizers compared and identical"
    elif target_tokenizer is not None or draft_tokenizer is not None:
        known = target_tokenizer if target_tokenizer is not None else draft_tokenizer
        shared, source = len(known), "one tokenizer known; the other model's tokenizer was not compared"
    elif target_size == draft_size:
        shared, source = target_size, "equal output sizes; no tokenizers to compare"
        specials_t, specials_d = _special_ids(target), _special_ids(draft)
        clash = {name: (specials_t[name], specials_d[name]) for name in specials_t
                 if specials_t[name] is not None and specials_d[name] is not None
                 and specials_t[name] != specials_d[name]}
        if clash:
            problem = "their special token ids differ: " + ", ".join(
                f"{name} target {t} vs draft {d}" for name, (t, d) in clash.items())
    else:
        shared, source = min(target_size, draft_size), ""
        if shared_vocab_size is None:
            problem = (f"their output sizes differ (target {target_size}, draft {draft_size}) and no tokenizer is "
                       "known to tell which ids they share; pass the tokenizers or set shared_vocab_size")
    if shared_vocab_size is not None:
        if problem is None and shared_vocab_size > shared:
            problem = f"shared_vocab_size={shared_vocab_size} exceeds the {shared} ids the pair can share"
        shared, source = shared_vocab_size, "shared_vocab_size option"
    if problem is None and shared > min(target_size, draft_size):
        problem = (f"the tokenizer has {shared} tokens but the target has {target_size} output rows and the draft "
                   f"{draft_size}")
    if problem is not None:
        raise DrafterError(f"drafter 'draft_model': the draft model cannot draft for this target: {problem}. "
                           "A draft model must use the target's vocabulary (extra unused rows at the end are fine).")
    fallback = _special_ids(draft).get("pad_token_id")
    fallback = fallback if isinstance(fallback, int) and 0 <= fallback < shared else 0
    return VocabMapping(shared, target_size, draft_size, source, fallback)
