"""Checks at the engine boundary: every draft and verdict is validated before the engine uses it,
so a buggy plugin is reported by name instead of corrupting the cache or the output. Shapes and host data are
checked at once; the tensors' values are judged on the host from the step's one read-back, before anything is
committed (`DraftCheck`, `verdict_problem`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .draft import Draft, DraftHost, ExtraHost, ExtraSlots, Verdict
from .errors import DrafterError, VerifierError


def _fail(drafter: str, message: str) -> DrafterError:
    return DrafterError(f"drafter {drafter!r} returned an invalid draft: {message}")


def validate_draft(
    draft: Draft, drafter: str, batch: int, vocab_size: int, max_nodes: int, device: torch.device
) -> tuple[Draft, DraftCheck | None]:
    """The draft on `device`, with its host view, after the checks the host can make from shapes and the
    drafter's host data; plus the checks of its tensors' values (None: nothing to check), which the engine
    makes from its one read-back per step, before anything is committed (`DraftCheck`)."""
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
    host = draft.host_view()
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
    extra = draft.extra
    if extra is not None:
        _check_extra_shapes(extra, drafter, batch)
        if extra.host is None:  # read back once here (a drafter that knows them says so: `ExtraHost`)
            extra = ExtraSlots(extra.embeds, extra.parents, extra.num_slots, _read_extra_host(extra))
        _check_extra_host(extra, drafter, width)
    moved = Draft(tokens, parents, counts, draft.q, extra, None if scores is None else scores.detach().float(),
                  host).to(device)
    if width == 0 and draft.extra is None:  # no values to check: its sizes (all 0) were checked above
        return moved, None
    return moved, DraftCheck(moved, vocab_size, _float_problems(moved))


@dataclass
class DraftCheck:
    """The checks of a draft's values, made on the host from the engine's one read-back per step: `parts` go into
    that read, `problem` judges what came back (tokens in the vocabulary, parents earlier nodes, index data as the
    host view says). Judging read values on the host costs no tensor op per check (a few microseconds of host time
    each, at every step); only q and scores without a host copy are checked on the device (`flag`)."""

    draft: Draft  # as validated: on the device, with its host view
    vocab_size: int
    flag: torch.Tensor | None  # 0-d bool on the device: a check of q or of the scores failed

    def parts(self) -> list[torch.Tensor]:
        """Flat long tensors on the draft's device: node counts, tokens, parents, then the extra slots' counts
        and parents, then the flag."""
        draft = self.draft
        device = draft.tokens.device
        parts = [draft.num_nodes, draft.tokens.reshape(-1), draft.parents.reshape(-1)]
        if draft.extra is not None:
            parts += [draft.extra.num_slots.to(device, torch.long), draft.extra.parents.to(device, torch.long).reshape(-1)]
        if self.flag is not None:
            parts.append(self.flag.to(device, torch.long).reshape(1))
        return parts

    def problem(self, values: list[int]) -> str | None:
        """What is wrong with the draft, judged from the values of `parts` (None: nothing)."""
        draft, vocab_size = self.draft, self.vocab_size
        host = draft.host
        batch, width = draft.batch_size, draft.width
        counts = values[:batch]
        if counts != list(host.sizes):
            return f"num_nodes {counts} disagree with its host view {list(host.sizes)}"
        tokens_at, parents_at = batch, batch + batch * width
        for b, count in enumerate(counts):
            row_tokens = values[tokens_at + b * width : tokens_at + b * width + count]
            if row_tokens and (min(row_tokens) < 0 or max(row_tokens) >= vocab_size):
                hint = " (a token drawn from a distribution that is not finite or has no mass: NaN or inf " \
                       "logits?)" if vocab_size in row_tokens else ""
                return f"token ids outside the vocabulary [0, {vocab_size}){hint}"
        for b, count in enumerate(counts):
            row_parents = values[parents_at + b * width : parents_at + b * width + count]
            if any(parent < -1 or parent >= i for i, parent in enumerate(row_parents)):
                return "every parent index must be -1 or an earlier node"
            if row_parents != host.parents_of(b):
                return "parents disagree with its host view (a chain's must be -1, 0, 1, ...)"
        offset = batch + 2 * batch * width
        extra = draft.extra
        if extra is not None:
            slots = extra.embeds.shape[1]
            slot_counts = values[offset : offset + batch]
            offset += batch
            for b, count in enumerate(slot_counts):
                row = values[offset + b * slots : offset + b * slots + max(0, min(count, slots))]
                if count < 0 or count > slots or any(p < -1 or p >= width + e for e, p in enumerate(row)):
                    return "extra slot parents must be -1, a node, or an earlier extra slot"
                if extra.host is not None and (count != extra.host.num_slots[b] or row != extra.host.parents[b]):
                    return "extra slots disagree with their host view"
            offset += batch * slots
        if self.flag is not None and values[offset]:
            return _float_problem(draft)
        return None


def _float_problems(draft: Draft) -> torch.Tensor | None:
    """0-d bool on the draft's device: q is not a distribution at a real node, or device-only scores are not
    finite and non-negative (None: the draft has neither)."""
    check_scores = draft.scores is not None and draft.host.scores is None
    if draft.q is None and not check_scores or not draft.width:
        return None
    device = draft.tokens.device
    valid = draft.node_mask()
    bad = torch.zeros((), dtype=torch.bool, device=device)
    if draft.q is not None:
        q = draft.q.float()
        mass = q.sum(-1)
        # (written so that NaN fails: a NaN mass compares false with everything)
        bad = bad | (((q < 0).any(-1) | ~((mass - 1).abs() <= 1e-3)) & valid.to(q.device)).any().to(device)
    if check_scores:
        bad = bad | ((~torch.isfinite(draft.scores) | (draft.scores < 0)) & valid).any()
    return bad


def _float_problem(draft: Draft) -> str:
    """What the device check of q or the scores found (read back: only when it failed)."""
    valid = draft.node_mask().cpu()
    if draft.q is not None:
        q_valid = draft.q.float().cpu()[valid]
        if q_valid.numel() and (bool((q_valid < 0).any()) or not torch.allclose(
                q_valid.sum(-1), torch.ones(q_valid.shape[0]), atol=1e-3)):
            return "q is not a probability distribution (negative, not finite, or rows not summing to 1)"
    return "scores must be finite and non-negative"


def _read_extra_host(extra: ExtraSlots) -> ExtraHost:
    """The host view of extra slots whose drafter gave none: read back from the device."""
    counts = extra.num_slots.tolist()
    slots = extra.embeds.shape[1]
    return ExtraHost(counts, [row[: max(0, min(n, slots))] for row, n in zip(extra.parents.tolist(), counts)])


def _check_extra_shapes(extra: ExtraSlots, drafter: str, batch: int) -> None:
    if extra.embeds.dim() != 3 or extra.embeds.shape[0] != batch:
        raise _fail(drafter, f"extra.embeds must be [B={batch}, E, hidden], got {tuple(extra.embeds.shape)}")
    slots = extra.embeds.shape[1]
    if extra.parents.shape != (batch, slots) or extra.num_slots.shape != (batch,):
        raise _fail(drafter, "extra.parents must be [B, E] and extra.num_slots [B]")


def _check_extra_host(extra: ExtraSlots, drafter: str, width: int) -> None:
    """The extra slots' host view (the tensors are judged against it after the step's read-back, `DraftCheck`)."""
    host, batch, slots = extra.host, extra.embeds.shape[0], extra.embeds.shape[1]
    if len(host.num_slots) != batch or len(host.parents) != batch:
        raise _fail(drafter, f"its extra slots' host view has {len(host.num_slots)} rows, not {batch}")
    if any(count < 0 or count > slots for count in host.num_slots):
        raise _fail(drafter, f"extra.num_slots {host.num_slots} outside [0, {slots}]")
    if any(len(row) != count or any(p < -1 or p >= width + e for e, p in enumerate(row))
           for row, count in zip(host.parents, host.num_slots)):
        raise _fail(drafter, "extra slot parents must be -1, a node, or an earlier extra slot")


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
    host = draft.host_view()
    if draft.extra is None and host.chain:  # a chain is pruned by clamping its length (every step)
        counts = [max(0, min(n, limit)) for n, limit in zip(host.sizes, limits)]
        return draft if counts == host.sizes else narrow_draft(draft, counts, host)
    if _within_limits(draft, host, limits, extra_limits):
        return draft
    return _restrict(draft, None, limits, extra_limits, None)


def _within_limits(draft: Draft, host: DraftHost, limits: list[int], extra_limits: list[int] | None) -> bool:
    """Whether `_restrict` would give the draft back as it is, decided from host data alone: no node can be
    deeper than its row's node count, no extra slot deeper than that plus its row's slots, and the draft is
    already narrow (its widest row fills the width). False when unsure (extra slots without a host view)."""
    extra = draft.extra
    if extra is not None and extra.host is None:
        return False
    slot_counts = extra.host.num_slots if extra is not None else [0] * len(host.sizes)
    if max(host.sizes, default=0) != draft.width or (extra is not None and max(slot_counts, default=0)
                                                    != extra.embeds.shape[1]):
        return False
    return all(limit >= size for limit, size in zip(limits, host.sizes)) and (extra_limits is None or all(
        limit >= size + slots for limit, size, slots in zip(extra_limits, host.sizes, slot_counts)))


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
    if isinstance(values, list) and len(values) == batch:  # the engine's limits (every step)
        return [int(v) for v in values]
    return np.broadcast_to(np.asarray(values, dtype=np.int64), (batch,)).tolist()


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
    host = draft.host_view()
    counts = list(host.sizes)
    parents = [host.parents_of(b) for b in range(batch)]
    extra = draft.extra
    if extra is None:
        slot_counts, slot_parents = [0] * batch, [[] for _ in range(batch)]
    elif extra.host is not None:
        slot_counts, slot_parents = extra.host.num_slots, extra.host.parents
    else:
        slot_counts, slot_parents = extra.num_slots.tolist(), extra.parents.tolist()
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
        kept_counts = list(map(len, slot_rows))
        new_extra = ExtraSlots(_gather_rows(extra.embeds, slot_index),
                               _padded(rows, new_slots, extra.parents.device),
                               torch.tensor(kept_counts, dtype=torch.long, device=extra.num_slots.device),
                               ExtraHost(kept_counts, rows))
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


def validate_verdict(verdict: Verdict, draft: Draft, verifier: str, vocab_size: int | None = None) -> Verdict:
    """Every check at once, raising on the first problem (reads the verdict back: for tests and tools; the
    engine judges the values it reads back anyway, `verdict_problem`). `draft` needs its host view."""
    check_verdict_shapes(verdict, draft, verifier)
    host = draft.host_view()
    counts = verdict.num_accepted.tolist()
    columns = verdict.accepted.shape[1] if draft.width else 0
    paths = [row[: max(0, min(count, columns))] for row, count in zip(verdict.accepted.tolist(), counts)] if columns \
        else [[] for _ in counts]
    problem = verdict_problem(host, draft.width, counts, verdict.bonus.tolist(), paths, columns, vocab_size)
    if problem is not None:
        raise _verdict_error(verifier, problem)
    return verdict


def check_verdict_shapes(verdict: Verdict, draft: Draft, verifier: str) -> None:
    """The checks of a verdict the host makes from shapes (raising at once); its values are judged after the
    step's read-back (`verdict_problem`)."""
    batch = draft.batch_size
    if not isinstance(verdict, Verdict):
        raise _verdict_error(verifier, f"expected a specdec.Verdict, got {type(verdict).__name__}")
    if verdict.num_accepted.shape != (batch,) or verdict.bonus.shape != (batch,):
        raise _verdict_error(verifier, "num_accepted and bonus must have shape [B]")
    if draft.width and (verdict.accepted.dim() != 2 or verdict.accepted.shape[0] != batch):
        raise _verdict_error(verifier, "accepted must be [B, A]")


