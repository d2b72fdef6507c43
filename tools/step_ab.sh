#!/usr/bin/env bash
# tools/step_ab.sh A_TREE B_TREE ROUNDS THREADS RUNS [MODE]: an interleaved A/B of the seed
# training step of two built trees (source trees after `setup.py build_ext --inplace`, or
# copies of their manaka/ folder): each round runs tools/step_cpu_time.py once per tree, in
# the order A B, then B A, ..., so load from other processes falls on both alike. Prints
# one line per run: tree, round, threads, mode, median wall and CPU ms per step, load.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
A=$(cd "$1" && pwd); B=$(cd "$2" && pwd); R=${3:-4}; TH=${4:-1}; N=${5:-7}; MODE=${6:-dense}
PY=${PYTHON:-python}
run() { echo "$1 r$2 th$TH $MODE $(PYTHONPATH="$1" nice "$PY" "$HERE/step_cpu_time.py" "$TH" "$N" "$MODE")"; }
for r in $(seq 1 "$R"); do
    if [ $((r % 2)) = 1 ]; then run "$A" "$r"; run "$B" "$r"; else run "$B" "$r"; run "$A" "$r"; fi
done
