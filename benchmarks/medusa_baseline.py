"""A Medusa-1 head baseline for PPD's prompt tokens (Cai et al. 2024): per distance k, one residual
SiLU block on the target's final hidden state (the LM head's input) followed by the target's own
frozen LM head. The block's weight starts at zero (as in Medusa), so every head starts as the
anchor's own next-token distribution.

It sees what the prompts see (`specdec.tools.ppd.train`): windows of the same text drawn by the
same seeded sampler, the same anchors, the same label (the frozen target's greedy token k + 1 ahead
of the anchor, `anchors.greedy_chains`), under a wall-time budget that includes computing the labels.
Two protocols:

* ``cached`` (default, the strong baseline): spend `label_fraction` of the budget labelling windows
  (hidden states + greedy labels are kept: they are all a head needs), then train epochs over them with
  cross-entropy on the greedy labels (Medusa-1's loss) until the budget is spent;
* ``online``: a fresh window every step with the prompts' own loss (`--loss kl` = KD).

It is a benchmark, not a drafter.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch

from specdec.tools.ppd.anchors import greedy_chains
from specdec.tools.ppd.data import sample_windows
from specdec.tools.ppd.evaluate import Predictor
from specdec.tools.ppd.train import lr_factor, objective, pick_anchors


class MedusaHeads(torch.nn.Module):
    """m Medusa-1 heads: logits_k = lm_head(h + SiLU(W_k h + b_k))."""

    def __init__(self, hidden: int, num_heads: int) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(hidden, hidden) for _ in range(num_heads))
        for block in self.blocks:
            torch.nn.init.zeros_(block.weight)

    def forward(self, hidden: torch.Tensor, lm_head: torch.nn.Module) -> torch.Tensor:
        """hidden [..., H] -> logits [..., m, V]."""
        states = torch.stack([hidden + torch.nn.functional.silu(block(hidden)) for block in self.blocks], dim=-2)
        return lm_head(states.to(lm_head.weight.dtype)).float()


@dataclass
class MedusaConfig:
    """Training knobs; window/anchors/seed mirror train-ppd's so both draw the same windows."""

    num_heads: int = 3
    time_budget: float = 120.0
    protocol: str = "cached"  # or "online"
    label_fraction: float = 0.5  # cached: share of the budget spent labelling windows
    label_windows: int | None = None  # cached: label exactly this many windows instead (reproducible runs)
    max_steps: int = 1_000_000
    batch_size: int = 1  # windows per labelling / online step
    minibatch: int = 512  # cached: anchors per optimizer step
    window: int = 256
    anchors: int = 0  # per window; 0 = every anchor of the window
    lr: float = 1e-2
    warmup: float = 0.0
    decay: float = 0.8
    loss: str = "ce"
    seed: int = 0


def _label_window(model, stream, config, generator, device) -> tuple:
    ids = sample_windows(stream, config.batch_size, config.window, generator).to(device)
    anchors = pick_anchors(ids.shape[1], config.anchors or config.window, generator).to(device)
    _, teacher, greedy, states = greedy_chains(model, ids, anchors, config.num_heads, keep_hidden=True)
    return teacher, greedy[:, :, 1:], states


def train_medusa(model: torch.nn.Module, stream: torch.Tensor, config: MedusaConfig) -> tuple[MedusaHeads, dict]:
    """Train heads on windows of `stream` within the wall-time budget; returns (heads, log)."""
    device = model.get_input_embeddings().weight.device
    heads = MedusaHeads(model.get_input_embeddings().weight.shape[1], config.num_heads).to(device)
    optimizer = torch.optim.AdamW(heads.parameters(), lr=config.lr, weight_decay=0.0)
    lm_head = model.get_output_embeddings()
    generator = torch.Generator().manual_seed(config.seed)
    started = time.time()
    steps, losses, windows, epochs, online_anchors = 0, [], 0, 0, 0
    states_seen: list[torch.Tensor] = []
    labels_seen: list[torch.Tensor] = []

    def set_lr(done: float) -> None:
        for group in optimizer.param_groups:
            group["lr"] = config.lr * lr_factor(done, config.warmup)

    def update(logits, teacher, labels, kind) -> None:
        nonlocal steps
        loss = objective(logits, teacher, labels, config.decay, kind)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        steps += 1
        losses.append(loss.item())

    if config.protocol == "online":
        while steps < config.max_steps and time.time() - started < config.time_budget:
            set_lr(max(steps / config.max_steps, (time.time() - started) / config.time_budget))
            teacher, labels, states = _label_window(model, stream, config, generator, device)
            windows += 1
            online_anchors += labels.shape[0] * labels.shape[1]
            update(heads(states, lm_head).flatten(0, 1), teacher.flatten(0, 1), labels.flatten(0, 1), config.loss)
        labelled = windows
    elif config.protocol == "cached":
        if config.loss != "ce":
            raise ValueError("the cached protocol keeps hard labels only: use loss='ce' (or protocol='online')")
        label_until = started + config.label_fraction * config.time_budget
        while (len(states_seen) < config.label_windows if config.label_windows
               else time.time() < label_until or not states_seen):
            _, labels, states = _label_window(model, stream, config, generator, device)
            states_seen.append(states.flatten(0, 1))
            labels_seen.append(labels.flatten(0, 1))
            windows += 1
        states_all, labels_all = torch.cat(states_seen), torch.cat(labels_seen)
        labelled = windows
        train_start = time.time()
        span = max(1e-6, started + config.time_budget - train_start)
        shuffle = torch.Generator().manual_seed(config.seed + 1)
        while steps < config.max_steps and time.time() - started < config.time_budget:
            order = torch.randperm(len(states_all), generator=shuffle)
            epochs += 1
            for first in range(0, len(order), config.minibatch):
                if steps >= config.max_steps or time.time() - started >= config.time_budget:
                    break
                set_lr(min(1.0, (time.time() - train_start) / span))
                rows = order[first : first + config.minibatch].to(device)
                update(heads(states_all[rows], lm_head), None, labels_all[rows], "ce")
    else:
        raise ValueError(f"unknown protocol {config.protocol!r}")
    anchors_labelled = sum(len(x) for x in labels_seen) if labels_seen else online_anchors
    log = {"config": asdict(config), "steps": steps, "windows_labelled": labelled, "epochs": epochs,
           "anchors_labelled": anchors_labelled, "seconds": round(time.time() - started, 1),
           "final_loss_avg20": sum(losses[-20:]) / max(1, len(losses[-20:])), "first_loss": losses[0] if losses else None,
           "parameters": sum(p.numel() for p in heads.parameters())}
    return heads, log


def medusa_predictor(model: torch.nn.Module, heads: MedusaHeads) -> Predictor:
    """The heads as an `evaluate.anchored_rank_counts` predictor (it reads the anchors' hidden states)."""
    lm_head = model.get_output_embeddings()

    def predict(cache, length, anchors, hidden):
        return heads(hidden, lm_head)

    return predict
