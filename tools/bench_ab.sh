#!/usr/bin/env bash
# tools/bench_ab.sh A_TREE B_TREE [ROUNDS]: an interleaved A/B of two in-place builds of
# manaka (source trees where `python setup.py build_ext --inplace` has run), e.g. before
# and after a change to csrc/cpu/gemm.c. Each round runs `python -m manaka.bench gemm` and
# `python -m manaka.bench step --no-torch` once per tree, in the order A B, then B A, ...,
# so load from other processes falls on both alike. THREADS=n sets the GEMM suite's threads.
# SKIP_STEP=1 skips the step suite. Prints one line per run: tree, round,
# the GEMM total (ms, the suite's last line) and the step's median (ms). Nothing is written.
set -euo pipefail
A=$(cd "$1" && pwd); B=$(cd "$2" && pwd); ROUNDS=${3:-4}
PY=${PYTHON:-python}
run() {  # tree round
    local gemm step
    gemm=$(cd "$1" && PYTHONPATH="$1" "$PY" -m manaka.bench gemm --no-write --runs 5 \
        --threads "${THREADS:-0}" | awk '/^total/ {printf "%s ", $NF}')
    step=-
    [ "${SKIP_STEP:-0}" = 1 ] || step=$(cd "$1" && PYTHONPATH="$1" "$PY" -m manaka.bench step --no-torch --no-write \
        --runs 5 --head-runs 0 | awk '/^manaka step/ {split(substr($0, 46), f, " "); print f[1]}')
    echo "$1 round $2 gemm_total_cpu_ms,wall_ms $gemm step_median_ms $step"
}
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then run "$A" "$r"; run "$B" "$r"; else run "$B" "$r"; run "$A" "$r"; fi
done
