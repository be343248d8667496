"""Checks at the engine boundary: every draft and verdict is validated before the engine uses it,
so a buggy plugin is reported by name instead of corrupting the cache or the output."""

from __future__ import annotations

import torch

from .draft import Draft, ExtraSlots, Verdict, node_depths
from .errors import DrafterError, VerifierError


def _fail(drafter: str, message: str) -> DrafterError:
    return DrafterError(f"drafter {drafter!r} returned an invalid draft: {message}")


def validate_draft(
    draft: Draft, drafter: str, batch: int, vocab_size: int, max_nodes: int, device: torch.device
) -> Draft:
    if not isinstance(draft, Draft):
        raise _fail(drafter, f"expected a specdec.Draft, got {type(draft).__name__}")
    tokens, parents, counts = draft.tokens, draft.parents, draft.num_nodes
    for name, tensor in (("tokens", tokens), ("parents", parents), ("num_nodes", counts)):
        if not isinstance(tensor, torch.Tensor) or tensor.dtype != torch.long:
            raise _fail(drafter, f"{name} must be a torch.long tensor, got "
                        f"{getattr(tensor, 'dtype', type(tensor).__name__)}")
    if tokens.dim() != 2 or tokens.shape[0] != batch or parents.shape != tokens.shape or counts.shape != (batch,):
        raise _fail(drafter, f"expected tokens/parents [B={batch}, N] and num_nodes [{batch}], got "
                    f"{tuple(tokens.shape)}, {tuple(parents.shape)}, {tuple(counts.shape)}")
    if tokens.shape[1] == 0 and draft.extra is None and draft.q is None and draft.scores is None:
        # empty draft: the common fast path
        if bool((counts != 0).any()):
            raise _fail(drafter, "num_nodes must be 0 for a draft with no nodes")
        return draft
    allowed = {"cpu", device.type}
    for name, tensor in (("tokens", tokens), ("parents", parents), ("num_nodes", counts), ("q", draft.q)):
        if tensor is not None and tensor.device.type not in allowed:
            raise _fail(drafter, f"{name} is on device {tensor.device}; put drafts on the model's device "
                        f"({device}) or the CPU")
    width = tokens.shape[1]
    counts_cpu = counts.cpu()
    count_list = counts_cpu.tolist()
    if any(c < 0 or c > width for c in count_list):
        raise _fail(drafter, f"num_nodes {count_list} outside [0, {width}]")
    if max(count_list, default=0) > max_nodes:
        raise _fail(drafter, f"{max(count_list)} nodes exceed the budget of {max_nodes} per row")
    index = torch.arange(width)[None, :]
    valid = index < counts_cpu[:, None]
    tokens_cpu, parents_cpu = tokens.cpu(), parents.cpu()
    # One pass over both (drafts are checked every step): which check failed is sorted out after.
    bad_token = (tokens_cpu < 0) | (tokens_cpu >= vocab_size)
    if bool(((bad_token | (parents_cpu < -1) | (parents_cpu >= index)) & valid).any()):
        if bool((bad_token & valid).any()):
            raise _fail(drafter, f"token ids outside the vocabulary [0, {vocab_size})")
        raise _fail(drafter, "every parent index must be -1 or an earlier node")
    if draft.q is not None:
        q = draft.q
        if not isinstance(q, torch.Tensor) or q.shape != (batch, width, vocab_size):
            raise _fail(drafter, f"q must have shape [{batch}, {width}, {vocab_size}], got "
                        f"{tuple(getattr(q, 'shape', ()))}")
        if not q.is_floating_point():
            raise _fail(drafter, f"q must be a float tensor, got {q.dtype}")
        q_valid = q.float()[valid.to(q.device)]
        if q_valid.numel() and (bool((q_valid < 0).any()) or not torch.allclose(
                q_valid.sum(-1), torch.ones(q_valid.shape[0], device=q.device), atol=1e-3)):
            raise _fail(drafter, "q is not a probability distribution (negative or rows not summing to 1)")
    scores = draft.scores
    if scores is not None:
        if not isinstance(scores, torch.Tensor) or scores.shape != (batch, width) or not scores.is_floating_point():
            raise _fail(drafter, f"scores must be a float tensor [{batch}, {width}], got "
                        f"{getattr(scores, 'dtype', type(scores).__name__)} {tuple(getattr(scores, 'shape', ()))}")
        scores = scores.detach().float().cpu()
        if bool(((~torch.isfinite(scores) | (scores < 0)) & valid).any()):
            raise _fail(drafter, "scores must be finite and non-negative")
    if draft.extra is not None:
        _validate_extra(draft.extra, drafter, batch, width)
    return Draft(tokens.to(device), parents.to(device), counts.to(device),
                 None if draft.q is None else draft.q.to(device), draft.extra, scores)


