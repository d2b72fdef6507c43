"""Builds manaka's C core as the extension manaka._core (always), with OpenMP and -O3.

GEMM comes from OpenBLAS as shipped by the scipy-openblas32 wheel (a build and runtime
dependency). The extension links it by soname only, with no rpath into the (temporary,
isolated) build environment: manaka/__init__.py loads the installed copy with RTLD_GLOBAL
before importing _core, and the loader reuses it.

Environment:
  MANAKA_PORTABLE=1   build for a generic x86-64/arm64 CPU instead of -march=native
  MANAKA_CUDA=0|1     skip / require the CUDA backend (default: build it when nvcc is found)
"""
import glob
import os

import numpy
from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def sources(*patterns):
    found = []
    for pattern in patterns:
        found += sorted(glob.glob(os.path.join("csrc", pattern)))
    return found


def c_flags():
    # -fno-math-errno: nothing reads errno, and with it sqrtf/expf in a loop keep a scalar
    # error path that stops vectorisation (AdamW ran scalar); results are unchanged.
    flags = ["-std=c11", "-O3", "-fopenmp", "-fno-math-errno", "-Wall", "-Wno-unused-function"]
    if os.environ.get("MANAKA_PORTABLE", "0") != "1":
        flags.append("-march=native")
    return flags


def openblas():
    """(include dir, library dir, library name) of the scipy-openblas32 wheel."""
    import scipy_openblas32

    return (scipy_openblas32.get_include_dir(), scipy_openblas32.get_lib_dir(),
            scipy_openblas32.get_library())


BLAS_INCLUDE, BLAS_LIBDIR, BLAS_LIB = openblas()

core = Extension(
    "manaka._core",
    sources=sources("*.c", "cpu/*.c", "python/*.c"),
    include_dirs=[numpy.get_include(), "csrc", BLAS_INCLUDE],
    library_dirs=[BLAS_LIBDIR],
    libraries=[BLAS_LIB],
    extra_compile_args=c_flags(),
    extra_link_args=["-fopenmp"],
    depends=sources("*.h", "cpu/*.h", "python/*.h"),
)

setup(ext_modules=[core])
