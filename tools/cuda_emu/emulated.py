"""Runs a Python module or script with manaka._cuda built on the CPU emulator in place of
the real extension, so anything that needs a CUDA device runs (slowly) without one:

    python tools/cuda_emu/emulated.py -m manaka.bench step --device cuda --small ...
    python tools/cuda_emu/emulated.py tools/kernel_profile.py --small ...
    python tools/cuda_emu/emulated.py -c 'import manaka; print(manaka.build_info())'

tools/gpu_check.sh --rehearse uses it to run the device check's commands here."""
import importlib.abc
import importlib.util
import os
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


class _EmulatedCuda(importlib.abc.MetaPathFinder):
    """Serves manaka._cuda from the emulated library instead of the package's folder."""

    def __init__(self, so):
        self.so = so

    def find_spec(self, name, path, target=None):
        return importlib.util.spec_from_file_location(name, self.so) if name == "manaka._cuda" else None


def install():
    """Builds (if out of date) and imports the emulated manaka._cuda, with the device-memory
    rules of a GPU on and cuBLAS pointed at cublas_emu.c; returns the library's path."""
    sys.path.insert(0, HERE)
    import build

    so = build.build_extension(os.environ.get("MK_EMU_EXT_DIR") or os.path.join(ROOT, "build", "cuda_emu_ext"))
    os.environ["MANAKA_CUDA_EMULATED"] = "1"
    os.environ["MANAKA_CUBLAS"] = build.build_cublas(os.path.dirname(so))  # the loops of cublas_emu.c
    sys.path[:0] = [ROOT, os.path.join(ROOT, "tests", "helpers")]
    # The emulated library is found by the package's own `from . import _cuda`, so that it
    # initialises as the real one does: after manaka._core, whose engine it calls into
    # (csrc/python/common/engine_link.h).
    sys.meta_path.insert(0, _EmulatedCuda(so))
    import manaka  # noqa: F401

    import ctypes

    ctypes.CDLL(so).mk_emu_strict(1)  # device-memory rules as on a GPU
    return so


def main(argv):
    if not argv or (argv[0] in ("-m", "-c") and len(argv) < 2):
        print(__doc__, file=sys.stderr)
        return 2
    install()
    if argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
    elif argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
