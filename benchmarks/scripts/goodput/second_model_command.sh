#!/bin/sh
# Issue 21's second model: a pair the drafters and the controller were never tuned on.
# Target: the bundled draft model used as a target (3.1M parameters, 2 layers, zoo recipe `draft_kd`),
# draft: a 128-wide 2-layer model trained for this run by the zoo recipe's `draft128` preset with another
# seed and a short budget (so another corpus order):
#   .venv/bin/python -m specdec.tools.zoo.train draft128 --run-dir /work/second/draft128 \
#       --tokenizer specdec/zoo/default/target --steps 150 --seed 5 --threads 1     # 355 s, loss 4.77
#   cp -r specdec/zoo/default/draft /work/second/target && rm /work/second/target/token_ranking.json
#   and "dtype": "float32" in its config.json (the bundled copy says bfloat16, and in bf16 even `none`
#   differed from transformers' greedy generate on 1 of 14 turns: near-ties flip with accumulation order)
# `none-again`: plain decoding again (an A/A cell), how far two cells doing the same work read apart in this run.
OMP_NUM_THREADS=1 specdec bench --preset quick --model /work/second/target --draft /work/second/draft128/final \
  --repeats 3 --threads 1 --baseline hf_generate \
  --drafter none --drafter none:label=none-again --drafter anpd --drafter anpd:schedule=constant \
  --drafter draft_model:model=@draft --drafter draft_model:model=@draft,schedule=heuristic \
  --out benchmarks/results/goodput/second_model --no-progress "$@"
