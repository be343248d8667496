"""Training recipe for the bundled target and draft models.

Deterministic from a seed: the model is initialised after ``torch.manual_seed``
and batch ``s`` is a pure function of (seed, step), so a run resumed from a
checkpoint (model, optimizer, scheduler, step, RNG state and loss log) follows
exactly the same loss curve as an uninterrupted one.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerBase
from transformers.optimization import get_cosine_schedule_with_warmup

from specdec.tools.zoo.corpus import build_corpus
from specdec.tools.zoo.tokenizer import train_tokenizer


@dataclass
class ModelShape:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int = 1024


@dataclass
class TrainConfig:
    name: str
    model: ModelShape
    steps: int
    batch_size: int = 16
    seq_len: int = 256
    lr: float = 1.5e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 100
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    seed: int = 0
    threads: int = 2
    ckpt_every: int = 50
    max_train_docs: int | None = None  # trims the corpus for tiny test runs
    # bfloat16 autocast of the matmuls (fp32 master weights and optimizer): 1.7x faster per step on a
    # CPU with avx512_bf16, which is what let the target see 7M tokens in about an hour here.
    bf16_autocast: bool = False
    vocab_size: int = 8192
    # Distillation (a draft for speculative decoding): start from `init_from`'s weights and learn the
    # teacher's next-token distribution (forward KL, weight `kd_weight`) beside the plain next-token loss
    # (weight 1 - kd_weight). Model directories; "default:<name>" is a model shipped in the package.
    teacher: str | None = None
    init_from: str | None = None
    kd_weight: float = 0.0
    extra: dict = field(default_factory=dict)


PRESETS: dict[str, TrainConfig] = {
    # ~17M parameters, 8 layers: room for layer skipping; ~1 h on 2 idle cores (7.4M tokens, bf16 autocast).
    "target": TrainConfig(
        "target", ModelShape(384, 8, 6, 1024), steps=1800, lr=1.5e-3, warmup_steps=60, bf16_autocast=True
    ),
    # 2 layers, hidden 224: 0.18 of the target's per-token matmul compute (LM head included).
    "draft": TrainConfig("draft", ModelShape(224, 2, 4, 608), steps=800, lr=2e-3, warmup_steps=60),
    # The draft distilled on the target, trained to match the target's distributions on the same corpus,
    # warm-started from the shipped draft: the plain `draft` run exported first (its held-out greedy
    # agreement was 0.51); once this one is shipped, re-running it would distil the distilled draft again
    # (the model card's Reproduce section gives the order). The run records both weights' sha256.
    "draft_kd": TrainConfig(
        "draft_kd", ModelShape(224, 2, 4, 608), steps=1500, lr=1e-3, warmup_steps=50, seed=1, bf16_autocast=True,
        teacher="default:target", init_from="default:draft", kd_weight=0.9,
    ),
    # Narrower alternative (compute ratio 0.08), evaluated but not shipped; see the model card.
    "draft128": TrainConfig("draft128", ModelShape(128, 2, 4, 352), steps=800, lr=3e-3, warmup_steps=60),
    # Seconds-long configuration for the reproducibility test.
    "tiny": TrainConfig(
        "tiny",
        ModelShape(32, 2, 2, 64, 128),
        steps=30,
        batch_size=4,
        seq_len=32,
        lr=3e-3,
        warmup_steps=5,
        threads=1,
        ckpt_every=10,
        max_train_docs=40,
        vocab_size=300,
    ),
}


def llama_config(shape: ModelShape, tokenizer: PreTrainedTokenizerBase) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_attention_heads,
        max_position_embeddings=shape.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def per_token_macs(config: LlamaConfig) -> int:
    """Weight-matmul multiply-adds per generated token, LM head included.

    The context-dependent attention-score term is left out: it is small at
    these context lengths and identical in form for both models.
    """
    h, i, v = config.hidden_size, config.intermediate_size, config.vocab_size
    head_dim = h // config.num_attention_heads
    kv = config.num_key_value_heads * head_dim
    per_layer = h * h * 2 + h * kv * 2 + 3 * h * i
    return config.num_hidden_layers * per_layer + h * v


def token_stream(texts: list[str], tokenizer: PreTrainedTokenizerBase) -> np.ndarray:
    """Concatenate documents, each followed by eos, into one uint16 id array."""
    eos = tokenizer.eos_token_id
    ids: list[int] = []
    for enc in tokenizer(texts, add_special_tokens=False)["input_ids"]:
        ids.extend(enc)
        ids.append(eos)
    return np.asarray(ids, dtype=np.uint16)


def batch_indices(step: int, n_blocks: int, batch_size: int, seed: int) -> np.ndarray:
    """Block indices of batch ``step``: a fresh seeded permutation per epoch."""
    start = step * batch_size
    out = []
    while len(out) < batch_size:
        epoch, offset = divmod(start + len(out), n_blocks)
        perm = np.random.default_rng([seed, epoch]).permutation(n_blocks)
        out.extend(perm[offset : offset + batch_size - len(out)].tolist())
    return np.asarray(out)


class Blocks:
    """Fixed-length training blocks cut from the token stream."""

    def __init__(self, stream: np.ndarray, seq_len: int):
        self.seq_len = seq_len
        self.n = (len(stream)) // seq_len
        self.data = torch.from_numpy(stream[: self.n * seq_len].astype(np.int64)).view(self.n, seq_len)

    def batch(self, step: int, batch_size: int, seed: int) -> torch.Tensor:
        return self.data[torch.from_numpy(batch_indices(step, self.n, batch_size, seed))]


def prepare_data(
    cfg: TrainConfig, run_dir: Path, tokenizer_dir: Path | None
) -> tuple[PreTrainedTokenizerBase, Blocks, dict]:
    """Load (or train, for tiny runs) the tokenizer and tokenize the training split, cached in run_dir."""
    corpus = build_corpus(cfg.max_train_docs)
    if tokenizer_dir is not None:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    else:
        tokenizer = train_tokenizer(corpus.train, cfg.vocab_size)
    key = hashlib.sha256(
        (corpus.manifest["content_sha256"] + str(cfg.max_train_docs) + str(len(tokenizer))).encode()
    ).hexdigest()[:16]
    cache = run_dir / f"tokens-{key}.npy"
    if cache.exists():
        stream = np.load(cache)
    else:
        stream = token_stream(corpus.train, tokenizer)
        np.save(cache, stream)
    manifest = dict(corpus.manifest, train_tokens=int(len(stream)))
    return tokenizer, Blocks(stream, cfg.seq_len), manifest


def model_dir(spec: str) -> Path:
    """A model directory from a recipe: "default:<name>" is a model shipped in the package."""
    if spec.startswith("default:"):
        from specdec.zoo import default_model_dir

        return Path(default_model_dir()) / spec.split(":", 1)[1]
    return Path(spec)


def load_weights(spec: str) -> tuple[LlamaForCausalLM, str]:
    """The float32 model at `spec` and the sha256 of its weights file (recorded: "default:draft" changes
    when a new draft is shipped)."""
    path = model_dir(spec)
    digest = hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()
    return LlamaForCausalLM.from_pretrained(path, dtype=torch.float32), digest


def distillation_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """Forward KL(teacher || student) per position, averaged: the student learns the whole next-token
    distribution the teacher will verify against, not only the corpus' next token."""
    student = torch.log_softmax(student_logits.float(), dim=-1)
    teacher = torch.log_softmax(teacher_logits.float(), dim=-1)
    return (teacher.exp() * (teacher - student)).sum(dim=-1).mean()


