"""Test drafters that sample (or take top-k) from a second small model, plus the exact target joint.

They exist to check losslessness: each returns q exactly as the drafter contract demands (the
processed distribution a token was drawn from, or None for deterministic drafts). Next-token
logits are memoised per context, so batches of thousands of rows with one prompt stay cheap.
"""

from __future__ import annotations

import copy
import itertools

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specdec import DecodeState, Draft, Drafter, process_logits
from specdec.sampling import SamplingParams, sample


def small_llama(vocab: int, seed: int, initializer_range: float = 0.5) -> torch.nn.Module:
    """A 1-layer, 16-wide random Llama: cheap enough to run 20k rows, peaky enough to test with."""
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
                         initializer_range=initializer_range)
    model = LlamaForCausalLM(config).eval()
    model.generation_config.eos_token_id = None  # every row generates the full budget
    return model


def perturbed_copy(model: torch.nn.Module, scale: float, seed: int) -> torch.nn.Module:
    """A different random model correlated with `model`: its matrices plus Gaussian noise
    (relative size `scale`), so drafts are accepted often but q != p."""
    draft = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in draft.parameters():
            if param.dim() > 1:
                param.add_(torch.randn(param.shape, generator=generator) * scale * param.std())
    return draft


class ContextLM:
    """Next-token logits of a causal LM for many contexts; each distinct context runs once."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.memo: dict[tuple[int, ...], torch.Tensor] = {}

    @torch.no_grad()
    def logits(self, contexts: list[list[int]]) -> torch.Tensor:
        keys = [tuple(c) for c in contexts]
        missing = sorted({k for k in keys if k not in self.memo})
        for length in sorted({len(k) for k in missing}):
            group = [k for k in missing if len(k) == length]
            out = self.model(torch.tensor(group, dtype=torch.long)).logits[:, -1].float()
            self.memo.update(zip(group, out))
        return torch.stack([self.memo[k] for k in keys])

    def probs(self, contexts: list[list[int]], sampling: SamplingParams) -> torch.Tensor:
        return process_logits(self.logits(contexts), sampling)


class SampledChainDrafter(Drafter):
    """Stochastic chain: k tokens sampled one after another from the draft model; q returned."""

    name = "test-sampled-chain"
    description = "test: chain sampled from a draft model"
    provides_q = True

    def __init__(self, lm: ContextLM, k: int = 3) -> None:
        super().__init__()
        self.lm, self.k = lm, k

    def propose(self, state: DecodeState) -> Draft:
        contexts = [list(s) for s in state.sequences]
        tokens, qs = [], []
        for _ in range(self.k):
            q = self.lm.probs(contexts, state.sampling)
            token = sample(q, state.generator)
            tokens.append(token)
            qs.append(q)
            contexts = [c + [t] for c, t in zip(contexts, token.tolist())]
        return Draft.chain(torch.stack(tokens, dim=1), q=torch.stack(qs, dim=1))


class ExitingChainDrafter(SampledChainDrafter):
    """Stochastic chain whose rows stop where the controller's exit says (`state.draft_exit`), after it sees each
    sampled token's probability (its score): the chain's length is a stopping time of the draft, as layer_skip's
    under the controller. Draws only for rows still drafting."""

    name = "test-exiting-chain"
    description = "test: sampled chain stopped by the controller's exit"

    def __init__(self, lm: ContextLM, k: int = 3) -> None:
        super().__init__(lm, k)
        self.stopped = 0  # rows the exit stopped before their budget

    def propose(self, state: DecodeState) -> Draft:
        batch = state.batch_size
        budgets = state.draft_budgets() or [self.k] * batch
        limits = [min(self.k, int(b), int(d)) for b, d in zip(budgets, state.max_depths())]
        steps = max(limits, default=0)
        if steps == 0:
            return Draft.empty(batch)
        contexts = [list(s) for s in state.sequences]
        going = [n > 0 for n in limits]
        lengths = [0] * batch
        tokens, qs, scores = [], [], []
        for depth in range(steps):
            q = self.lm.probs(contexts, state.sampling)
            token = sample(q, state.generator, torch.tensor(going))
            confidence = q.gather(1, token[:, None]).squeeze(1)
            tokens.append(token)
            qs.append(q)
            scores.append(confidence * (scores[-1] if scores else 1.0))
            lengths = [n + int(g) for n, g in zip(lengths, going)]
            going = [g and depth + 1 < limit for g, limit in zip(going, limits)]
            if state.draft_exit is not None and any(going):
                go_on = state.draft_exit.keep_drafting(depth + 1, confidence.tolist(), going)
                self.stopped += sum(g and not keep for g, keep in zip(going, go_on))
                going = [g and keep for g, keep in zip(going, go_on)]
            contexts = [c + [t] for c, t in zip(contexts, token.tolist())]
            if not any(going):
                break
        path = torch.stack(scores, dim=1)
        return Draft.chain(torch.stack(tokens, dim=1), lengths, torch.stack(qs, dim=1), path, path.tolist())


def _two_level_tree(first: torch.Tensor, second: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Nodes [c_1..c_k, then the k children of c_1, of c_2, ...]: tokens and parents [B, k + k*k]."""
    batch, k = first.shape
    tokens = torch.cat([first, second.reshape(batch, k * k)], dim=1)
    parents = torch.tensor([-1] * k + [i for i in range(k) for _ in range(k)]).expand(batch, -1).clone()
    return tokens, parents


