"""Builds manaka's C core as the extension manaka._core (always), with OpenMP and -O3,
and the CUDA backend as the separate extension manaka._cuda when the CUDA toolkit is
found, so that _core never depends on CUDA libraries.

GEMM comes from OpenBLAS as shipped by the scipy-openblas32 wheel (a build and runtime
dependency). The extension links it by soname only, with no rpath into the (temporary,
isolated) build environment: manaka/__init__.py loads the installed copy with RTLD_GLOBAL
before importing _core, and the loader reuses it.

Environment:
  MANAKA_PORTABLE=1      build for a generic x86-64/arm64 CPU instead of -march=native
  MANAKA_CUDA=0|1        skip / require the CUDA backend (default: build it when nvcc is found)
  MANAKA_CUDA_ARCH=...   compute capabilities, e.g. "90" or "80;86" (default "80;86;89;90");
                         PTX for the highest is embedded too, so newer GPUs can JIT it
  CUDA_HOME / CUDA_PATH  the toolkit (default: /usr/local/cuda, or nvcc's on PATH)
  MANAKA_WERROR=1        treat warnings in the CUDA backend (nvcc and its C binding) as errors
"""
import concurrent.futures
import glob
import os
import shutil
import subprocess
import sys

import numpy
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_ARCHS = "80;86;89;90"
WERROR = os.environ.get("MANAKA_WERROR", "0") == "1"


def sources(*patterns):
    found = []
    for pattern in patterns:
        found += sorted(glob.glob(os.path.join("csrc", pattern)))
    return found


def c_flags():
    # -fno-math-errno: nothing reads errno, and with it sqrtf/expf in a loop keep a scalar
    # error path that stops vectorisation (AdamW ran scalar); results are unchanged.
    flags = ["-std=c11", "-O3", "-fopenmp", "-fno-math-errno", "-pthread", "-Wall", "-Wno-unused-function"]
    if os.environ.get("MANAKA_PORTABLE", "0") != "1":
        flags.append("-march=native")
    return flags


# --------------------------------------------------------------------------- CUDA


def find_cuda():
    """The CUDA toolkit's root (holding bin/nvcc), or None."""
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.path.exists(os.path.join(root, "bin", "nvcc")):
            return root
    nvcc = shutil.which("nvcc")
    return os.path.dirname(os.path.dirname(os.path.realpath(nvcc))) if nvcc else None


def cuda_archs():
    raw = os.environ.get("MANAKA_CUDA_ARCH", DEFAULT_ARCHS)
    archs = sorted({a.strip().replace("sm_", "").replace(".", "") for a in raw.replace(",", ";").split(";") if a.strip()}, key=int)
    if not archs or not all(a.isdigit() for a in archs):
        sys.exit(f"setup.py: MANAKA_CUDA_ARCH={raw!r} is not a list of compute capabilities like '80;90'")
    return archs


def nvcc_flags(archs):
    flags = ["-std=c++17", "-O3", "-Xcompiler", "-fPIC,-Wall,-Wextra", "-Icsrc"]
    if WERROR:
        flags += ["-Werror", "all-warnings", "-Xcompiler", "-Werror"]
    for a in archs:
        flags += ["-gencode", f"arch=compute_{a},code=sm_{a}"]
    flags += ["-gencode", f"arch=compute_{archs[-1]},code=compute_{archs[-1]}"]  # PTX
    return flags


class BuildExt(build_ext):
    """Compiles the .cu files of manaka._cuda with nvcc (only those out of date), then lets
    setuptools compile the C files and link everything with the static CUDA runtime."""

    def build_extension(self, ext):
        cu = [s for s in ext.sources if s.endswith(".cu")]
        if cu:
            ext.sources = [s for s in ext.sources if not s.endswith(".cu")]
            objects = self.compile_cuda(cu, ext)
            ext.extra_objects = objects + ext.extra_objects
            ext.depends = ext.depends + objects
        super().build_extension(ext)

    def compile_cuda(self, cu_files, ext):
        root, archs = CUDA["root"], CUDA["archs"]
        nvcc = os.path.join(root, "bin", "nvcc")
        flags = nvcc_flags(archs)
        out_dir = os.path.join(self.build_temp, "cuda")
        os.makedirs(out_dir, exist_ok=True)
        stamp = os.path.join(out_dir, "flags.txt")
        same_flags = os.path.exists(stamp) and open(stamp).read() == " ".join(flags)
        headers = sources("*.h", "cuda/*.cuh", "cuda/*.h")
        newest_header = max((os.path.getmtime(h) for h in headers), default=0)
        objects, commands = [], []
        for src in cu_files:
            obj = os.path.join(out_dir, os.path.basename(src)[:-3] + ".o")
            objects.append(obj)
            if (same_flags and not self.force and os.path.exists(obj)
                    and os.path.getmtime(obj) >= max(os.path.getmtime(src), newest_header)):
                continue
            commands.append([nvcc, *flags, "-c", src, "-o", obj])
        # nvcc runs one file on one core: compile the files side by side.
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            for cmd in commands:
                print(" ".join(cmd), flush=True)
            list(pool.map(subprocess.check_call, commands))
        with open(stamp, "w") as f:
            f.write(" ".join(flags))
        return objects