def _rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def _save_ckpt(path: Path, **payload) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def train(
    cfg: TrainConfig,
    run_dir: Path,
    tokenizer_dir: Path | None = None,
    stop_at: int | None = None,
    progress: bool = True,
) -> list[dict]:
    """Train (resuming from ``run_dir/ckpt.pt`` if present); return the loss log.

    ``stop_at`` ends the run early after that step, leaving a checkpoint, as
    an interrupted run would.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        return _train(cfg, run_dir, tokenizer_dir, stop_at, progress)
    finally:
        torch.set_num_threads(threads)


def _train(
    cfg: TrainConfig, run_dir: Path, tokenizer_dir: Path | None, stop_at: int | None, progress: bool
) -> list[dict]:
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    tokenizer, blocks, manifest = prepare_data(cfg, run_dir, tokenizer_dir)
    model = LlamaForCausalLM(llama_config(cfg.model, tokenizer))
    meta_extra: dict = {}
    ckpt_path = run_dir / "ckpt.pt"
    if cfg.init_from is not None and ckpt_path.exists():  # resuming: the start was recorded at the start
        meta_extra["init_from_sha256"] = json.loads((run_dir / "meta.json").read_text())["init_from_sha256"]
    elif cfg.init_from is not None:
        start, meta_extra["init_from_sha256"] = load_weights(cfg.init_from)
        model.load_state_dict(start.state_dict())
    teacher = None
    if cfg.teacher is not None:
        teacher, meta_extra["teacher_sha256"] = load_weights(cfg.teacher)
        teacher.eval().requires_grad_(False)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(0.9, 0.95),
    )
    scheduler = get_cosine_schedule_with_warmup(optimizer, cfg.warmup_steps, cfg.steps)
    cosine = scheduler.lr_lambdas[0]
    scheduler.lr_lambdas = [_floored(cosine, cfg.min_lr_ratio) for _ in optimizer.param_groups]

    step, log, elapsed = 0, [], 0.0
    if ckpt_path.exists():
        state = torch.load(ckpt_path, weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        # The schedule's shape comes from the config, so a run can be extended or shortened on resume.
        scheduler.lr_lambdas = [_floored(cosine, cfg.min_lr_ratio) for _ in optimizer.param_groups]
        step, log, elapsed = state["step"], state["log"], state["elapsed"]
        _set_rng_state(state["rng"])
    meta = {"config": asdict(cfg), "manifest": manifest, "params": model.num_parameters(), **meta_extra}
    meta["per_token_macs"] = per_token_macs(model.config)
    (run_dir / "meta.json").write_text(json.dumps(meta, indent=2))

    model.train()
    end = cfg.steps if stop_at is None else min(stop_at, cfg.steps)
    bar = tqdm(total=cfg.steps, initial=step, desc=cfg.name, disable=not progress)
    t0 = time.time() - elapsed
    while step < end:
        ids = blocks.batch(step, cfg.batch_size, cfg.seed)
        with torch.autocast(ids.device.type, dtype=torch.bfloat16, enabled=cfg.bf16_autocast):
            out = model(input_ids=ids, labels=ids)
            loss = out.loss
            if teacher is not None:
                with torch.no_grad():
                    teacher_logits = teacher(input_ids=ids).logits
                loss = (1 - cfg.kd_weight) * loss + cfg.kd_weight * distillation_loss(out.logits, teacher_logits)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        log.append(
            {
                "step": step,
                "loss": loss.item(),
                **({"next_token_loss": out.loss.item()} if teacher is not None else {}),
                "lr": scheduler.get_last_lr()[0],
                "tokens": step * cfg.batch_size * cfg.seq_len,
                "elapsed_s": round(time.time() - t0, 2),
            }
        )
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.3f}")
        if step % cfg.ckpt_every == 0 or step == end:
            _save_ckpt(
                ckpt_path,
                model=model.state_dict(),
                optimizer=optimizer.state_dict(),
                scheduler=scheduler.state_dict(),
                step=step,
                log=log,
                elapsed=time.time() - t0,
                rng=_rng_state(),
            )
            (run_dir / "loss.json").write_text(json.dumps(log))
    bar.close()
    if step >= cfg.steps:
        model.save_pretrained(run_dir / "final")
        tokenizer.save_pretrained(run_dir / "final")
    return log


class _floored:
    """Cosine multiplier that decays to ``floor`` instead of zero (picklable for checkpoints)."""

    def __init__(self, base, floor: float):
        self.base, self.floor = base, floor

    def __call__(self, step: int) -> float:
        return self.floor + (1.0 - self.floor) * self.base(step)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Train a bundled model (resumes from RUN_DIR/ckpt.pt).")
    parser.add_argument("preset", choices=sorted(PRESETS))
    parser.add_argument("--run-dir", type=Path, help="default: runs/<preset>")
    parser.add_argument("--tokenizer", type=Path, default=Path("runs/tokenizer"))
    parser.add_argument("--steps", type=int, help="override the preset's step count")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--threads", type=int)
    args = parser.parse_args(argv)
    overrides = {k: getattr(args, k) for k in ("steps", "seed", "threads") if getattr(args, k) is not None}
    cfg = replace(PRESETS[args.preset], **overrides)
    tok_dir = None if args.preset == "tiny" else args.tokenizer
    log = train(cfg, args.run_dir or Path("runs") / args.preset, tok_dir)
    if log:
        print(f"done: step {log[-1]['step']} loss {log[-1]['loss']:.4f} in {log[-1]['elapsed_s']:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
