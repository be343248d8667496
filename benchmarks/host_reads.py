"""Count reads of tensor data into Python: each one is a device synchronisation on a GPU.

    python -m specdec.benchmarks.host_reads [--where]

prints the reads per decoding step of `none`, `anpd` and `draft_model` chains (`tests/test_host_reads.py`
holds them to issue 20's budget of 2).

On this CPU a tensor's data is already on the host, so a read is recognised by what asks for it:
- at the Python level (`TorchFunctionMode`): `tolist`, `numpy`, `cpu` and `to("cpu")`, which copy a
  device tensor to the host without passing through an aten kernel the dispatcher would see, and scalar
  reads (`item`, `int(t)`, `bool(t)`, `float(t)`, `t` as an index);
- at the dispatch level (`TorchDispatchMode`): `_local_scalar_dense` (`item`, `int(t)`, `bool(t)`),
  `equal`, and ops whose output size depends on the data (`nonzero`, boolean indexing, `masked_select`,
  `unique`, `repeat_interleave` without `output_size`).
Host-to-device copies (`torch.tensor(list)`, `.to(device)` of host data) are not reads.
"""

from __future__ import annotations

import argparse
import traceback
from collections import Counter
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

_PYTHON_READS = {"tolist", "numpy", "__array__", "cpu"}
# Scalar reads, also caught here: under `torch.inference_mode` `_local_scalar_dense` does not reach the mode.
_SCALAR_READS = {"item", "__bool__", "__int__", "__float__", "__index__"}
_DISPATCH_READS = {
    "aten._local_scalar_dense.default", "aten.equal.default", "aten.nonzero.default", "aten.masked_select.default",
    "aten._unique2.default", "aten.unique_consecutive.default", "aten.unique_dim.default",
}


def _to_host(args: tuple, kwargs: dict) -> bool:
    """`tensor.to("cpu")`: the explicit copy to the host. `.to(device)` with a device object is a copy *to*
    the model's device, which on this CPU is the host too: it cannot be told apart here and is not counted."""
    return "cpu" in args[1:] or kwargs.get("device") == "cpu"


class _Tally:
    """The reads counted in one block, by kind (and optionally by the line of specdec that made them), shared by
    the two modes below."""

    def __init__(self, where: Counter | None) -> None:
        self.counts: Counter = Counter()
        self.where = where
        self.in_scalar_read = False  # a Python-level scalar read is running: its `_local_scalar_dense` is counted

    def record(self, kind: str) -> None:
        self.counts[kind] += 1
        if self.where is None:
            return
        for frame in reversed(traceback.extract_stack()[:-2]):  # the innermost frame in specdec's own code
            if "/specdec/" in frame.filename or "/drafters/" in frame.filename or "/verifiers/" in frame.filename:
                self.where[f"{kind} {frame.filename.rsplit('/', 2)[-2]}/{frame.filename.rsplit('/', 1)[-1]}:"
                           f"{frame.lineno} {frame.name}"] += 1
                return
        self.where[f"{kind} (outside specdec)"] += 1


class _PythonReads(TorchFunctionMode):
    def __init__(self, tally: _Tally) -> None:
        super().__init__()
        self.tally = tally

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in _PYTHON_READS or (name == "to" and _to_host(args, kwargs)):
            self.tally.record(name)
        elif name in _SCALAR_READS:
            self.tally.record(name)
            self.tally.in_scalar_read = True
            try:
                return func(*args, **kwargs)
            finally:
                self.tally.in_scalar_read = False
        return func(*args, **kwargs)


class _DispatchReads(TorchDispatchMode):
    def __init__(self, tally: _Tally) -> None:
        super().__init__()
        self.tally = tally

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func)
        if name == "aten._local_scalar_dense.default" and self.tally.in_scalar_read:
            pass  # counted at the Python level
        elif name in _DISPATCH_READS or (name == "aten.repeat_interleave.Tensor" and kwargs.get("output_size") is None):
            self.tally.record(name)
        elif name == "aten.index.Tensor" and any(
                isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] or ())):
            self.tally.record("boolean index")
        return func(*args, **kwargs)


@contextmanager
def counting_host_reads(where: Counter | None = None):
    """Yields a Counter of the reads made inside the block, by kind; `where` (optional) counts them by the
    line of specdec that made them."""
    tally = _Tally(where)
    with _PythonReads(tally), _DispatchReads(tally):
        yield tally.counts


def reads_per_step(model: Any, prompts: list[list[int]], drafter: str, options: dict | None, controller: bool,
                   new_tokens: int, eos_token_id: int | None = None, **generate_options: Any
                   ) -> tuple[list[int], Counter, Any]:
    """Reads of each decoding step of one `specdec.generate` call (greedy and the exact verifier unless
    `generate_options` say otherwise: verifier, temperature, seed...), all of them by the line that made them,
    and the call's output."""
    import specdec
    from specdec.engine import SpeculativeEngine

    step = SpeculativeEngine._step
    per_step: list[int] = []
    where: Counter = Counter()

    def counted(self, *args, **kwargs):
        with counting_host_reads(where) as counts:
            finished = step(self, *args, **kwargs)
        per_step.append(sum(counts.values()))
        return finished

    SpeculativeEngine._step = counted
    try:
        out = specdec.generate(model, prompts, drafter=drafter, drafter_options=options,
                               max_new_tokens=new_tokens, controller=controller, eos_token_id=eos_token_id,
                               **{"verifier": "exact", **generate_options})
    finally:
        SpeculativeEngine._step = step
    return per_step, where, out


def main(argv: list[str] | None = None) -> int:
    """Reads per decoding step of `none`, `anpd`, `draft_model` and `auto` (greedy, exact verifier) at batch 1
    and 8, with the controller and with each drafter's own rule, on a tiny random Llama (GQA: 4 query heads,
    2 KV heads) whose draft model is a copy of itself (every draft accepted, so chains run full length)."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--where", action="store_true", help="list the reads by the line that made them")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    from transformers import LlamaConfig, LlamaForCausalLM

    def build() -> LlamaForCausalLM:
        torch.manual_seed(0)
        config = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
        model = LlamaForCausalLM(config).eval()
        model.generation_config.eos_token_id = None
        return model

    model = build()
    prompts = [[5, 6, 7, 5, 6, 7, 5, 6], [1, 2, 3, 4, 1, 2, 3, 4, 1, 2], [9, 8, 9, 8, 9, 8], [40, 41, 42, 40, 41],
               [3, 4, 5, 6, 3, 4], [7, 7, 7, 7, 8], [10, 11, 12, 10, 11, 12], [20, 21, 20, 21, 20]]
    print("| drafter | batch | controller | steps | reads per step (mean) | most in a step |")
    print("|---|---|---|---|---|---|")
    for drafter in ("none", "anpd", "draft_model", "auto"):
        options = {"model": build()} if drafter == "draft_model" else {"draft": build()} if drafter == "auto" else None
        for batch in (1, 8):
            for controller in (True, False) if drafter != "auto" else (True,):  # auto is the controller's
                per_step, where, _ = reads_per_step(model, prompts[:batch], drafter, options, controller,
                                                 args.new_tokens, eos_token_id=95)
                print(f"| {drafter} | {batch} | {'on' if controller else 'own rule'} | {len(per_step)} | "
                      f"{sum(per_step) / len(per_step):.1f} | {max(per_step)} |")
                if args.where:
                    for line, count in where.most_common():
                        print(f"|   | | | | {count / len(per_step):.2f} | {line} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
