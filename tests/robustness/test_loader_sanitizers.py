"""csrc/data/loader.c under ThreadSanitizer and AddressSanitizer, built from source by a C harness."""
import glob
import os
import shutil
import subprocess

import pytest

from paths import ROOT


@pytest.mark.parametrize("sanitizer", ["thread", "address,undefined"])
def test_loader_is_clean_under_sanitizers(tmp_path, sanitizer):
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("SKIPPED: no C compiler to build the sanitizer harness")
    exe = str(tmp_path / "stress")
    build = subprocess.run([cc, "-std=c11", "-O1", "-g", f"-fsanitize={sanitizer}", "-pthread",
                            "-I", os.path.join(ROOT, "csrc"), os.path.join(ROOT, "tests", "helpers", "loader_stress.c"),
                            *sorted(glob.glob(os.path.join(ROOT, "csrc", "data", "*.c"))),
                            os.path.join(ROOT, "csrc", "core", "batch.c"),
                            os.path.join(ROOT, "csrc", "core", "check.c"),
                            os.path.join(ROOT, "csrc", "core", "error.c"), "-lm", "-o", exe],
                           capture_output=True, text=True)
    if build.returncode != 0:
        pytest.skip(f"SKIPPED: this compiler cannot build with -fsanitize={sanitizer}: {build.stderr[-300:]}")
    run = subprocess.run([exe], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TSAN_OPTIONS": "halt_on_error=1", "ASAN_OPTIONS": "detect_leaks=1"})
    assert run.returncode == 0 and run.stdout.startswith("ok "), run.stdout + run.stderr[-3000:]
    assert "WARNING: ThreadSanitizer" not in run.stderr and "ERROR: AddressSanitizer" not in run.stderr
