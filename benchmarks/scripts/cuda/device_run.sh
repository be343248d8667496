#!/bin/sh
# The CUDA checks of benchmarks/results/cuda/, as stop 43 ran them on a lent H100 (see its README).
#
# Here (a machine with the package registries), once: the wheels the GPU machine's image lacks or has too old
# (its python3 is 3.12 with torch, numpy, scipy, scikit-learn, tokenizers, safetensors, hypothesis, pytest-xdist):
#     echo /.whl/ >> .git/info/exclude
#     sh benchmarks/scripts/cuda/device_run.sh fetch
# There (the device tool's `run`, carrying .whl; nothing can be fetched there), in the repository's root:
#     sh benchmarks/scripts/cuda/device_run.sh suite     # the suite on the GPU in float32 and bfloat16 (~6 min)
#     sh benchmarks/scripts/cuda/device_run.sh quick     # the quick preset in bfloat16 (~4 min)
#     sh benchmarks/scripts/cuda/device_run.sh profile   # benchmarks/scripts/cuda/profile_step.py (~2 min)
#     sh benchmarks/scripts/cuda/device_run.sh goodput   # stop 51: issue 21's tests on the GPU in bfloat16 (~1 min
#                                                        # on an H200), then the quick preset cut to one prompt per
#                                                        # category and one repeat (~1.5 min): lossless, not a speed
#                                                        # reading (benchmarks/results/cuda/goodput_s51/)
# Each writes its logs under $OUT. The working tree that travels must stay under 64 MiB: stop 43 moved
# benchmarks/results/ out of the tree for its calls (the bundled weights and the wheels fill the rest).
set -eu
case "${1:-}" in
fetch)
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
    transformers==5.24.0 pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
    typing_extensions==4.16.0 bayesian-optimization==3.4.0
  exit 0 ;;
suite|quick|profile|goodput) ;;
*) echo "usage: $0 fetch|suite|quick|profile|goodput" >&2; exit 2 ;;
esac
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
if [ ! -x /tmp/v/bin/specdec ]; then  # a venv over the image's packages, the wheels and specdec (editable) on top
  base=$(python3 -c "import site; print(site.getsitepackages()[0])")
  python3 -m venv /tmp/v
  echo "$base" > /tmp/v/lib/python3.12/site-packages/base.pth
  /tmp/v/bin/pip install -q --no-index --no-deps .whl/*.whl
  /tmp/v/bin/pip install -q --no-index --no-deps --no-build-isolation -e . > /dev/null
fi
case "$1" in
suite)
  for dtype in float32 bfloat16; do
    SPECDEC_TEST_DEVICE=cuda SPECDEC_TEST_DTYPE=$dtype timeout 280 /tmp/v/bin/python -m pytest -q -p no:cacheprovider \
      --timeout 300 -n 12 -rf tests > "$OUT/suite_cuda_$dtype.txt" 2>&1 || true
    tail -3 "$OUT/suite_cuda_$dtype.txt"
  done ;;
quick)
  timeout 280 /tmp/v/bin/specdec bench --preset quick --device cuda --dtype bfloat16 --out /tmp/quick --no-progress \
    > /tmp/quick.log 2>&1 || true
  tail -20 /tmp/quick.log
  tar czf "$OUT/quick_bf16.tgz" -C /tmp quick quick.log ;;
profile)
  timeout 280 /tmp/v/bin/python benchmarks/scripts/cuda/profile_step.py --tokens 64 > "$OUT/profile_step.txt" 2>&1 || true
  head -6 "$OUT/profile_step.txt" ;;
goodput)
  SPECDEC_TEST_DEVICE=cuda SPECDEC_TEST_DTYPE=bfloat16 timeout 200 /tmp/v/bin/python -m pytest -q -p no:cacheprovider \
    -n 12 -rf tests/test_controller.py tests/test_continuous_batching.py tests/test_determinism.py \
    tests/test_on_device.py > "$OUT/tests_cuda_bf16.txt" 2>&1 || true
  tail -3 "$OUT/tests_cuda_bf16.txt"
  timeout 140 /tmp/v/bin/specdec bench --preset quick --per-category 1 --device cuda --dtype bfloat16 --repeats 1 \
    --no-progress --baseline hf_generate --drafter none --drafter anpd --drafter draft_model:model=@draft \
    --drafter layer_skip --drafter auto --out "$OUT/q" > "$OUT/quick.log" 2>&1 || true
  grep -v "Loading weights" "$OUT/quick.log" | tail -12 ;;
esac
