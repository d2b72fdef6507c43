#!/usr/bin/env bash
# The C core (manaka._core, not CUDA) under sanitizers, in a copy of the tree that never
# touches the normal in-place build (issue 11, "Tests and CI"):
#
#   tools/sanitize.sh asan [pytest args]   ASan + UBSan: the core test files and the API fuzz
#   tools/sanitize.sh tsan [pytest args]   TSan: the threaded tests (loader, trainer, fit)
#
# Extra arguments replace the default test list (e.g. `tools/sanitize.sh asan tests/test_ops.py`).
# The copy and its build live in build/sanitize-<mode>/ (git-ignored; rebuilt only when a
# source changed). Exit status: pytest's, so any sanitizer report fails the run.
#
# Why the flags:
#  -fno-wrapv            CPython's CFLAGS add -fwrapv (signed overflow defined as wrapping),
#                        which hides signed overflow from UBSan; the later flag wins.
#  -fno-sanitize-recover UBSan aborts at the first report instead of printing and going on.
#  LD_PRELOAD            python itself is not instrumented: the runtime must come first.
#  detect_leaks=0        CPython keeps objects alive until exit by design (not our leaks).
#  allocator_may_return_null=1  a huge request returns NULL, as malloc does, so the
#                        fuzz's oversized sizes exercise manaka's MemoryError path
#                        instead of ASan's own abort.
#  TSan: libgomp is not instrumented and synchronises with futexes TSan cannot see, so
#  reports from inside it are suppressed (tools/tsan.supp); our own threads (the loader's
#  producers, Python threads calling the core) are fully checked.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MODE="${1:-}"
shift || true
case "$MODE" in
asan)
    SAN="-fsanitize=address,undefined -fno-sanitize-recover=all"
    RUNTIME="$(gcc -print-file-name=libasan.so)"
    DEFAULT_TESTS=(tests/test_ops.py tests/test_ops_errors.py tests/test_ops_gradients.py tests/test_batch_in_place.py
                   tests/test_batch_slots.py tests/test_model.py tests/test_model_file.py tests/test_policy_head.py
                   tests/test_gemm.py tests/test_trainer.py tests/test_trainer_bf16.py tests/test_loader.py
                   tests/test_dataset.py tests/test_dataset_errors.py tests/test_checkpoint.py tests/test_fit.py
                   tests/test_train.py tests/test_staging_plan.py tests/test_shogi_rules.py tests/test_shogi_records.py
                   tests/test_model_file_fuzz.py tests/test_api_fuzz.py)
    ;;
tsan)
    SAN="-fsanitize=thread"
    RUNTIME="$(gcc -print-file-name=libtsan.so)"
    DEFAULT_TESTS=(tests/test_loader.py tests/test_trainer.py tests/test_fit.py)
    ;;
*)
    echo "usage: tools/sanitize.sh asan|tsan [pytest args...]" >&2
    exit 2
    ;;
esac
[ -f "$RUNTIME" ] || { echo "sanitize.sh: $RUNTIME not found (gcc's sanitizer runtime)" >&2; exit 2; }

DEST="$ROOT/build/sanitize-$MODE"
mkdir -p "$DEST"
# Copy the tree (tracked and untracked, not ignored), keeping mtimes so the build is
# incremental; the copy's old sources go first so a deleted file does not linger.
rm -rf "$DEST/csrc" "$DEST/tests" "$DEST/tools"
find "$DEST/manaka" -name '*.py' -delete 2>/dev/null || true
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard -- setup.py pyproject.toml csrc manaka tests tools \
    | xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh \
    | tar --null -T - -cf -) | tar -xf - -C "$DEST"

start=$(date +%s)
echo "sanitize.sh: building manaka._core with $SAN in $DEST (log: $DEST/build.log)"
# CFLAGS from the environment come after CPython's (so -fno-wrapv overrides its -fwrapv);
# -O1 -g keeps reports readable and the build short.
(cd "$DEST" && MANAKA_CUDA=0 CFLAGS="$SAN -fno-wrapv -fno-omit-frame-pointer -g -O1" LDFLAGS="$SAN" \
    python setup.py build_ext --inplace -j 2 >build.log 2>&1) \
    || { tail -30 "$DEST/build.log"; echo "sanitize.sh: build failed" >&2; exit 1; }
echo "sanitize.sh: built in $(( $(date +%s) - start )) s"

export PYTHONPATH="$DEST${PYTHONPATH:+:$PYTHONPATH}"
export LD_PRELOAD="$RUNTIME${LD_PRELOAD:+ $LD_PRELOAD}"
export ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:abort_on_error=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$DEST/tools/tsan.supp:${TSAN_OPTIONS:-}"
export MANAKA_SANITIZER="$MODE"  # tests that time themselves or build their own harness read it
cd "$DEST"
where=$(python -c "import manaka, os; print(os.path.dirname(manaka.__file__))")
[ "$where" = "$DEST/manaka" ] || { echo "sanitize.sh: imported manaka from $where, not the sanitized copy" >&2; exit 1; }
start=$(date +%s)
if [ $# -eq 0 ]; then set -- "${DEFAULT_TESTS[@]}"; fi
status=0
python -m pytest -q -p no:cacheprovider "$@" || status=$?
echo "sanitize.sh: $MODE tests took $(( $(date +%s) - start )) s (exit $status)"
exit $status
