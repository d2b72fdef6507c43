#!/usr/bin/env bash
# tools/openblas_versions.sh [VERSION ...]: for each scipy-openblas32 version, a throwaway
# venv with that version, manaka built against it (MANAKA_CUDA=0, no build isolation, so
# the build sees the same OpenBLAS as the run), and the tests of the thread-count promise
# run from a neutral folder against the installed package: tests/cpu/test_gemm.py and the
# trainer's bitwise test over thread counts.
#
# Default versions: 0.3.27.0.0 (the lowest pyproject.toml's scipy-openblas32>=0.3.27
# allows), 0.3.30.0.8, and "newest" (whatever pip resolves today). Prints one PASS/FAIL line
# per version with the OpenBLAS build it ran; exit status 0 only if every version passed.
# The source copied is the working tree (tracked and untracked, not ignored files).
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -gt 0 ]; then VERSIONS=("$@"); else VERSIONS=(0.3.27.0.0 0.3.30.0.8 newest); fi
PY=${PYTHON:-python3}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

SRC="$WORK/src"
mkdir -p "$SRC"
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard |
    tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -xf - -C "$SRC"

status=0
summary=()
for v in "${VERSIONS[@]}"; do
    venv="$WORK/venv-$v"
    log="$WORK/$v.log"
    if [ "$v" = newest ]; then spec=scipy-openblas32; else spec="scipy-openblas32==$v"; fi
    echo "== $spec" >&2
    ok=1
    "$PY" -m venv "$venv" &&
        "$venv/bin/pip" install -q --disable-pip-version-check setuptools wheel numpy pytest \
            hypothesis tqdm "$spec" >"$log" 2>&1 || ok=0
    if [ $ok = 1 ]; then
        rm -rf "$SRC/build" "$SRC"/manaka/*.so
        (cd "$SRC" && MANAKA_CUDA=0 "$venv/bin/pip" install -q --no-build-isolation --no-deps .) \
            >>"$log" 2>&1 || ok=0
    fi
    got=$("$venv/bin/python" -c "import importlib.metadata as m, scipy_openblas32 as s; \
print(m.version('scipy-openblas32'), '|', s.get_openblas_config().strip())" 2>/dev/null)
    if [ $ok = 1 ]; then
        # From $WORK, so `import manaka` finds the installed package, not the source copy.
        (cd "$WORK" && "$venv/bin/python" -c "import manaka, sys; \
sys.exit(0 if manaka.__file__.startswith('$venv') else 'manaka imported from ' + manaka.__file__)" &&
            "$venv/bin/python" -m pytest -q -p no:cacheprovider "$SRC/tests/cpu/test_gemm.py" \
                "$SRC/tests/api/test_trainer.py::test_training_is_bitwise_identical_for_any_thread_count") \
            >>"$log" 2>&1 || ok=0
    fi
    line=$(tail -n 1 "$log")
    if [ $ok = 1 ]; then result=PASS; else result=FAIL; status=1; tail -n 30 "$log" >&2; fi
    summary+=("$result  requested $v  ran $got  ($line)")
done
printf '%s\n' "${summary[@]}"
exit $status
