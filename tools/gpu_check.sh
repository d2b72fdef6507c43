#!/usr/bin/env bash
# tools/gpu_check.sh OUTDIR: everything the CUDA backend needs checked on a real GPU, in one
# go, within 8 minutes on an H200, with no network:
#   1. the GPU is there (nvidia-smi),
#   2. missing dependencies from wheels in ./.whl (the device machine has no network). Its
#      image has hypothesis and tqdm but not scipy-openblas32, which manaka needs to build
#      and import: before the run, here, `echo /.whl/ >> .git/info/exclude` and
#      `python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12
#      --platform manylinux_2_28_x86_64 -d .whl scipy-openblas32`, then name `.whl` in carry,
#   3. the CUDA backend builds for this GPU (MANAKA_CUDA=1, MANAKA_CUDA_ARCH default 90),
#   4. the whole test suite runs, and none of the GPU tests was skipped for want of a device,
#   5. python3 -m manaka.bench ops --device cuda (without torch.compile),
#   6. python3 -m manaka.bench step --device cuda (PyTorch eager and torch.compile beside it),
#   7. python3 -m manaka.bench step_torch --device cuda (manaka.torch), if time is left,
#   8. the ops benchmark with torch.compile, if time is left.
# Writes OUTDIR/gpu_check.log (everything), OUTDIR/gpu_check.json (a summary per step),
# OUTDIR/pytest.xml, and the benchmarks' results packed in OUTDIR/bench_results.tar (the
# device tool returns at most 8 files). Exit status 0 only if every step passed (the
# torch.compile ops benchmark is optional: it may run out of time).
set -u -o pipefail

OUT=${1:?usage: tools/gpu_check.sh OUTDIR}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
LOG="$OUT/gpu_check.log"
STEPS="$OUT/steps.jsonl"
: >"$LOG"
: >"$STEPS"
exec > >(tee -a "$LOG") 2>&1
START=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET_S:-470}
PY=${PYTHON:-python3}
FAILED=0

elapsed() { echo $(($(date +%s) - START)); }

# step NAME LIMIT_S COMMAND...: runs COMMAND under `timeout`, logs and records its status.
step() {
    local name=$1 limit=$2 t0 rc
    shift 2
    echo
    echo "=== [$(elapsed)s] $name (limit ${limit}s): $*"
    t0=$(date +%s)
    timeout --kill-after=10 "$limit" "$@"
    rc=$?
    echo "=== [$(elapsed)s] $name: exit status $rc after $(($(date +%s) - t0))s"
    printf '{"step": "%s", "rc": %d, "seconds": %d, "limit_s": %d}\n' "$name" "$rc" \
        $(($(date +%s) - t0)) "$limit" >>"$STEPS"
    return $rc
}

echo "gpu_check: $(date -u +%FT%TZ) in $(pwd) ($(git rev-parse --short HEAD 2>/dev/null || echo 'no git'))"

if ! step nvidia-smi 30 nvidia-smi; then
    echo "gpu_check: no usable NVIDIA GPU here (nvidia-smi failed); nothing to check" >&2
    exit 2
fi

step toolkit 30 bash -c 'command -v nvcc || ls /usr/local/cuda/bin/nvcc; (nvcc --version || /usr/local/cuda/bin/nvcc --version) 2>&1 | tail -2' || true

