#!/usr/bin/env bash
# tools/gpu_check.sh: the one run a GPU gets (docs/gpu.md). Figures first, each written to
# OUTDIR the moment it exists; every step under its own time limit; 8 minutes in all on one
# H200, the build included.
#
#   tools/gpu_check.sh OUTDIR                    the device run (needs nvidia-smi and nvcc)
#   tools/gpu_check.sh --rehearse OUTDIR         the same steps here, without a GPU: a copy of
#                                                the tree, the carried wheels only, the build, the
#                                                GPU tests and benchmarks on the CUDA emulator
#   tools/gpu_check.sh --rehearse --cheap OUTDIR seconds: argument parsing (--dry-run), test
#                                                collection, the carried-wheel check, the time
#                                                limits and the files written (what CI runs)
#   tools/gpu_check.sh --fetch                   downloads the carried wheels into ./.whl (here,
#                                                with network; the device machine has none)
#   tools/gpu_check.sh --check-wheels [DIR]      checks a wheel folder (default ./.whl) and exits
#
# WHAT TO CARRY: the device image (Python 3.12 with numpy, pytest, setuptools, torch, cupy,
# tqdm, hypothesis) lacks scipy-openblas32, which manaka needs to build and import. Once, here:
#     echo /.whl/ >> .git/info/exclude; tools/gpu_check.sh --fetch
# then name `.whl` in the run's carry and run `tools/gpu_check.sh "$OUT"` with timeout_s 540.
# A wheel is installed (pip --no-index --no-deps --target, never into the image's own
# environment, which may not be writable) only for a module the image cannot import.
#
# Order of the device run (limit in seconds, capped by the budget left):
#   preflight 20, wheels 10, install 60, build 240 (this GPU's arch only, nvcc in parallel),
#   probe 30, gpu-tests 120 (the GPU test files alone, -x; a failure is recorded and the
#   benchmarks run anyway), step-fp32 90, step-tf32 60 (bench step --device cuda, no torch;
#   bf16 moments and a batch already on the GPU are rows of each), pair-update 60 (bench step
#   --pair-update dense,sparse,lazy: the step with each pair-table update), move-update 60
#   (bench step --move-update dense,sparse on the shipped example games), nccl-ddp 60
#   (tools/nccl_check.py: Trainer(process_group=NCCL) on 2 GPUs, a group of one on 1), kernel-profile 60,
#   ops 90 (bench ops --device cuda, no torch.compile), torch-baselines 150 (bench step with
#   PyTorch eager and torch.compile beside manaka), step-torch-module 120 (bench step_torch
#   --device cuda: manaka.torch), full-suite (whatever is left).
#
# Writes to OUTDIR (at most 8 files, the device tool's limit): gpu_check.log (everything),
# gpu_check.json (each step's status and time, the headline figures; rewritten after every
# step), results.tar (every benchmark's .json/.md and pytest's XML; repacked after every
# step), step-cuda.md (the headline table, once it exists). Exit status 0 when every step
# that ran passed, 1 otherwise, 2 for a usage error or no GPU.
set -u -o pipefail

MODE=device
CHEAP=0
while [ $# -gt 0 ]; do
    case "$1" in
        --rehearse) MODE=rehearse ;;
        --cheap) CHEAP=1 ;;
        --fetch) MODE=fetch ;;
        --check-wheels) MODE=check-wheels ;;
        -h|--help) sed -n '2,38p' "$0"; exit 0 ;;
        -*) echo "gpu_check: unknown option $1 (see --help)" >&2; exit 2 ;;
        *) break ;;
    esac
    shift
done
if [ $CHEAP -eq 1 ] && [ $MODE != rehearse ]; then
    echo "gpu_check: --cheap goes with --rehearse" >&2; exit 2
fi
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
WHL=${GPU_CHECK_WHEELS:-$REPO/.whl}
# Modules the device image lacks or may lack, and the wheel of each.
CARRIED="scipy_openblas32:scipy-openblas32 tqdm:tqdm hypothesis:hypothesis sortedcontainers:sortedcontainers attrs:attrs"

