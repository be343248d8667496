"""Stop 77: anpd in continuous batches of B with one fresh cost model, call after call beside plain decoding
(its own cost model): each call's CPU seconds, their ratio, the batch steps, and the seconds the cost model has
spent measuring verification curves so far, with the curves it holds. `before`: the engine's `_ensure` as it was
until f3c4194 (curves for B and B - 1 rows, measured as the batch first reaches each size).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s77/first_calls.py 8 4 [before]
"""

import sys
import time

import torch
from specdec.benchmarks.batching import load_prompts, run_cell

import specdec
import specdec.costs as costs
from specdec import engine

torch.set_num_threads(1)
B, calls = int(sys.argv[1]), int(sys.argv[2])
if sys.argv[3:] == ["before"]:

    def ensure_before(self, model_costs, target, batch):
        batches = [batch, batch - 1] if batch > 1 else [batch]
        return model_costs.ensure(
            self.model, batches, target.packed_inputs, target.padded, costs.LONG_CONTEXT, self.context
        )

    def measure_before(self, controller, target, batch, stats):
        if not controller.live or batch in self._measured:
            return
        self._measured.add(batch)
        started, cpu_started = time.perf_counter(), time.process_time()
        if self._ensure(controller.model_costs, target, batch):
            stats.prefill_time += time.perf_counter() - started
            stats.setup_cpu_time += time.process_time() - cpu_started

    engine.SpeculativeEngine._ensure = ensure_before
    engine.SpeculativeEngine._measure = measure_before
pair = specdec.load_default()
target, tok = pair.target, pair.tokenizer
prompts = load_prompts(tok, target.config.max_position_embeddings, 16, 64, 384)
device = costs.device_key(next(target.parameters()).device)
anpd_costs, none_costs = costs.CostModel(device), costs.CostModel(device)
for call in range(calls):
    started = time.process_time()
    run_cell(target, prompts, "continuous", "none", {}, 64, max_batch_size=B, cost_model=none_costs)
    plain = time.process_time() - started
    started = time.process_time()
    out = run_cell(target, prompts, "continuous", "anpd", {}, 64, max_batch_size=B, cost_model=anpd_costs)
    spent = time.process_time() - started
    curves = sorted(bucket for _, bucket in anpd_costs.live.curves)
    print(
        f"call {call}: none {plain:.2f} s, anpd {spent:.2f} s, ratio {plain / spent:.3f}, "
        f"batch steps {out.stats.batch_steps}; measured so far {anpd_costs.measure_seconds:.2f} s, "
        f"curves for {curves} rows",
        flush=True,
    )
