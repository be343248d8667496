"""Checks at the engine boundary: every draft and verdict is validated before the engine uses it,
so a buggy plugin is reported by name instead of corrupting the cache or the output."""

from __future__ import annotations

import torch

from .draft import Draft, ExtraSlots, Verdict
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


def prune_draft(draft: Draft, max_depth: torch.Tensor, extra_max_depth: torch.Tensor | None) -> Draft:
    """Drop nodes deeper than max_depth[b] (the remaining token budget) and their extra slots, and extra
    slots deeper than extra_max_depth[b] (the context limit).

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
    return _restrict(draft, None, max_depth.tolist(),
                     None if extra_max_depth is None else extra_max_depth.expand(draft.batch_size).tolist(), None)


def keep_nodes(draft: Draft, keep: torch.Tensor | list[list[bool]], extra_max_depth: torch.Tensor | None = None,
               root_extras: torch.Tensor | list[bool] | None = None) -> Draft:
    """The draft restricted to the nodes `keep` [B, N] (a connected subtree per row: every kept node's
    parent is kept), compacted in their original order and narrowed to the widest row, with the extra
    slots hanging from kept nodes. `root_extras` [B] bool drops the extra slots hanging from the root
    where False (a plain step). Narrowing matters: padding is computed at batch 1 and breaks the
    plain-chain fast path."""
    keep_rows = keep.tolist() if isinstance(keep, torch.Tensor) else keep
    roots = root_extras.tolist() if isinstance(root_extras, torch.Tensor) else root_extras
    limits = None if extra_max_depth is None else extra_max_depth.expand(draft.batch_size).tolist()
    return _restrict(draft, keep_rows, None, limits, roots)


def _restrict(draft: Draft, keep: list[list[bool]] | None, node_max_depth: list[int] | None,
              extra_max_depth: list[int] | None, root_extras: list[bool] | None) -> Draft:
    """Keep, per row, the nodes in `keep` (None: all) no deeper than `node_max_depth`, and the extra slots
    whose parent is kept, no deeper than `extra_max_depth`, and (for slots under the root) where
    `root_extras`. The plan is made on the host from the drafts' small index lists (parents point to
    earlier entries, so one pass in order settles depths and survival); the tensors are then gathered
    once each. The draft itself comes back when nothing is dropped and it is already narrow."""
    batch, width = draft.batch_size, draft.width
    counts, parents = draft.num_nodes.tolist(), draft.parents.tolist()
    extra = draft.extra
    slot_counts = extra.num_slots.tolist() if extra is not None else [0] * batch
    slot_parents = extra.parents.tolist() if extra is not None else [[] for _ in range(batch)]
    node_rows: list[list[int]] = []  # kept node indices per row, in order
    node_parents: list[list[int]] = []
    slot_rows: list[list[int]] = []
    new_slot_parents: list[list[int]] = []
    for b in range(batch):
        depth: list[int] = []
        alive: list[bool] = []
        new_index: list[int] = []
        kept_nodes: list[int] = []
        kept_parents: list[int] = []
        for i in range(counts[b]):
            parent = parents[b][i]
            depth.append(1 if parent < 0 else depth[parent] + 1)
            ok = (keep is None or bool(keep[b][i])) and (node_max_depth is None or depth[i] <= node_max_depth[b])
            ok = ok and (parent < 0 or alive[parent])
            alive.append(ok)
            new_index.append(len(kept_nodes) if ok else -1)
            if ok:
                kept_nodes.append(i)
                kept_parents.append(-1 if parent < 0 else new_index[parent])
        node_rows.append(kept_nodes)
        node_parents.append(kept_parents)
        # Combined numbering: nodes 0..width-1, then extra slot e at width + e.
        depth += [0] * (width - len(depth))
        alive += [False] * (width - len(alive))
        new_index += [-1] * (width - len(new_index))
        kept_slots: list[int] = []
        kept_slot_parents: list[int] = []
        for e in range(slot_counts[b]):
            parent = slot_parents[b][e]
            depth.append(1 if parent < 0 else depth[parent] + 1)
            parent_alive = (root_extras is None or bool(root_extras[b])) if parent < 0 else alive[parent]
            ok = parent_alive and (extra_max_depth is None or depth[-1] <= extra_max_depth[b])
            alive.append(ok)
            new_index.append(-2 if not ok else len(kept_slots))  # a slot's own index among the kept slots
            if ok:
                kept_slots.append(e)
                kept_slot_parents.append(-1 if parent < 0 else new_index[parent] if parent < width
                                         else -2 - new_index[parent])  # slots renumbered once width is known
        slot_rows.append(kept_slots)
        new_slot_parents.append(kept_slot_parents)
    new_width = max(map(len, node_rows), default=0)
    new_slots = max(map(len, slot_rows), default=0)
    unchanged = all(len(kept) == n for kept, n in zip(node_rows, counts)) and all(
        len(kept) == n for kept, n in zip(slot_rows, slot_counts))
    if unchanged and new_width == width and (extra is None or new_slots == extra.embeds.shape[1]):
        return draft
    node_index = _index(node_rows, new_width, draft.tokens.device)
    tokens = draft.tokens.gather(1, node_index) if new_width else draft.tokens[:, :0]
    q = None if draft.q is None else _gather_rows(draft.q, node_index.to(draft.q.device))
    scores = None if draft.scores is None else draft.scores.gather(1, node_index.to(draft.scores.device))
    new_extra = None
    if extra is not None:
        # A slot whose parent is a slot gets new_width + that slot's new index.
        rows = [[p if p >= -1 else new_width + (-2 - p) for p in row] for row in new_slot_parents]
        slot_index = _index(slot_rows, new_slots, extra.embeds.device)
        new_extra = ExtraSlots(_gather_rows(extra.embeds, slot_index),
                               _padded(rows, new_slots, extra.parents.device),
                               torch.tensor(list(map(len, slot_rows)), dtype=torch.long,
                                            device=extra.num_slots.device))
    new_counts = torch.tensor(list(map(len, node_rows)), dtype=torch.long, device=draft.num_nodes.device)
    return Draft(tokens, _padded(node_parents, new_width, draft.parents.device), new_counts, q, new_extra, scores)


def _index(rows: list[list[int]], width: int, device: torch.device) -> torch.Tensor:
    """[B, width] long indices from per-row lists, padded with 0 (padding is masked by the counts)."""
    return torch.tensor([row + [0] * (width - len(row)) for row in rows], dtype=torch.long,
                        device=device).reshape(len(rows), width)


def _padded(rows: list[list[int]], width: int, device: torch.device) -> torch.Tensor:
    """[B, width] long parents from per-row lists, padded with -1."""
    return torch.tensor([row + [-1] * (width - len(row)) for row in rows], dtype=torch.long,
                        device=device).reshape(len(rows), width)


def _gather_rows(tensor: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """tensor[b, index[b, i], ...] for a [B, N, ...] tensor."""
    return tensor[torch.arange(tensor.shape[0], device=tensor.device)[:, None], index]


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
