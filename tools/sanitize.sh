#!/usr/bin/env bash
# The C core (manaka._core, not CUDA) under sanitizers, in a copy of the tree that never
# touches the normal in-place build:
#
#   tools/sanitize.sh asan [pytest args]   ASan + UBSan: the core test files and the API fuzz
#   tools/sanitize.sh tsan [pytest args]   TSan: the threaded tests (loader, trainer, fit)
#
# Extra arguments replace the default test list (e.g. `tools/sanitize.sh asan tests/conformance/test_ops.py`).
# The copy and its build live in build/sanitize-<mode>/ (git-ignored; rebuilt only when a
# source changed). Exit status: pytest's, so any sanitizer report fails the run.
#
# Why the flags:
#  -fno-wrapv            CPython's CFLAGS add -fwrapv (signed overflow defined as wrapping),
#                        which hides signed overflow from UBSan; the later flag wins.
#  -fno-sanitize-recover UBSan aborts at the first report instead of printing and going on.
#  LD_PRELOAD            python itself is not instrumented: the runtime must come first.
#                        ASan also preloads libstdc++: its __cxa_throw interceptor finds
#                        the real function only if libstdc++ is loaded when ASan starts,
#                        and a C++ extension (cshogi, the shogi tests' oracle) that throws
#                        would otherwise abort ("CHECK failed ... real___cxa_throw").
#  detect_leaks=0        CPython keeps objects alive until exit by design (not our leaks).
#  allocator_may_return_null=1  a huge request returns NULL, as malloc does, so the
#                        fuzz's oversized sizes exercise manaka's MemoryError path
#                        instead of ASan's own abort.
#  TSan: libgomp is not instrumented and synchronises with futexes TSan cannot see, so
#  every OpenMP loop reads as a race (and TSan often cannot restore the other stack to
#  suppress it): the TSan build has no OpenMP (MANAKA_OPENMP=0, loops on the calling
#  thread) and checks our own threads: the loader's producers (pthreads), Python threads
#  calling the core, the locks between them. tools/tsan.supp covers what libgomp is left.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MODE="${1:-}"
shift || true
case "$MODE" in
asan)
    SAN="-fsanitize=address,undefined -fno-sanitize-recover=all"
    RUNTIME="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so)"
    # every test file of the C core, in any folder of tests/: not those of CUDA, lab, torch,
    # notebooks, benchmarks, the build and packaging (the engine's link and the source-tree
    # import stay), nor the loader's own sanitizer harness (it builds its own)
    mapfile -t DEFAULT_TESTS < <(cd "$ROOT" && find tests -name 'test_*.py' | sort \
        | grep -Ev '^tests/(cuda|torch|bench|lab)/|torch|notebook|packaging/test_(setup|wheel|clang_build|gpu_check)|loader_sanitizers')
    ;;
tsan)
    SAN="-fsanitize=thread"
    export MANAKA_OPENMP=0  # see the note above: OpenMP loops run on the calling thread
    export OPENBLAS_NUM_THREADS=1  # NumPy's own OpenBLAS pool is not instrumented either
    RUNTIME="$(gcc -print-file-name=libtsan.so)"
    DEFAULT_TESTS=(tests/data/test_loader.py tests/data/test_loader_threads.py tests/api/test_trainer_threads.py
                   tests/robustness/test_input_races.py tests/api/test_fit.py)
    ;;
*)
    echo "usage: tools/sanitize.sh asan|tsan [pytest args...]" >&2
    exit 2
    ;;
esac
for lib in $RUNTIME; do
    [ -f "$lib" ] || { echo "sanitize.sh: $lib not found (gcc's sanitizer runtime)" >&2; exit 2; }
done

DEST="$ROOT/build/sanitize-$MODE"
mkdir -p "$DEST"
# Copy the tree (tracked and untracked, not ignored; examples/data: the engine games some
# tests read), keeping mtimes so the build is
# incremental; the copy's old sources go first so a deleted file does not linger.
rm -rf "$DEST/csrc" "$DEST/tests" "$DEST/tools" "$DEST/examples"
find "$DEST/manaka" -name '*.py' -delete 2>/dev/null || true
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard -- setup.py pyproject.toml csrc manaka tests tools examples/data \
    | xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh \
    | tar --null -T - -cf -) | tar -xf - -C "$DEST"

start=$(date +%s)
echo "sanitize.sh: building manaka._core with $SAN in $DEST (log: $DEST/build.log)"
# CFLAGS from the environment come after CPython's (so -fno-wrapv overrides its -fwrapv);
# setup.py's own -O3 comes last and stays; -g and frame pointers keep reports readable.
# setuptools rebuilds only for a newer source: a change of flags or of setup.py forces it.
FLAGS="$SAN ${MANAKA_OPENMP:-1} $(sha1sum "$DEST/setup.py" | cut -c1-40)"
FORCE=""
[ "$(cat "$DEST/flags.txt" 2>/dev/null)" = "$FLAGS" ] || FORCE="--force"
(cd "$DEST" && MANAKA_CUDA=0 CFLAGS="$SAN -fno-wrapv -fno-omit-frame-pointer -g" LDFLAGS="$SAN" \
    python setup.py build_ext --inplace -j 2 $FORCE >build.log 2>&1) \
    || { tail -30 "$DEST/build.log"; echo "sanitize.sh: build failed" >&2; exit 1; }
echo "$FLAGS" >"$DEST/flags.txt"
echo "sanitize.sh: built in $(( $(date +%s) - start )) s"

# The interpreter itself, not a wrapper script (pyenv's shim is bash, which crashes with
# libtsan preloaded); children started with sys.executable get the same one.
PY="$(python -c 'import sys; print(sys.executable)')"
export PYTHONPATH="$DEST${PYTHONPATH:+:$PYTHONPATH}"
export LD_PRELOAD="$RUNTIME${LD_PRELOAD:+ $LD_PRELOAD}"
# Reports go to files (pytest captures stderr, and a halting report kills the process before
# pytest could show it); they are printed at the end.
REPORTS="$DEST/reports"
rm -rf "$REPORTS" && mkdir -p "$REPORTS"
export ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:abort_on_error=1:log_path=$REPORTS/asan:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$REPORTS/ubsan:${UBSAN_OPTIONS:-}"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:history_size=7:suppressions=$DEST/tools/tsan.supp:log_path=$REPORTS/tsan:${TSAN_OPTIONS:-}"
export MANAKA_SANITIZER="$MODE"  # tests that time themselves or build their own harness read it
cd "$DEST"
where=$("$PY" -c "import manaka, os; print(os.path.dirname(manaka.__file__))")
[ "$where" = "$DEST/manaka" ] || { echo "sanitize.sh: imported manaka from $where, not the sanitized copy" >&2; exit 1; }
start=$(date +%s)
if [ $# -eq 0 ]; then set -- "${DEFAULT_TESTS[@]}"; fi
status=0
"$PY" -m pytest -q -p no:cacheprovider "$@" || status=$?
echo "sanitize.sh: $MODE tests took $(( $(date +%s) - start )) s (exit $status)"
# A report is an error, a data race or UB; "failed to allocate" warnings are the oversized
# requests the fuzz makes on purpose (allocator_may_return_null=1 turns them into NULL).
for report in $(grep -lE "ERROR: |runtime error|WARNING: ThreadSanitizer" "$REPORTS"/* 2>/dev/null); do
    echo "sanitize.sh: sanitizer report $report:"
    head -80 "$report"
    status=1
done
exit $status
