#!/bin/sh
# The spec_bench run's `none` cell shared the CPU with the test suite (ppd, 100% plain steps there,
# measured 1.04x of it): the cells whose ratios decide issue 21's targets measured again, side by side,
# with only one other job on the machine.
OMP_NUM_THREADS=1 specdec bench --preset full --per-category 5 --max-new-tokens 128 --repeats 3 --baseline hf_generate \
  --drafter none --drafter anpd --drafter anpd:schedule=constant --drafter ppd \
  --drafter draft_model:model=@draft --drafter draft_model:model=@draft,schedule=heuristic \
  --out benchmarks/results/goodput/spec_bench_recheck --no-progress "$@"