def cuda_config():
    want = os.environ.get("MANAKA_CUDA", "auto")
    if want not in ("0", "1", "auto"):
        sys.exit(f"setup.py: MANAKA_CUDA must be 0, 1 or unset, got {want!r}")
    if want == "0":
        return None
    root = find_cuda()
    if root is None:
        if want == "1":
            sys.exit("setup.py: MANAKA_CUDA=1 but nvcc was not found (set CUDA_HOME or put nvcc on PATH)")
        print("setup.py: nvcc not found, building without the CUDA backend", file=sys.stderr)
        return None
    lib = next((os.path.join(root, d, "libcudart_static.a") for d in ("lib64", "lib", "targets/x86_64-linux/lib")
                if os.path.exists(os.path.join(root, d, "libcudart_static.a"))), None)
    if lib is None:
        msg = f"setup.py: libcudart_static.a not found under {root}"
        if want == "1":
            sys.exit(msg)
        print(msg + ", building without the CUDA backend", file=sys.stderr)
        return None
    return {"root": root, "archs": cuda_archs(), "cudart": lib}


def openblas():
    """(include dir, library dir, library name) of the scipy-openblas32 wheel."""
    try:
        import scipy_openblas32
    except ImportError:
        sys.exit("setup.py: building manaka needs the scipy-openblas32 wheel (pip install scipy-openblas32; "
                 "on a machine without network, carry its wheel: tools/gpu_check.sh --fetch)")

    return (scipy_openblas32.get_include_dir(), scipy_openblas32.get_lib_dir(),
            scipy_openblas32.get_library())


BLAS_INCLUDE, BLAS_LIBDIR, BLAS_LIB = openblas()

core = Extension(
    "manaka._core",
    sources=sources("*.c", "cpu/*.c", "shogi/*.c", "python/*.c"),
    include_dirs=[numpy.get_include(), "csrc", BLAS_INCLUDE],
    library_dirs=[BLAS_LIBDIR],
    libraries=[BLAS_LIB],
    extra_compile_args=c_flags(),
    extra_link_args=["-fopenmp", "-pthread"],
    depends=sources("*.h", "cpu/*.h", "shogi/*.h", "python/*.h"),
)
# The CUDA binding files (cuda_*.c) belong to manaka._cuda only.
core.sources = [s for s in core.sources if not os.path.basename(s).startswith("cuda_")]

# Every .cu in csrc/cuda: the fused ops, their index checks, the runtime services the
# binding uses, and the training step's primitives and op table (backend_cuda.cu). cuBLAS
# is not linked: cublas_dynamic.c loads it at run time (see its header for why).
CUDA_SOURCES = sources("cuda/*.cu", "cuda/*.c")

extensions = [core]
CUDA = cuda_config()
if CUDA:
    archs = ";".join(CUDA["archs"])
    extensions.append(Extension(
        "manaka._cuda",
        sources=CUDA_SOURCES + ["csrc/error.c", "csrc/backend.c", "csrc/batch.c", "csrc/python/binding.c"]
        + sources("python/cuda_*.c"),
        include_dirs=[numpy.get_include(), "csrc"],
        define_macros=[("MK_CUDA_ARCHS", f'"{archs}"')],
        extra_compile_args=[f for f in c_flags() if f != "-fopenmp"] + (["-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers", "-Werror"] if WERROR else []),
        # The static runtime: the module needs only the driver (libcuda.so, opened at run
        # time by cudart), so it imports on a machine with no GPU or driver at all.
        extra_link_args=[CUDA["cudart"], "-ldl", "-lrt", "-lpthread", "-lstdc++"],
        depends=sources("*.h", "python/*.h", "cuda/*.h", "cuda/*.cuh"),
    ))

setup(ext_modules=extensions, cmdclass={"build_ext": BuildExt})
