#!/bin/sh
# The exact commands that produced the shipped PPD files and benchmarks/results/ppd (repo root, venv active,
# shared 2-core CPU, torch 1 thread). Training data: GSM8K *train* prose + Python stdlib packages (none of the
# zoo's held-out modules; never spec_bench / humaneval / gsm8k test).
SL=$(python -c "import sysconfig; print(sysconfig.get_paths()['stdlib'])")
# GSM8K train as shipped with specdec (the runs below read the same bytes from the project's data folder).
GSM=$(python -c "from specdec.data import data_file; print(data_file('gsm8k_train'))")
DATA="$GSM $SL/asyncio $SL/email $SL/logging $SL/http $SL/collections $SL/concurrent $SL/importlib $SL/xml $SL/urllib"

# /tmp/ppd_dev/{target_final,draft} = runs/{target,draft}/final exported exactly as specdec.tools.zoo.export does
# (bf16 round trip): the shipped weights (fingerprints checked equal), so training could start before the export.

# 1. prompt tokens for the default draft model (used by ppd_draft_model): 400 steps, ~3 min
specdec train-ppd --model /tmp/ppd_dev/draft --data $DATA --steps 400 --batch-size 8 --max-len 256 \
    --threads 1 --out /tmp/ppd_dev/ppd_draft_prompts.safetensors
# 2. prompt tokens for the default target. Started with --steps 700, stopped at the step-100 checkpoint when the
#    shared CPU slowed to ~5 s/step, resumed with a shorter cosine schedule (the schedule is recomputed on resume):
specdec train-ppd --model /tmp/ppd_dev/target_final --data $DATA --steps 700 --batch-size 8 --max-len 256 \
    --save-every 50 --threads 1 --out /tmp/ppd_dev/ppd_prompts.safetensors          # killed after step 100
specdec train-ppd --model /tmp/ppd_dev/target_final --data $DATA --steps 220 --batch-size 8 --max-len 256 \
    --save-every 20 --eval-samples 192 --threads 1 --resume --out /tmp/ppd_dev/ppd_prompts.safetensors
cp /tmp/ppd_dev/ppd_prompts.safetensors /tmp/ppd_dev/ppd_draft_prompts.safetensors specdec/zoo/default/
# 3. hardware profile on this machine (CPU, 1 thread) + plot
specdec profile --model default --threads 1 --repeats 15 --num-prompts 1 2 3 \
    --sizes 2 4 6 8 12 16 24 32 48 64 --plot benchmarks/results/ppd/profile.png
# 4. benchmark
python -m specdec.benchmarks.ppd_bench --out benchmarks/results/ppd --per-dataset 3 --threads 1   # run1: --per-dataset 4 with 220-step prompts
# 5. the same profile with 2 torch threads (the default on this machine), so drafter="ppd" with no options
#    finds an entry for a default Python session too (profiles are keyed by CPU model and thread count)
specdec profile --model default --threads 2 --repeats 15 --num-prompts 1 2 3 --sizes 2 4 6 8 12 16 24 32 48 64

# --- Session 2 (2026-11-23): the default target was retrained (MODEL_CARD.md), so the target's prompts were
# retrained on the new weights (machine mostly idle, 1 thread; ~2 it/s): 400 steps, then resumed to 1200.
# Held-out top-1 per distance [0.13, 0.083, 0.052], top-10 [0.438, 0.281, 0.214] (at 400 steps: 0.125/0.068/0.062).
# The draft is unchanged, so ppd_draft_prompts.safetensors stays. results.md / results.json above are from the
# session-1 target; the session-2 numbers for ppd are in benchmarks/results/spec_bench.
specdec train-ppd --model specdec/zoo/default/target --data $DATA --steps 400 --batch-size 8 --max-len 256 \
    --save-every 25 --eval-samples 192 --threads 1 --out runs/ppd/ppd_prompts.safetensors
specdec train-ppd --model specdec/zoo/default/target --data $DATA --steps 1200 --batch-size 8 --max-len 256 \
    --save-every 25 --eval-samples 192 --threads 1 --out runs/ppd/ppd_prompts.safetensors --resume
cp runs/ppd/ppd_prompts.safetensors specdec/zoo/default/
specdec profile --model default --threads 1 --repeats 15 --num-prompts 1 2 3 \
    --sizes 2 4 6 8 12 16 24 32 48 64 --plot benchmarks/results/ppd/profile.png   # m=1 n=2, expected 0.86x
specdec profile --model default --threads 2 --repeats 15 --num-prompts 1 2 3 --sizes 2 4 6 8 12 16 24 32 48 64

# --- Issue 23 (2026-11-24): the ablation (ablation/README.md) chose 4 EPTs + every anchor of one window per step;
# they are train-ppd's defaults now. Both shipped prompt files were retrained with the plain defaults (stdlib data,
# 400 steps), 1 thread on the shared 2-core VM, then scored against Medusa-1 heads given the same wall time.
specdec train-ppd --model default --threads 1 --save-every 25 --out /tmp/ppd23/ppd_prompts.safetensors          # 755 s
specdec train-ppd --model specdec/zoo/default/draft --threads 1 --save-every 25 --out /tmp/ppd23/ppd_draft_prompts.safetensors  # 147 s
cp /tmp/ppd23/ppd_prompts.safetensors /tmp/ppd23/ppd_draft_prompts.safetensors specdec/zoo/default/
python -m specdec.benchmarks.ppd_vs_medusa --model default --ppd-checkpoint specdec/zoo/default/ppd_prompts.safetensors \
    --out benchmarks/results/ppd/medusa
python -m specdec.benchmarks.ppd_vs_medusa --model specdec/zoo/default/draft \
    --ppd-checkpoint specdec/zoo/default/ppd_draft_prompts.safetensors --out benchmarks/results/ppd/medusa_draft
specdec profile --model default --threads 1 --repeats 15 --num-prompts 1 2 3 \
    --sizes 2 4 6 8 12 16 24 32 48 64 --plot benchmarks/results/ppd/profile.png
# the old prompts re-profiled beside them for comparison (--checkpoint OLD.safetensors): m=1 n=2, expected 0.84x vs 0.70x.
# NOT re-run (the machine was shared; 1 thread only): the 2-thread profile; its entry is flagged as stale.
