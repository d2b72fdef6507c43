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
    name = scipy_openblas32.get_library(fullname=True)
    if sys.platform == "win32":  # the import library is .lib; the code is in the .dll
        name = next(f for f in os.listdir(lib_dir) if f.endswith(".dll"))
    path = os.path.join(lib_dir, name)
    if _handle is None:
        _handle = ctypes.CDLL(path, mode=getattr(ctypes, "RTLD_GLOBAL", 0))
    return path