def verdict_problem(host: DraftHost, width: int, counts: list[int], bonus: list[int], paths: list[list[int]],
                    columns: int, vocab_size: int | None) -> str | None:
    """What is wrong with a verdict, judged on the host from its read values (None: nothing): each row's accepted
    count within its drafted nodes and the accepted columns, its accepted nodes (`paths[b]`, the first counts[b]
    of its row) a path from the root, its bonus token in the vocabulary (when `vocab_size` is given)."""
    for b, count in enumerate(counts):
        if vocab_size is not None and not 0 <= bonus[b] < vocab_size:
            hint = " (drawn from a distribution that is not finite or has no mass: NaN or inf logits?)" \
                if bonus[b] == vocab_size else ""
            return f"bonus token {bonus[b]} outside the vocabulary [0, {vocab_size}){hint}"
        if not width:
            if count:
                return "num_accepted must be 0 when the draft has no nodes"
            continue
        if count < 0 or count > host.sizes[b]:
            return f"num_accepted {counts} exceeds the drafted node counts {list(host.sizes)}"
        if count > columns:
            return "accepted is narrower than num_accepted"
        parents = host.parents_of(b)
        previous = -1
        for node in paths[b]:
            if not 0 <= node < host.sizes[b]:
                return "accepted node index out of range"
            if parents[node] != previous:
                return "accepted nodes do not form a path from the root"
            previous = node
    return None


def _verdict_error(verifier: str, message: str) -> VerifierError:
    return VerifierError(f"verifier {verifier!r} returned an invalid verdict: {message}")


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