install_missing() {
    local module wheel_name
    for pair in hypothesis:hypothesis tqdm:tqdm scipy_openblas32:scipy-openblas32; do
        module=${pair%%:*}
        wheel_name=${pair#*:}
        if "$PY" -c "import $module" 2>/dev/null; then
            echo "$module: already installed"
        elif ls ./.whl/*.whl >/dev/null 2>&1; then
            "$PY" -m pip install --no-index --find-links ./.whl "$wheel_name" ||
                echo "$module: not installable from ./.whl; tests that need it will skip"
        else
            echo "$module: missing and no ./.whl folder; tests that need it will skip"
        fi
    done
}
step optional-dependencies 90 bash -c "$(declare -f install_missing); PY=$PY; install_missing" || true

export MANAKA_CUDA=1 MANAKA_CUDA_ARCH=${MANAKA_CUDA_ARCH:-90}
step build 300 "$PY" setup.py build_ext --inplace || FAILED=1
if [ $FAILED -ne 0 ]; then
    echo "gpu_check: the build failed; not running tests or benchmarks" >&2
fi

if [ $FAILED -eq 0 ]; then
    step cuda-probe 60 "$PY" -c "import manaka, json; print(json.dumps(manaka.build_info(), indent=1)); assert manaka.cuda.is_available(), manaka.cuda.why_unavailable()" || FAILED=1
fi

# Test files that import an optional dependency still missing are left out, and said so.
IGNORE=()
for module in hypothesis tqdm scipy_openblas32; do
    if ! "$PY" -c "import $module" 2>/dev/null; then
        for f in $(grep -lE "^[[:space:]]*(import|from)[[:space:]]+$module\b" tests/*.py 2>/dev/null); do
            echo "gpu_check: leaving out $f: it needs $module, which is not installed"
            IGNORE+=("--ignore=$f")
        done
    fi
done

if [ $FAILED -eq 0 ]; then
    step pytest 240 "$PY" -m pytest -q -rs -p no:cacheprovider --junitxml="$OUT/pytest.xml" \
        ${IGNORE[@]+"${IGNORE[@]}"} || FAILED=1
    # A GPU test skipped for want of a device here means the GPU path was never tested.
    if [ -f "$OUT/pytest.xml" ] && grep -q 'no CUDA device' "$OUT/pytest.xml"; then
        echo "gpu_check: GPU tests were skipped for want of a CUDA device" >&2
        FAILED=1
    fi
fi

if [ $FAILED -eq 0 ]; then
    left=$((BUDGET - $(elapsed)))
    step bench-ops-cuda $((left > 120 ? 120 : (left > 30 ? left : 30))) \
        "$PY" -m manaka.bench ops --device cuda --no-compile --out "$OUT/bench" || FAILED=1
    left=$((BUDGET - $(elapsed)))
    step bench-step-cuda $((left > 150 ? 150 : (left > 30 ? left : 30))) \
        "$PY" -m manaka.bench step --device cuda --out "$OUT/bench" || FAILED=1
    left=$((BUDGET - $(elapsed)))
    if [ $left -ge 120 ]; then
        step bench-step-torch-cuda $((left > 180 ? 180 : left)) \
            "$PY" -m manaka.bench step_torch --device cuda --out "$OUT/bench" ||
            echo "gpu_check: the manaka.torch step benchmark did not finish (optional)"
    fi
    left=$((BUDGET - $(elapsed)))
    if [ $left -ge 60 ]; then
        step bench-ops-cuda-compile $left \
            "$PY" -m manaka.bench ops --device cuda --tag cuda-compile --out "$OUT/bench" ||
            echo "gpu_check: the torch.compile benchmark did not finish (optional)"
    else
        echo "gpu_check: ${left}s left: skipping the torch.compile benchmark"
    fi
fi

"$PY" - "$OUT" "$FAILED" <<'PYEOF' || true
import glob, json, os, sys
import xml.etree.ElementTree as ET

out, failed = sys.argv[1], sys.argv[2] == "1"
summary = {"passed": not failed, "steps": [json.loads(l) for l in open(os.path.join(out, "steps.jsonl"))]}
try:
    import manaka
    summary["build_info"] = manaka.build_info()
except Exception as exc:  # the build may have failed
    summary["build_info"] = f"unavailable: {exc}"
xml = os.path.join(out, "pytest.xml")
if os.path.exists(xml):
    suite = ET.parse(xml).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    summary["pytest"] = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    summary["pytest"]["skip_reasons"] = sorted({s.get("message", "") for s in suite.iter("skipped")})
summary["bench"] = {os.path.basename(p): json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, "bench", "*.json")))}
with open(os.path.join(out, "gpu_check.json"), "w") as f:
    json.dump(summary, f, indent=1, default=str)
print(f"wrote {os.path.join(out, 'gpu_check.json')}")
PYEOF

if [ -d "$OUT/bench" ]; then
    tar -C "$OUT" -cf "$OUT/bench_results.tar" bench && rm -r "$OUT/bench"
fi

echo "gpu_check: $([ $FAILED -eq 0 ] && echo PASSED || echo FAILED) after $(elapsed)s"
exit $FAILED
