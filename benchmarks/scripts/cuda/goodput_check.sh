#!/bin/sh
# Issue 21's checks on a lent GPU, in one call (stop 51): the controller, continuous-batching and determinism tests
# and the on-device greedy tests on CUDA in bfloat16, then the quick preset in bfloat16 with the controller's drafters
# beside `none` (is any drafter slower than plain decoding on a GPU?). Prepare here as for device_run.sh (the wheels
# in .whl, benchmarks/results/ moved out of the tree so that it travels under 64 MiB); there, with the device tool:
#     sh benchmarks/scripts/cuda/goodput_check.sh        (carry .whl)
# On an H200 the tests took 54 s; the bench's 10 cells x 3 repeats did not finish in its 300 s (only the
# hf_generate reference did): quick_small.sh is the bench cut to fit a lease.
# Logs and the bench folder (a tarball: at most 8 files come back) land under $OUT.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/env.txt" 2>&1
python3 -c "import torch, sys; print(sys.version.split()[0], torch.__version__)" >> "$OUT/env.txt" 2>&1
base=$(python3 -c "import site; print(site.getsitepackages()[0])")
python3 -m venv /tmp/v && echo "$base" > /tmp/v/lib/python3.12/site-packages/base.pth
/tmp/v/bin/pip install -q --no-index --no-deps .whl/*.whl
/tmp/v/bin/pip install -q --no-index --no-deps --no-build-isolation -e . > /dev/null
/tmp/v/bin/python -c "import transformers, pydantic; print('transformers', transformers.__version__)" >> "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
SPECDEC_TEST_DEVICE=cuda SPECDEC_TEST_DTYPE=bfloat16 timeout 200 /tmp/v/bin/python -m pytest -q -p no:cacheprovider \
  -n 12 -rf tests/test_controller.py tests/test_continuous_batching.py tests/test_determinism.py \
  tests/test_on_device.py > "$OUT/tests_cuda_bf16.txt" 2>&1
tail -4 "$OUT/tests_cuda_bf16.txt"
timeout 300 /tmp/v/bin/specdec bench --preset quick --device cuda --dtype bfloat16 --repeats 3 --no-progress \
  --baseline hf_generate --drafter none --drafter anpd --drafter draft_model:model=@draft --drafter layer_skip \
  --drafter ppd --drafter ppd_draft_model --drafter auto --drafter anpd:schedule=constant \
  --drafter draft_model:model=@draft,schedule=heuristic --out /tmp/quick_cuda_bf16 > "$OUT/quick.log" 2>&1
tail -16 "$OUT/quick.log"
tar czf "$OUT/quick_cuda_bf16.tgz" -C /tmp quick_cuda_bf16
