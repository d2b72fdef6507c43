"""Loads OpenBLAS (from the installed scipy-openblas32 wheel) before the C core.

_core links libscipy_openblas by soname only: pip builds in a temporary environment, so an
rpath into it would dangle. Loading the installed copy here with RTLD_GLOBAL makes the
dynamic loader reuse it when _core asks for that soname.
"""
from __future__ import annotations

import ctypes
import os
import sys

_handle = None  # keeps the library loaded for the life of the process


def load() -> str:
    """Loads the library once; returns its path."""
    global _handle
    import scipy_openblas32

    lib_dir = scipy_openblas32.get_lib_dir()
    path = os.path.join(lib_dir, _library_file(lib_dir))
    if _handle is None:
        _handle = ctypes.CDLL(path, mode=getattr(ctypes, "RTLD_GLOBAL", 0))
    return path


def _library_file(lib_dir: str) -> str:
    """The shared library's file name. Found by listing the folder rather than with
    get_library(fullname=True), which the 0.3.27.0.x wheels (allowed by the requirements)
    lack; on Windows the code is in the .dll, not the .lib import library."""
    if sys.platform == "win32":
        ends = (".dll",)
    elif sys.platform == "darwin":
        ends = (".dylib",)
    else:
        ends = (".so",)
    names = sorted(f for f in os.listdir(lib_dir)
                   if f.startswith(("libscipy_openblas", "scipy_openblas")) and f.endswith(ends))
    if not names:
        raise ImportError(f"manaka: no scipy_openblas shared library in {lib_dir}")
    return names[0]