# check_wheels DIR: every carried wheel the device may need is in DIR, for CPython 3.12 on
# x86-64 Linux (or pure Python), one version of each.
check_wheels() {
    local dir=$1 pair wheel n missing=0
    if [ ! -d "$dir" ]; then
        echo "no wheel folder $dir: run tools/gpu_check.sh --fetch here, then carry .whl"
        return 1
    fi
    for pair in $CARRIED; do
        wheel=${pair%%:*}
        n=$(ls "$dir" | grep -E "^${wheel}-[^-]+-([a-z0-9]+\.)*(py3|cp312)-(none|abi3|cp312)-(any|manylinux[_0-9a-z]*x86_64(\.manylinux[_0-9a-z]*x86_64)*)\.whl$" | wc -l)
        if [ "$n" -eq 1 ]; then
            echo "$wheel: $(ls "$dir" | grep -E "^${wheel}-" | head -1)"
        else
            echo "$wheel: $n wheels for CPython 3.12 on x86-64 Linux in $dir (need exactly 1)"
            missing=1
        fi
    done
    return $missing
}

if [ $MODE = check-wheels ]; then
    check_wheels "${1:-$WHL}"
    exit $?
fi

if [ $MODE = fetch ]; then
    mkdir -p "$WHL"
    for pair in $CARRIED; do
        "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
            -d "$WHL" "${pair#*:}" || exit 1
    done
    ls -l "$WHL"
    exit 0
fi

OUT=${1:?usage: tools/gpu_check.sh [--rehearse [--cheap]] OUTDIR | --fetch}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
LOG="$OUT/gpu_check.log"
: >"$LOG"
exec > >(tee -a "$LOG") 2>&1
START=$(date +%s)
# The whole run, build included: 8 minutes on the device; a rehearsal on a shared CPU
# machine compiles and emulates far slower, and proves the order, not the times.
BUDGET=${GPU_CHECK_BUDGET_S:-$([ $MODE = device ] && echo 480 || echo 1200)}
RESERVE=10                           # kept for the last packing
W=$(mktemp -d)                       # results, packed into OUTDIR/results.tar after each step
STEPS="$W/steps.jsonl"
: >"$STEPS"
SITE="$W/site"                       # where carried wheels are installed
FAILED=0
SCALE=1                              # a full rehearsal multiplies each step's limit (below)
trap 'rm -rf "$W"' EXIT

elapsed() { echo $(($(date +%s) - START)); }

# pack: results.tar, gpu_check.json and step-cuda.md in OUTDIR, replaced atomically.
pack() {
    tar -C "$W" -cf "$OUT/results.tar.part" --exclude=./site --exclude=./tree --exclude=./block . 2>/dev/null &&
        mv "$OUT/results.tar.part" "$OUT/results.tar"
    [ -f "$W/bench/step-cuda.md" ] && cp "$W/bench/step-cuda.md" "$OUT/step-cuda.md"
    "$PY" - "$W" "$OUT/gpu_check.json" "$MODE" "$CHEAP" "$(elapsed)" "$BUDGET" "$FAILED" <<'PYEOF' || true
import glob, json, os, sys
w, dest, mode, cheap, elapsed, budget, failed = sys.argv[1:]
steps = [json.loads(line) for line in open(os.path.join(w, "steps.jsonl"))]
summary = {"mode": mode + (" --cheap" if cheap == "1" else ""), "elapsed_s": int(elapsed), "budget_s": int(budget),
           "passed": failed == "0", "steps": steps, "headline": {}}
for path in sorted(glob.glob(os.path.join(w, "bench", "*.json"))):
    try:
        r = json.load(open(path))
    except ValueError:
        continue
    name = os.path.basename(path)[:-5]
    head = {k: r[k]["median_ms"] for k in r if isinstance(r[k], dict) and "median_ms" in r[k]}
    for k in ("launches_per_step", "gpu_ops_per_step", "gpu_us_per_step", "wall_ms_per_step"):
        if k in r:
            head[k] = r[k]
    summary["headline"][name] = head
with open(dest + ".part", "w") as f:
    json.dump(summary, f, indent=1)
os.replace(dest + ".part", dest)
PYEOF
}

