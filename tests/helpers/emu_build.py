"""The CPU emulation of the CUDA kernels (tools/cuda_emu/build.py) for the tests that load it
with ctypes: one place that imports the builder and names the folder it builds into."""
import importlib.util
import os

from paths import ROOT

OUT = os.environ.get("MK_EMU_DIR") or os.path.join(ROOT, "build", "cuda_emu")

_spec = importlib.util.spec_from_file_location("cuda_emu_build", os.path.join(ROOT, "tools", "cuda_emu", "build.py"))
build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build)


def library() -> str:
    """Path of the emulated manaka CUDA library, built (or rebuilt when out of date) in OUT."""
    return build.build(OUT)


def cublas() -> str:
    """Path of the cuBLAS stand-in that counts handles and GEMMs per stream, built in OUT."""
    return build.build_cublas(OUT)


def lab(name: str) -> str:
    """Path of the emulated library of the experiment lab/<name>/ (its .cu launchers), built in OUT/lab."""
    return build.build_lab(os.path.join(ROOT, "lab", name), os.path.join(OUT, "lab"))