def _validate_extra(extra: ExtraSlots, drafter: str, batch: int, width: int) -> None:
    if extra.embeds.dim() != 3 or extra.embeds.shape[0] != batch:
        raise _fail(drafter, f"extra.embeds must be [B={batch}, E, hidden], got {tuple(extra.embeds.shape)}")
    slots = extra.embeds.shape[1]
    if extra.parents.shape != (batch, slots) or extra.num_slots.shape != (batch,):
        raise _fail(drafter, "extra.parents must be [B, E] and extra.num_slots [B]")
    valid = torch.arange(slots)[None, :] < extra.num_slots.cpu()[:, None]
    own_index = width + torch.arange(slots)[None, :]
    parents = extra.parents.cpu()
    if bool(((parents < -1) | (parents >= own_index))[valid].any()):
        raise _fail(drafter, "extra slot parents must be -1, a node, or an earlier extra slot")


def _compact(keep: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Move kept entries of each row to the front (stable) for each [B, N, ...] tensor."""
    order = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)
    out = []
    for tensor in tensors:
        index = order.to(tensor.device)
        while index.dim() < tensor.dim():
            index = index.unsqueeze(-1)
        out.append(tensor.gather(1, index.expand(*order.shape, *tensor.shape[2:])))
    return tuple(out)


def prune_draft(draft: Draft, max_depth: torch.Tensor, extra_max_depth: torch.Tensor | None) -> Draft:
    """Drop nodes deeper than max_depth[b] (the remaining token budget) and their extra slots.

    Deeper nodes could never be emitted, so verifying them would only waste compute; their
    descendants are deeper still, so the kept set is always a tree.
    """
    if draft.width == 0 and draft.extra is None:
        return draft
    if draft.extra is None:  # a chain is pruned by clamping its length (the common case, every step)
        width = draft.width
        chain = torch.arange(-1, width - 1, device=draft.parents.device)
        valid = draft.node_mask()
        if bool(((draft.parents == chain) | ~valid).all()):
            limit = max_depth.to(draft.num_nodes.device).clamp(min=0)
            if bool((draft.num_nodes <= limit).all()):
                return draft
            counts = torch.minimum(draft.num_nodes, limit)
            new_width = int(counts.max()) if counts.numel() else 0
            return Draft(draft.tokens[:, :new_width], draft.parents[:, :new_width], counts,
                         None if draft.q is None else draft.q[:, :new_width], None,
                         None if draft.scores is None else draft.scores[:, :new_width])
    device = draft.tokens.device
    valid = draft.node_mask()
    depths = node_depths(draft.parents, valid)
    keep = valid & (depths <= max_depth.to(device)[:, None])
    if bool((keep == valid).all()) and draft.extra is None:
        return draft
    return keep_nodes(draft, keep, extra_max_depth)


def keep_nodes(draft: Draft, keep: torch.Tensor, extra_max_depth: torch.Tensor | None = None,
               root_extras: torch.Tensor | None = None) -> Draft:
    """The draft restricted to the nodes `keep` [B, N] (a connected subtree per row: every kept node's
    parent is kept), compacted in their original order and narrowed to the widest row, with the extra
    slots hanging from kept nodes. `root_extras` [B] bool drops the extra slots hanging from the root
    where False (a plain step). Narrowing matters: padding is computed at batch 1 and breaks the
    plain-chain fast path."""
    valid = draft.node_mask()
    keep = keep & valid
    counts = keep.sum(dim=1)
    width = int(counts.max()) if counts.numel() else 0
    new_index = torch.cumsum(keep.long(), dim=1) - 1
    parents = torch.where(draft.parents >= 0, new_index.gather(1, draft.parents.clamp(min=0)), -1)
    tokens, parents = (t[:, :width] for t in _compact(keep, draft.tokens, parents))
    q = None if draft.q is None else _compact(keep.to(draft.q.device), draft.q)[0][:, :width]
    scores = None if draft.scores is None else _compact(keep.to(draft.scores.device), draft.scores)[0][:, :width]
    new_extra = None
    if draft.extra is not None:
        new_extra = _prune_extra(draft.extra, draft, keep, new_index, extra_max_depth, root_extras, width)
    return Draft(tokens.contiguous(), parents.contiguous(), counts, q, new_extra, scores)


def _prune_extra(
    extra: ExtraSlots,
    draft: Draft,
    keep: torch.Tensor,
    new_index: torch.Tensor,
    extra_max_depth: torch.Tensor | None,
    root_extras: torch.Tensor | None = None,
    new_width: int | None = None,
) -> ExtraSlots:
    """Drop extra slots whose parent was pruned or that would sit past the context limit; slot parents
    are renumbered for a draft narrowed to `new_width` nodes."""
    width, slots = draft.width, extra.embeds.shape[1]
    new_width = width if new_width is None else new_width
    device = draft.tokens.device
    parents = extra.parents.to(device)
    valid = torch.arange(slots, device=device)[None, :] < extra.num_slots.to(device)[:, None]
    # Combined view: nodes then extra slots, so chains of extra slots are handled like nodes.
    all_parents = torch.cat([draft.parents, parents], dim=1)
    all_valid = torch.cat([draft.node_mask(), valid], dim=1)
    extra_ok = valid.clone()
    if extra_max_depth is not None:
        extra_ok &= node_depths(all_parents, all_valid)[:, width:] <= extra_max_depth.to(device)[:, None]
    root = (torch.ones(keep.shape[0], dtype=torch.bool, device=device) if root_extras is None
            else root_extras.to(device))
    alive = torch.cat([keep, extra_ok], dim=1)
    for _ in range(slots):  # a slot survives only if its parent does
        parent_alive = torch.where(all_parents >= 0, alive.gather(1, all_parents.clamp(min=0)), root[:, None])
        updated = torch.cat([keep, extra_ok & parent_alive[:, width:]], dim=1)
        if torch.equal(updated, alive):
            break
        alive = updated
    extra_keep = alive[:, width:]
    # Extra slot e of the new draft is numbered new_width + e in the combined index.
    combined_index = torch.cat([new_index, new_width + torch.cumsum(extra_keep.long(), dim=1) - 1], dim=1)
    new_parents = torch.where(parents >= 0, combined_index.gather(1, parents.clamp(min=0)), -1)
    embeds, new_parents = _compact(extra_keep.to(extra.embeds.device), extra.embeds, new_parents)
    counts = extra_keep.sum(dim=1)
    slots = int(counts.max()) if counts.numel() else 0  # narrowed like the nodes: padding is computed at batch 1
    return ExtraSlots(embeds[:, :slots].contiguous(), new_parents[:, :slots].contiguous(), counts)


def validate_verdict(verdict: Verdict, draft: Draft, verifier: str) -> Verdict:
    def fail(message: str) -> VerifierError:
        return VerifierError(f"verifier {verifier!r} returned an invalid verdict: {message}")

    batch = draft.batch_size
    if not isinstance(verdict, Verdict):
        raise fail(f"expected a specdec.Verdict, got {type(verdict).__name__}")
    if verdict.num_accepted.shape != (batch,) or verdict.bonus.shape != (batch,):
        raise fail("num_accepted and bonus must have shape [B]")
    if draft.width == 0:  # nothing could be accepted
        if bool((verdict.num_accepted != 0).any()):
            raise fail("num_accepted must be 0 when the draft has no nodes")
        return verdict
    counts = verdict.num_accepted.cpu()
    if bool((counts < 0).any()) or bool((counts > draft.num_nodes.cpu()).any()):
        raise fail(f"num_accepted {counts.tolist()} exceeds the drafted node counts")
    if verdict.accepted.dim() != 2 or verdict.accepted.shape[0] != batch:
        raise fail("accepted must be [B, A]")
    if verdict.accepted.shape[1] < (int(counts.max()) if counts.numel() else 0):
        raise fail("accepted is narrower than num_accepted")
    # The accepted nodes must form a path from the root: each one's parent is the previous one.
    width = int(counts.max()) if counts.numel() else 0
    if width:
        accepted = verdict.accepted[:, :width].to(draft.parents.device)
        live = torch.arange(width, device=accepted.device)[None, :] < counts.to(accepted.device)[:, None]
        if bool(((accepted < 0) | (accepted >= draft.num_nodes[:, None]))[live].any()):
            raise fail("accepted node index out of range")
        parent = draft.parents.gather(1, accepted.clamp(min=0))
        expected = torch.cat([torch.full_like(accepted[:, :1], -1), accepted[:, :-1]], dim=1)
        if bool((parent != expected)[live].any()):
            raise fail("accepted nodes do not form a path from the root")
    return verdict



def check_prompt_ids(prompts: list[list[int]], vocab_rows: int) -> None:
    """Token ids outside the input embedding fail inside the model with a bare IndexError (on CUDA, a
    device-side assert that poisons the context): refuse them first, naming the id, its row and the size."""
    for row, prompt in enumerate(prompts):
        if not prompt or (min(prompt) >= 0 and max(prompt) < vocab_rows):
            continue
        for position, token in enumerate(prompt):
            if not 0 <= token < vocab_rows:
                raise ValueError(f"prompt row {row} holds token id {token} at position {position}, outside the "
                                 f"vocabulary: the model's input embedding has {vocab_rows} rows (ids 0 to "
                                 f"{vocab_rows - 1})")