# step NAME CAP_S COMMAND...: runs COMMAND under `timeout` with the smaller of CAP_S and the
# budget left; skipped (and said so) when under 10 s are left. Records its status, then packs.
step() {
    local name=$1 cap=$(($2 * SCALE)) left limit t0 rc status
    shift 2
    left=$((BUDGET - RESERVE - $(elapsed)))
    limit=$((cap < left ? cap : left))
    if [ $left -lt 10 ]; then
        echo "=== [$(elapsed)s] $name: skipped, ${left}s of the budget left"
        printf '{"step": "%s", "status": "skipped", "rc": null, "seconds": 0, "limit_s": %d}\n' "$name" "$limit" >>"$STEPS"
        pack
        return 0
    fi
    echo
    echo "=== [$(elapsed)s] $name (limit ${limit}s): $*"
    t0=$(date +%s)
    timeout --kill-after=5 "$limit" "$@"
    rc=$?
    case $rc in 0) status=passed ;; 124|137) status=timed-out ;; *) status=failed ;; esac
    echo
    echo "=== [$(elapsed)s] $name: $status (exit status $rc) after $(($(date +%s) - t0))s"
    printf '{"step": "%s", "status": "%s", "rc": %d, "seconds": %d, "limit_s": %d}\n' "$name" "$status" "$rc" \
        $(($(date +%s) - t0)) "$limit" >>"$STEPS"
    [ $rc -eq 0 ] || FAILED=1
    pack
    return $rc
}

