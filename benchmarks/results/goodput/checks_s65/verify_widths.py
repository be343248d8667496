"""Time the bundled target's verification forward (one row, a chain) at every width 1..13, not only at the cost
model's grid points, behind a short and a long cached prefix, on the cost model's clock: the median and the fastest of
interleaved rounds, raw (no monotone clean-up as in `measure_verify`). Whether a chain of 7 drafted nodes really costs
much more than one of 6, as the per-grid-point corrections learnt in a sweep said (stop 65's exit log).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/goodput/checks_s65/verify_widths.py
"""
import statistics

import torch

from specdec import costs
from specdec.draft import tree_layout
from specdec.target import TargetRunner
from specdec.zoo import load_default

torch.set_num_threads(1)
model = load_default().target
vocab = int(model.get_input_embeddings().weight.shape[0])
clock = costs.cost_clock("cpu")
generator = torch.Generator().manual_seed(0)
extras = range(13)
for context in (100, 1000):
    runner = TargetRunner(model, 1, context + 16)
    times: dict[int, list[float]] = {extra: [] for extra in extras}
    with torch.inference_mode():
        runner.prefill(torch.randint(0, vocab, (1, context), generator=generator), torch.full((1,), context))
        for round_index in range(13):
            for extra in extras:
                steps = extra + 1
                parents = (torch.arange(steps) - 1).clamp(min=0)[None]
                depths, visible = tree_layout(parents)
                ids = torch.randint(0, vocab, (1, steps), generator=generator)
                start = clock()
                runner.verify_forward(ids, depths, visible, valid=torch.ones(1, steps, dtype=torch.bool))
                if round_index:
                    times[extra].append(clock() - start)
    runner.release()
    print(f"context {context}: extra inputs -> median / fastest ms of 12 rounds")
    for extra in extras:
        print(f"  {extra:2d}: {1e3 * statistics.median(times[extra]):6.2f} / {1e3 * min(times[extra]):6.2f}")
