#!/usr/bin/env bash
# tools/power_sums_ab.sh A_TREE B_TREE ROUNDS THREADS RUNS: an interleaved A/B of PowerSums
# (forward, backward) at the seed shapes in two built trees (source trees after
# `setup.py build_ext --inplace`, or copies of their manaka/ folder): each round runs
# tools/power_sums_cpu_time.py once per tree, in the order A B, then B A, ..., so load from
# other processes falls on both alike. Prints the floors first (manaka.bench.floors and
# its cpu_rates, as tree B has them: B is the "after" tree, from this checkout), then one
# line per run: tree, round, median process CPU ms of each direction, load.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
A=$(cd "$1" && pwd); B=$(cd "$2" && pwd); R=${3:-4}; TH=${4:-1}; N=${5:-15}
PY=${PYTHON:-python}
echo "floors: $(PYTHONPATH="$B" "$PY" "$HERE/power_sums_cpu_time.py" "$TH" 1 --floor)"
run() { echo "$1 r$2 th$TH $(PYTHONPATH="$1" nice "$PY" "$HERE/power_sums_cpu_time.py" "$TH" "$N")"; }
for r in $(seq 1 "$R"); do
    if [ $((r % 2)) = 1 ]; then run "$A" "$r"; run "$B" "$r"; else run "$B" "$r"; run "$A" "$r"; fi
done
