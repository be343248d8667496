#!/bin/sh
# Stop 51's second GPU call (the device tool's `run`, carrying .whl, benchmarks/results/ moved out of the tree):
# the quick preset cut to one prompt per category and one repeat, bfloat16, the controller's drafters beside `none`.
# A functional check in ~2 minutes of a lease, not a speed measurement (see benchmarks/results/cuda/goodput_s51/).
set -u; export PYTHONUNBUFFERED=1
base=$(python3 -c "import site; print(site.getsitepackages()[0])")
python3 -m venv /tmp/v && echo "$base" > /tmp/v/lib/python3.12/site-packages/base.pth
/tmp/v/bin/pip install -q --no-index --no-deps .whl/*.whl && /tmp/v/bin/pip install -q --no-index --no-deps --no-build-isolation -e . > /dev/null
timeout 140 /tmp/v/bin/specdec bench --preset quick --per-category 1 --device cuda --dtype bfloat16 --repeats 1 --no-progress --baseline hf_generate --drafter none --drafter anpd --drafter draft_model:model=@draft --drafter layer_skip --drafter auto --out $OUT/q > $OUT/quick.log 2>&1
grep -v "Loading weights" $OUT/quick.log | tail -12