# install_missing: a carried wheel for each module this Python cannot import, into $SITE.
install_missing() {
    local pair wheels=()
    for pair in $CARRIED; do
        if "$PY" -c "import ${pair%%:*}" 2>/dev/null; then
            echo "${pair%%:*}: already importable"
        else
            wheels+=("$(ls "$WHL"/${pair%%:*}-*.whl | head -1)")
        fi
    done
    [ ${#wheels[@]} -eq 0 ] && return 0
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "${wheels[@]}" &&
        for pair in $CARRIED; do "$PY" -c "import ${pair%%:*}" || return 1; done
}

GPU_TESTS="tests/cuda/test_cuda_ops.py tests/cuda/test_device_array.py tests/cuda/test_cuda_step.py
tests/cuda/test_cuda_bf16.py tests/cuda/test_cuda_policy_head.py tests/cuda/test_cuda_device_batch.py
tests/cuda/test_cuda_arena.py tests/cuda/test_cuda_parsing.py tests/cuda/test_cuda_move_hidden.py
tests/bench/test_bench_step_cuda.py tests/bench/test_bench_ops_cuda.py tests/torch/test_torch_cuda.py tests/conformance/test_backend_ops.py"
mkdir -p "$W/bench"
echo "gpu_check ($MODE$([ $CHEAP -eq 1 ] && echo ' --cheap')): $(date -u +%FT%TZ) in $REPO" \
    "($(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo 'no git')), budget ${BUDGET}s"

# Where and how each step runs. RUN runs a Python module or script as the device would
# (the emulator stands in for the GPU in a rehearsal); SIZE shrinks the benchmarks to what
# the emulator can do; DRY makes them parse their arguments only (--cheap).
SIZE=()
DRY=()
if [ $MODE = device ]; then
    TREE=$REPO
    RUN=("$PY")
    if ! step preflight 20 nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv; then
        echo "gpu_check: no usable NVIDIA GPU here (nvidia-smi failed)" >&2
        exit 2
    fi
    CC=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
    export MANAKA_CUDA=1 MANAKA_CUDA_ARCH=${MANAKA_CUDA_ARCH:-${CC:-90}}
else
    if [ $CHEAP -eq 1 ]; then
        TREE=$REPO   # already built: nothing is built or installed
        RUN=("$PY")
        DRY=(--dry-run)
    else
        # What the device receives: tracked and untracked-not-ignored files, and .whl.
        TREE="$W/tree"
        mkdir -p "$TREE"
        (cd "$REPO" && git ls-files -co --exclude-standard | tar -cf - -T -) | tar -xf - -C "$TREE"
        [ -d "$REPO/build/cuda_emu_ext" ] && (cd "$REPO" && tar -cf - build/cuda_emu_ext) | tar -xf - -C "$TREE"
        RUN=("$PY" tools/cuda_emu/emulated.py)
        export MK_EMU_EXT_DIR="$TREE/build/cuda_emu_ext"
        # The device image lacks scipy-openblas32: hide this machine's copy, so the build and
        # the import must come from the carried wheel.
        mkdir -p "$W/block/scipy_openblas32"
        echo 'raise ImportError("hidden by gpu_check --rehearse: the device image lacks it")' \
            >"$W/block/scipy_openblas32/__init__.py"
        export PYTHONPATH="$SITE:$W/block"
        SCALE=3   # emulated kernels on a shared CPU: the limits prove the order, not the times
    fi
    SIZE=(--small --batch 16 --max-legal 20 --runs 2 --warmup 1 --head-runs 2)
    step preflight 20 bash -c 'echo "rehearsal: no GPU is touched"; command -v nvidia-smi || true'
    export MANAKA_CUDA=0
    # A step that outlives its limit is recorded and the run goes on.
    step timeout-drill 1 sleep 30
    [ "$(tail -1 "$STEPS" | grep -c timed-out)" -eq 1 ] && FAILED=0 || { echo "timeout drill: not recorded" >&2; exit 1; }
    pack
fi
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$SITE"
cd "$TREE" || exit 1

if [ $MODE = rehearse ] && [ $CHEAP -eq 1 ] && [ ! -d "$WHL" ]; then
    step wheels 10 bash -c "echo 'no $WHL here: the carried-wheel check is skipped (CI); --rehearse without --cheap requires it'"
else
    step wheels 10 bash -c "$(declare -f check_wheels); CARRIED='$CARRIED'; check_wheels '$WHL'"
fi
if [ $CHEAP -eq 0 ]; then
    step install 60 bash -c "$(declare -f install_missing); CARRIED='$CARRIED' PY='$PY' WHL='$WHL' SITE='$SITE'; install_missing"
    if [ $MODE = device ]; then
        step build 240 "$PY" setup.py build_ext --inplace -j "$(nproc)"
    else
        # The C core from scratch, as on the device; the emulated extension (a stand-in for
        # nvcc's, several minutes to compile here) is reused from this worktree when current.
        step build 600 bash -c "'$PY' setup.py build_ext --inplace -j 2 >/dev/null &&
            '$PY' -c 'import sys; sys.path.insert(0, \"tools/cuda_emu\"); import build, os; print(build.build_extension(os.environ[\"MK_EMU_EXT_DIR\"]))'"
    fi
    if [ $? -ne 0 ]; then
        echo "gpu_check: the build failed; nothing else can run"
        pack
        echo "gpu_check: FAILED after $(elapsed)s"
        exit 1
    fi
fi
step probe 30 "${RUN[@]}" -c "import manaka, json, os
here = os.path.realpath(manaka.__file__)
assert here.startswith(os.path.realpath('$TREE')), 'manaka imported from ' + here
print(json.dumps(manaka.build_info(), indent=1, default=str))
assert $CHEAP or manaka.cuda.is_available(), manaka.cuda.why_unavailable()"

# The GPU test files alone, stopping at the first failure: a failure is recorded, and the
# benchmarks still run (their own checks refuse a wrong result).
if [ $CHEAP -eq 1 ]; then
    step gpu-tests 60 "$PY" -m pytest --collect-only -q -p no:cacheprovider $GPU_TESTS
elif [ $MODE = device ]; then
    step gpu-tests 120 "$PY" -m pytest -x -q -rs -p no:cacheprovider --junitxml="$W/pytest-gpu.xml" $GPU_TESTS
    if grep -q 'no CUDA device' "$W/pytest-gpu.xml" 2>/dev/null; then
        step gpu-tests-skipped 10 bash -c 'echo "GPU tests were skipped for want of a CUDA device" >&2; exit 1'
    fi
else
    step gpu-tests 150 "$PY" tools/cuda_emu/run_gpu_tests.py -x --junitxml="$W/pytest-gpu.xml"
fi

# The figures: the step in FP32, then TF32 (each with its bf16-moment and on-device rows).
BENCH=(--out "$W/bench" ${SIZE[@]+"${SIZE[@]}"} ${DRY[@]+"${DRY[@]}"})
step step-fp32 90 "${RUN[@]}" -m manaka.bench step --device cuda --no-torch --tag cuda "${BENCH[@]}"
step step-tf32 60 "${RUN[@]}" -m manaka.bench step --device cuda --no-torch --tf32 --head-runs 0 --tag cuda-tf32 "${BENCH[@]}"
# The pair-table update: every row (dense) against the rows the batch names (sparse, lazy).
step pair-update 60 "${RUN[@]}" -m manaka.bench step --device cuda --pair-update dense,sparse,lazy --tag cuda "${BENCH[@]}"
# The move-table update on the shogi recipe's model, batches of the shipped example games.
step move-update 60 "${RUN[@]}" -m manaka.bench step --device cuda --move-update dense,sparse \
    --records examples/data/fsf-train.hcpe --batch 512 --tag cuda "${BENCH[@]}"
# The native trainer data-parallel over NCCL: 2 processes, one GPU each; with one GPU a
# group of one process (the CUDA path without a second rank); skipped, saying so, without a
# GPU (a rehearsal: torch here has no CUDA).
step nccl-ddp 60 "${RUN[@]}" tools/nccl_check.py --out "$W/bench" ${DRY[@]+"${DRY[@]}"}
KSIZE=()
[ $MODE = rehearse ] && KSIZE=(--small --batch 16 --max-legal 20 --steps 2 --warmup 1)
step kernel-profile 60 "${RUN[@]}" tools/kernel_profile.py --out "$W/bench" ${KSIZE[@]+"${KSIZE[@]}"} ${DRY[@]+"${DRY[@]}"}
OSIZE=()
[ $MODE = rehearse ] && [ $CHEAP -eq 0 ] && OSIZE=(--dry-run)   # the seed-sized ops are beyond the emulator
step ops 90 "${RUN[@]}" -m manaka.bench ops --device cuda --no-compile --out "$W/bench" ${OSIZE[@]+"${OSIZE[@]}"} ${DRY[@]+"${DRY[@]}"}
# PyTorch eager and torch.compile (cold: 30-120 s) beside manaka, same parameters and batch.
step torch-baselines 150 "${RUN[@]}" -m manaka.bench step --device cuda --head-runs 0 --tag cuda-torch "${BENCH[@]}"
# manaka.torch (the custom ops and Network) against plain PyTorch, if time is left.
TSIZE=()
# The emulator serves manaka's CUDA entry points, not torch's (a CPU build of torch sees no GPU).
[ $MODE = rehearse ] && [ $CHEAP -eq 0 ] && TSIZE=(--small --dry-run)
step step-torch-module 120 "${RUN[@]}" -m manaka.bench step_torch --device cuda --out "$W/bench" ${TSIZE[@]+"${TSIZE[@]}"} ${DRY[@]+"${DRY[@]}"}

# The whole suite with what is left (only collected in a full rehearsal; --cheap leaves it out).
if [ $CHEAP -eq 1 ]; then
    echo "gpu_check --cheap: the full suite is left to CI's own pytest run"
elif [ $MODE = device ]; then
    step full-suite 600 "$PY" -m pytest -q -rs -p no:cacheprovider --junitxml="$W/pytest-all.xml"
else
    step full-suite 120 "$PY" -m pytest --collect-only -q -p no:cacheprovider
fi

pack
echo "gpu_check: $([ $FAILED -eq 0 ] && echo PASSED || echo FAILED) after $(elapsed)s; results in $OUT"
exit $FAILED
