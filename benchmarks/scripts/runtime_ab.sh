#!/bin/sh
# No-slowdown A/B of a runtime change (issue 20): a baseline checkout against this one, alternating
# processes so drift on a shared machine hits both alike. Run it alone on the machine.
#   BASE=/path/to/baseline-checkout BASE_PY=/path/to/its/venv/bin NEW_PY=.venv/bin OUT=runs/runtime_ab \
#     sh benchmarks/scripts/runtime_ab.sh
# EO_ROUNDS (7) and QUICK_ROUNDS (2) set the rounds. Each checkout must be installed (editable) in its own
# venv. Writes OUT/eo_<side>_<round>/ (engine overhead:
# specdec `none` against transformers' generate in one process) and OUT/quick_<side>_<round>/ (the quick
# preset). Compare with the ratios inside each process (they cancel the drift between processes).
set -e
NEW=$(pwd)
: "${BASE:?the baseline checkout}" "${BASE_PY:?its venv bin folder}" "${NEW_PY:=$NEW/.venv/bin}" "${OUT:=runs/runtime_ab}"
: "${EO_ROUNDS:=7}" "${QUICK_ROUNDS:=2}"
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
for round in $(seq 1 "$EO_ROUNDS"); do
  for side in base new; do
    if [ $side = base ]; then DIR=$BASE PY=$BASE_PY; else DIR=$NEW PY=$NEW_PY; fi
    (cd "$DIR" && OMP_NUM_THREADS=1 "$PY/python" -m specdec.benchmarks.engine_overhead --repeats 5 --threads 1 \
      --out "$OUT/eo_${side}_$round" > "$OUT/eo_${side}_$round.log" 2>&1)
  done
done
for round in $(seq 1 "$QUICK_ROUNDS"); do
  for side in base new; do
    if [ $side = base ]; then DIR=$BASE PY=$BASE_PY; else DIR=$NEW PY=$NEW_PY; fi
    (cd "$DIR" && OMP_NUM_THREADS=1 "$PY/specdec" bench --preset quick --fresh --out "$OUT/quick_${side}_$round" \
      > "$OUT/quick_${side}_$round.log" 2>&1)
  done
done
