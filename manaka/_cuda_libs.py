"""Where cuBLAS lives on this machine, for the CUDA backend's run-time loader.

manaka's CUDA extension does not link cuBLAS (see csrc/cuda/cublas_dynamic.h); it loads it
on first use. This module finds the library the way a researcher's environment provides
it: the nvidia-cublas wheel (what PyTorch and CuPy install), $CUDA_HOME, or the toolkit in
/usr/local/cuda. The loader's own search (LD_LIBRARY_PATH, ldconfig) is the last resort.
"""
from __future__ import annotations

import glob
import importlib.util
import os
from typing import List, Optional

_SONAMES = ("libcublas.so.13", "libcublas.so.12")


def _wheel_dirs() -> List[str]:
    dirs = []
    for package in ("nvidia.cublas", "nvidia.cu13", "nvidia"):
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            continue
        for root in (spec.submodule_search_locations or []) if spec else []:
            dirs += [os.path.join(root, "lib"), os.path.join(root, "cublas", "lib"),
                     os.path.join(root, "cu13", "lib")]
    return dirs


def _toolkit_dirs() -> List[str]:
    roots = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH")] + ["/usr/local/cuda"]
    return [os.path.join(r, sub) for r in roots if r for sub in ("lib64", "lib", "targets/x86_64-linux/lib")]


def find_cublas() -> Optional[str]:
    """The path of a libcublas.so.13 (or .12) on this machine, or None if none is found."""
    override = os.environ.get("MANAKA_CUBLAS")
    if override:
        return override
    for directory in _wheel_dirs() + _toolkit_dirs():
        for soname in _SONAMES:
            found = sorted(glob.glob(os.path.join(directory, soname + "*")))
            if found:
                return found[0]
    return None
