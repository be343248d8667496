"""Checks at the engine boundary: every draft and verdict is validated before the engine uses it,
so a buggy plugin is reported by name instead of corrupting the cache or the output."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from .draft import Draft, DraftHost, ExtraSlots, Verdict
from .errors import DrafterError, VerifierError


def _fail(drafter: str, message: str) -> DrafterError:
    return DrafterError(f"drafter {drafter!r} returned an invalid draft: {message}")


def validate_draft(
    draft: Draft, drafter: str, batch: int, vocab_size: int, max_nodes: int, device: torch.device
) -> tuple[Draft, torch.Tensor | None]:
    """The draft on `device`, with its host view, after the checks the host can make from shapes and the
    drafter's host data; plus a 0-d bool device tensor that is True when a check of the tensors' values
    failed (None: nothing to check). The engine reads that flag with the step's one read-back and then
    calls `explain_draft`, which names the problem, before anything is committed."""
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
    allowed = {"cpu", device.type}
    for name, tensor in (("tokens", tokens), ("parents", parents), ("num_nodes", counts), ("q", draft.q)):
        if tensor is not None and tensor.device.type not in allowed:
            raise _fail(drafter, f"{name} is on device {tensor.device}; put drafts on the model's device "
                        f"({device}) or the CPU")
    width = tokens.shape[1]
    host = draft.host if draft.host is not None else _read_host(draft)
    if len(host.sizes) != batch:
        raise _fail(drafter, f"its host view has {len(host.sizes)} rows, not {batch}")
    if any(c < 0 or c > width for c in host.sizes):
        raise _fail(drafter, f"num_nodes {host.sizes} outside [0, {width}]")
    if max(host.sizes, default=0) > max_nodes:
        raise _fail(drafter, f"{max(host.sizes)} nodes exceed the budget of {max_nodes} per row")
    if host.parents is not None and any(
            len(row) != n or any(p < -1 or p >= i for i, p in enumerate(row)) for row, n in zip(host.parents, host.sizes)):
        raise _fail(drafter, "every parent index must be -1 or an earlier node")
    if host.scores is not None and any(
            len(row) != n or any(not math.isfinite(x) or x < 0 for x in row) for row, n in zip(host.scores, host.sizes)):
        raise _fail(drafter, "scores must be finite and non-negative")
    if draft.q is not None:
        q = draft.q
        if not isinstance(q, torch.Tensor) or q.shape != (batch, width, vocab_size):
            raise _fail(drafter, f"q must have shape [{batch}, {width}, {vocab_size}], got "
                        f"{tuple(getattr(q, 'shape', ()))}")
        if not q.is_floating_point():
            raise _fail(drafter, f"q must be a float tensor, got {q.dtype}")
    scores = draft.scores
    if scores is not None and (not isinstance(scores, torch.Tensor) or scores.shape != (batch, width)
                               or not scores.is_floating_point()):
        raise _fail(drafter, f"scores must be a float tensor [{batch}, {width}], got "
                    f"{getattr(scores, 'dtype', type(scores).__name__)} {tuple(getattr(scores, 'shape', ()))}")
    if draft.extra is not None:
        _check_extra_shapes(draft.extra, drafter, batch)
    moved = Draft(tokens, parents, counts, draft.q, draft.extra, None if scores is None else scores.detach().float(),
                  host).to(device)
    if width == 0 and draft.extra is None:  # no values to check: its sizes (all 0) were checked above
        return moved, None
    return moved, _value_problems(moved, vocab_size)


def _read_host(draft: Draft) -> DraftHost:
    """The host view of a draft whose drafter gave none: read back from the device (counted against the
    step's reads; `Draft.chain` and `Draft.from_rows` give one)."""
    sizes = draft.num_nodes.tolist()
    width = draft.width
    parents = [row[: max(0, min(n, width))] for row, n in zip(draft.parents.tolist(), sizes)] if width else [
        [] for _ in sizes]
    chain = all(row == list(range(-1, len(row) - 1)) for row in parents)
    scores = None
    if draft.scores is not None and width and isinstance(draft.scores, torch.Tensor):
        scores = [row[: max(0, min(n, width))] for row, n in zip(draft.scores.float().tolist(), sizes)]
    return DraftHost(sizes, chain, None if chain else parents, scores)


def _value_problems(draft: Draft, vocab_size: int) -> torch.Tensor:
    """0-d bool on the draft's device: whether any value breaks the draft contract or disagrees with the
    host view (checked on the device, read with the step's read-back)."""
    host = draft.host
    device = draft.tokens.device
    width = draft.width
    counts = torch.tensor(host.sizes, dtype=torch.long, device=device)
    bad = (draft.num_nodes != counts).any()
    if width:
        valid = torch.arange(width, device=device)[None, :] < counts[:, None]
        tokens = draft.tokens
        if host.parents is None:
            expected = torch.arange(-1, width - 1, device=device).expand_as(draft.parents)
        else:
            expected = torch.tensor([row + [-1] * (width - len(row)) for row in host.parents], dtype=torch.long,
                                    device=device).reshape(draft.parents.shape)
        bad = bad | (((tokens < 0) | (tokens >= vocab_size) | (draft.parents != expected)) & valid).any()
        if draft.q is not None:
            q = draft.q.float()
            mass = q.sum(-1)
            bad = bad | (((q < 0).any(-1) | ((mass - 1).abs() > 1e-3)) & valid.to(q.device)).any().to(device)
        if draft.scores is not None and host.scores is None:
            bad = bad | ((~torch.isfinite(draft.scores) | (draft.scores < 0)) & valid).any()
    extra = draft.extra
    if extra is not None and extra.embeds.shape[1]:
        slots = extra.embeds.shape[1]
        e_device = extra.parents.device
        e_valid = torch.arange(slots, device=e_device)[None, :] < extra.num_slots[:, None]
        own = width + torch.arange(slots, device=e_device)[None, :]
        bad = bad | (((extra.parents < -1) | (extra.parents >= own)) & e_valid).any().to(device)
    return bad


def explain_draft(draft: Draft, drafter: str, vocab_size: int) -> DrafterError:
    """The error for a draft whose device check failed (`validate_draft`), naming what is wrong."""
    tokens, parents, counts = draft.tokens.cpu(), draft.parents.cpu(), draft.num_nodes.cpu()
    host, width = draft.host, draft.width
    if host is not None and counts.tolist() != list(host.sizes):
        return _fail(drafter, f"num_nodes {counts.tolist()} disagree with its host view {list(host.sizes)}")
    index = torch.arange(width)[None, :]
    valid = index < counts[:, None]
    if bool((((tokens < 0) | (tokens >= vocab_size)) & valid).any()):
        return _fail(drafter, f"token ids outside the vocabulary [0, {vocab_size})")
    if bool((((parents < -1) | (parents >= index)) & valid).any()):
        return _fail(drafter, "every parent index must be -1 or an earlier node")
    if host is not None:
        expected = [host.parents_of(b) for b in range(len(host.sizes))]
        if [row[:n] for row, n in zip(parents.tolist(), host.sizes)] != expected:
            return _fail(drafter, "parents disagree with its host view (a chain's must be -1, 0, 1, ...)")
    if draft.q is not None:
        q_valid = draft.q.float().cpu()[valid]
        if q_valid.numel() and (bool((q_valid < 0).any()) or not torch.allclose(
                q_valid.sum(-1), torch.ones(q_valid.shape[0]), atol=1e-3)):
            return _fail(drafter, "q is not a probability distribution (negative or rows not summing to 1)")
    if draft.scores is not None:
        scores = draft.scores.float().cpu()
        if bool(((~torch.isfinite(scores) | (scores < 0)) & valid).any()):
            return _fail(drafter, "scores must be finite and non-negative")
    if draft.extra is not None:
        extra = draft.extra
        slots = extra.embeds.shape[1]
        e_valid = torch.arange(slots)[None, :] < extra.num_slots.cpu()[:, None]
        own = width + torch.arange(slots)[None, :]
        e_parents = extra.parents.cpu()
        if bool(((e_parents < -1) | (e_parents >= own))[e_valid].any()):
            return _fail(drafter, "extra slot parents must be -1, a node, or an earlier extra slot")
    return _fail(drafter, "its tensors failed the engine's check")


def _check_extra_shapes(extra: ExtraSlots, drafter: str, batch: int) -> None:
    if extra.embeds.dim() != 3 or extra.embeds.shape[0] != batch:
        raise _fail(drafter, f"extra.embeds must be [B={batch}, E, hidden], got {tuple(extra.embeds.shape)}")
    slots = extra.embeds.shape[1]
    if extra.parents.shape != (batch, slots) or extra.num_slots.shape != (batch,):
        raise _fail(drafter, "extra.parents must be [B, E] and extra.num_slots [B]")


def prune_draft(draft: Draft, max_depth: Sequence[int] | torch.Tensor | np.ndarray,
                extra_max_depth: Sequence[int] | torch.Tensor | np.ndarray | int | None) -> Draft:
    """Drop nodes deeper than max_depth[b] (the remaining token budget) and their extra slots, and extra
    slots deeper than extra_max_depth[b] (the context limit). Limits are host data (lists).

    Deeper nodes could never be emitted, so verifying them would only waste compute; their
    descendants are deeper still, so the kept set is always a tree.
    """
    if draft.width == 0 and draft.extra is None:
        return draft
    batch = draft.batch_size
    limits = _host_list(max_depth, batch)
    extra_limits = None if extra_max_depth is None else _host_list(extra_max_depth, batch)
    host = draft.host if draft.host is not None else _read_host(draft)
    if draft.extra is None and host.chain:  # a chain is pruned by clamping its length (every step)
        counts = [max(0, min(n, limit)) for n, limit in zip(host.sizes, limits)]
        return draft if counts == host.sizes else narrow_draft(draft, counts, host)
    return _restrict(draft, None, limits, extra_limits, None)


def narrow_draft(draft: Draft, counts: list[int], host: DraftHost | None = None) -> Draft:
    """The first counts[b] nodes of each row (a chain's or a breadth-first tree's prefix, so every parent
    stays), narrowed to the widest; no extra slots. Host data in, no device read. `host`: the draft's host
    view (default `draft.host`)."""
    width = max(counts, default=0)
    device = draft.tokens.device
    host = host if host is not None else draft.host
    host = host.narrowed(counts) if host is not None else None
    return Draft(draft.tokens[:, :width], draft.parents[:, :width],
                 torch.tensor(counts, dtype=torch.long, device=device),
                 None if draft.q is None else draft.q[:, :width], None,
                 None if draft.scores is None else draft.scores[:, :width], host)


def _host_list(values: Sequence[int] | torch.Tensor | np.ndarray | int, batch: int) -> list[int]:
    if isinstance(values, torch.Tensor):
        return [int(v) for v in values.expand(batch).tolist()]
    return [int(v) for v in np.broadcast_to(np.asarray(values, dtype=np.int64), (batch,))]


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
    host = draft.host if draft.host is not None else _read_host(draft)
    counts = list(host.sizes)
    parents = [host.parents_of(b) for b in range(batch)]
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
    sizes = list(map(len, node_rows))
    new_counts = torch.tensor(sizes, dtype=torch.long, device=draft.num_nodes.device)
    chain = all(row == list(range(-1, len(row) - 1)) for row in node_parents)
    new_host = DraftHost(sizes, chain, None if chain else node_parents,
                         None if host.scores is None else [[host.scores[b][i] for i in kept]
                                                           for b, kept in enumerate(node_rows)])
    return Draft(tokens, _padded(node_parents, new_width, draft.parents.device), new_counts, q, new_extra, scores,
                 new_host)


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
    """Every check at once, raising on the first problem (reads the verdict back: for tests and tools; the
    engine defers the value checks to its read-back with `verdict_problems`)."""
    if bool(verdict_problems(verdict, draft, verifier)):
        raise explain_verdict(verdict, draft, verifier)
    return verdict


def verdict_problems(verdict: Verdict, draft: Draft, verifier: str) -> torch.Tensor:
    """Shape checks on the host (raising at once), and a 0-d bool device tensor that is True when a value
    check failed; the engine reads it with the step's read-back and then calls `explain_verdict`, before
    anything is committed."""
    batch = draft.batch_size
    if not isinstance(verdict, Verdict):
        raise _verdict_error(verifier, f"expected a specdec.Verdict, got {type(verdict).__name__}")
    if verdict.num_accepted.shape != (batch,) or verdict.bonus.shape != (batch,):
        raise _verdict_error(verifier, "num_accepted and bonus must have shape [B]")
    if draft.width and (verdict.accepted.dim() != 2 or verdict.accepted.shape[0] != batch):
        raise _verdict_error(verifier, "accepted must be [B, A]")
    counts = verdict.num_accepted.to(draft.num_nodes.device)
    if draft.width == 0:  # nothing could be accepted
        return (counts != 0).any()
    # Accepted counts within the drafted nodes and the accepted columns; the accepted nodes form a path
    # from the root (each one's parent is the previous one).
    accepted = verdict.accepted.to(draft.parents.device)
    columns = accepted.shape[1]
    bad = (counts < 0).any() | (counts > draft.num_nodes).any() | (counts > columns).any()
    if columns:
        live = torch.arange(columns, device=accepted.device)[None, :] < counts[:, None]
        out_of_range = (accepted < 0) | (accepted >= draft.num_nodes[:, None])
        parent = draft.parents.gather(1, accepted.clamp(0, max(draft.width - 1, 0)))
        expected = torch.cat([torch.full_like(accepted[:, :1], -1), accepted[:, :-1]], dim=1)
        bad = bad | ((out_of_range | (parent != expected)) & live).any()
    return bad


def _verdict_error(verifier: str, message: str) -> VerifierError:
    return VerifierError(f"verifier {verifier!r} returned an invalid verdict: {message}")


def explain_verdict(verdict: Verdict, draft: Draft, verifier: str) -> VerifierError:
    """The error for a verdict whose device check failed (`validate_verdict`), naming what is wrong."""
    counts = verdict.num_accepted.cpu()
    if draft.width == 0:
        return _verdict_error(verifier, "num_accepted must be 0 when the draft has no nodes")
    if bool((counts < 0).any()) or bool((counts > draft.num_nodes.cpu()).any()):
        return _verdict_error(verifier, f"num_accepted {counts.tolist()} exceeds the drafted node counts")
    if verdict.accepted.shape[1] < (int(counts.max()) if counts.numel() else 0):
        return _verdict_error(verifier, "accepted is narrower than num_accepted")
    width = int(counts.max()) if counts.numel() else 0
    accepted = verdict.accepted[:, :width].cpu()
    live = torch.arange(width)[None, :] < counts[:, None]
    if bool(((accepted < 0) | (accepted >= draft.num_nodes.cpu()[:, None]))[live].any()):
        return _verdict_error(verifier, "accepted node index out of range")
    return _verdict_error(verifier, "accepted nodes do not form a path from the root")


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