class TopKTreeDrafter(Drafter):
    """Deterministic tree: the draft model's top-k tokens, then the top-k after each (q = None)."""

    name = "test-topk-tree"
    description = "test: deterministic top-k tree from a draft model"

    def __init__(self, lm: ContextLM, k: int = 2) -> None:
        super().__init__()
        self.lm, self.k = lm, k

    def propose(self, state: DecodeState) -> Draft:
        contexts = [list(s) for s in state.sequences]
        first = self.lm.logits(contexts).topk(self.k, dim=-1).indices  # [B, k]
        deeper = [c + [t] for c, row in zip(contexts, first.tolist()) for t in row]
        second = self.lm.logits(deeper).topk(self.k, dim=-1).indices.reshape(len(contexts), self.k, self.k)
        tokens, parents = _two_level_tree(first, second)
        return Draft(tokens, parents, torch.full((len(contexts),), tokens.shape[1], dtype=torch.long))


class SampledTreeDrafter(Drafter):
    """Stochastic tree: k children drawn i.i.d. from q at the root and again under each child."""

    name = "test-sampled-tree"
    description = "test: i.i.d. sampled tree from a draft model"
    provides_q = True

    def __init__(self, lm: ContextLM, k: int = 2) -> None:
        super().__init__()
        self.lm, self.k = lm, k

    def propose(self, state: DecodeState) -> Draft:
        batch, k = state.batch_size, self.k
        contexts = [list(s) for s in state.sequences]
        q_root = self.lm.probs(contexts, state.sampling)  # [B, V]
        first = sample(q_root[:, None].expand(batch, k, -1), state.generator)  # [B, k]
        deeper = [c + [t] for c, row in zip(contexts, first.tolist()) for t in row]
        q_child = self.lm.probs(deeper, state.sampling).reshape(batch, k, -1)  # [B, k, V]
        second = sample(q_child[:, :, None].expand(batch, k, k, -1), state.generator)  # [B, k, k]
        tokens, parents = _two_level_tree(first, second)
        q = torch.cat([q_root[:, None].expand(batch, k, -1),
                       q_child[:, :, None].expand(batch, k, k, -1).reshape(batch, k * k, -1)], dim=1)
        return Draft(tokens, parents, torch.full((batch,), tokens.shape[1], dtype=torch.long), q.contiguous())


def exact_joint(lm: ContextLM, prompt: list[int], vocab: int, steps: int, sampling: SamplingParams) -> torch.Tensor:
    """The target's exact joint distribution of its first `steps` sampled tokens: [V] * steps."""
    joint = torch.ones(())
    for depth in range(steps):
        prefixes = [list(p) for p in itertools.product(range(vocab), repeat=depth)]
        cond = lm.probs([prompt + p for p in prefixes], sampling).double()  # [V^depth, V]
        joint = joint.reshape(-1, 1) * cond
    return joint.reshape([vocab] * steps)
