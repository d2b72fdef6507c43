"""A few lines of C over a header of csrc/, built into a shared library for ctypes: how the
tests drive the staging bookkeeping (tests/data/test_staging_slots.py, test_staging_ring.py)
alone, without a device or the extension."""
import ctypes
import os
import shutil
import subprocess

import pytest

from paths import ROOT


def build(tmp_path_factory, name: str, source: str, what: str) -> ctypes.CDLL:
    """`source` compiled with csrc/ on the include path as lib<name>.so; skips, saying
    `what` could not be built, where there is no gcc."""
    if shutil.which("gcc") is None:
        pytest.skip(f"no gcc to build {what}")
    out = tmp_path_factory.mktemp(name)
    src, lib = out / f"{name}.c", out / f"lib{name}.so"
    src.write_text(source)
    subprocess.check_call(["gcc", "-std=c11", "-O1", "-fPIC", "-shared", "-I", os.path.join(ROOT, "csrc"),
                           str(src), "-o", str(lib)])
    return ctypes.CDLL(str(lib))
