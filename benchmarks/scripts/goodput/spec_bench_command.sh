#!/bin/sh
# Spec-Bench, full preset, 5 prompts per category, 128 new tokens, 3 repeats. Every drafter under the
# goodput controller (its default) and, in the same run, with its own schedule as before issue 21 (the
# own-schedule cells: anpd constant, draft_model heuristic, layer_skip own, ppd profile, ppd_draft_model
# constant), plus drafter="auto". Ratios are taken against specdec `none` of the same run; `none-again` is
# plain decoding again (an A/A cell): how far two cells doing the same work read apart in this run.
# Targets: .venv/bin/python benchmarks/goodput_targets.py benchmarks/results/goodput/spec_bench
OMP_NUM_THREADS=1 specdec bench --preset full --per-category 5 --max-new-tokens 128 --repeats 3 --baseline hf_generate \
  --drafter none --drafter none:label=none-again --drafter anpd --drafter anpd:schedule=constant \
  --drafter draft_model:model=@draft --drafter draft_model:model=@draft,schedule=heuristic \
  --drafter layer_skip --drafter layer_skip:schedule=own \
  --drafter ppd --drafter ppd:schedule=profile \
  --drafter ppd_draft_model --drafter ppd_draft_model:schedule=constant \
  --drafter auto \
  --out benchmarks/results/goodput/spec_bench --no-progress "$@"
