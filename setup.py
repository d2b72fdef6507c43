"""Builds manaka's C core as the extension manaka._core (always), with OpenMP and -O3,
its test and benchmark hooks as manaka._testing (always; csrc/python/testing/, which runs
_core's engine through a capsule instead of linking a copy, and which the package itself
never imports, so the shipped _core holds no hooks), and the CUDA backend as the separate
extension manaka._cuda, so that _core never depends on CUDA libraries. By default manaka._cuda is built only when nvcc is found and a GPU is
visible, and then only for that GPU's compute capability (as PyTorch's extension builder
does): nvcc takes minutes per GPU generation, which a machine without a GPU cannot use.
The build prints one line saying what it builds and why (pip shows it with -v).

GEMM comes from OpenBLAS as shipped by the scipy-openblas32 wheel (a build and runtime
dependency). The extension links it by soname only, with no rpath into the (temporary,
isolated) build environment: manaka/__init__.py loads the installed copy with RTLD_GLOBAL
before importing _core, and the loader reuses it.

Environment:
  MANAKA_PORTABLE=1      build for a generic x86-64/arm64 CPU instead of -march=native
  MANAKA_CUDA=0|1        skip the CUDA backend / build it for every generation (default
                         "80;86;89;90") whether or not a GPU is visible (CI does, to compile it)
                         (default: build it for the visible GPUs when nvcc is found)
  MANAKA_CUDA_ARCH=...   compute capabilities, e.g. "90" or "80;86": overrides both lists and
                         builds the backend when nvcc is found, GPU or not; PTX for the
                         highest is embedded too, so newer GPUs can JIT it
  CUDA_HOME / CUDA_PATH  the toolkit (default: /usr/local/cuda, or nvcc's on PATH)
  MANAKA_OPENMP=0        compile the C core without OpenMP pragmas (every CPU loop on the calling
                         thread; for tools/sanitize.sh tsan: TSan cannot see libgomp's synchronisation)
  MANAKA_WERROR=1        treat warnings in the CUDA backend (nvcc and its C binding) as errors
  MANAKA_LIBOMP=PREFIX   OpenMP from LLVM's libomp under PREFIX (include/omp.h, lib/libomp.*),
                         compiled with -Xpreprocessor -fopenmp and linked with -lomp: what
                         Apple clang needs (found by itself there: Homebrew's `brew --prefix
                         libomp`, else a conda environment's llvm-openmp); any clang accepts it

macOS (Apple clang, or any build on darwin): OpenMP as MANAKA_LIBOMP says, no -march=native
on arm64 (-mcpu=native instead), and never the CUDA backend.
"""
import concurrent.futures
import ctypes
import glob
import os
import shutil
import subprocess
import sys
import sysconfig

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


# --------------------------------------------------------------------------- compiler and OpenMP


def compiler_command(env=os.environ):
    """The C compiler setuptools will call (CC, else Python's own), as an argv prefix."""
    return (env.get("CC") or sysconfig.get_config_var("CC") or "cc").split()


def is_apple_clang(version_text, platform=sys.platform):
    """Apple's clang (which takes OpenMP only as -Xpreprocessor -fopenmp, with libomp
    supplied): `cc --version` says "Apple clang", or the build is on macOS."""
    return platform == "darwin" or "apple clang" in version_text.lower()


def compiler_version(command):
    try:
        return subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def libomp_at(prefix):
    """(include dir, lib dir) of a libomp installed under prefix, or None."""
    if not prefix:
        return None
    include, lib = os.path.join(prefix, "include"), os.path.join(prefix, "lib")
    libs = [n for n in os.listdir(lib) if n.startswith("libomp.")] if os.path.isdir(lib) else []
    return (include, lib) if os.path.exists(os.path.join(include, "omp.h")) and libs else None


def brew_prefix(formula="libomp"):
    try:
        done = subprocess.run(["brew", "--prefix", formula], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def find_libomp(env=os.environ, brew_prefix=brew_prefix):
    """(include dir, lib dir) of LLVM's libomp for Apple clang: MANAKA_LIBOMP, Homebrew's
    libomp, or a conda environment's llvm-openmp (CONDA_PREFIX); None when none is found."""
    if env.get("MANAKA_LIBOMP"):
        return libomp_at(env["MANAKA_LIBOMP"])
    return libomp_at(brew_prefix()) or libomp_at(env.get("CONDA_PREFIX"))


def openmp_flags(apple, env=os.environ, find_libomp=find_libomp):
    """(compile flags, link flags) for OpenMP: -fopenmp (GCC, LLVM clang), or with Apple
    clang or MANAKA_LIBOMP, -Xpreprocessor -fopenmp and libomp's headers, linked with -lomp
    (and an rpath to it, for an in-place build; a wheel for macOS bundles it with delocate)."""
    if not apple and not env.get("MANAKA_LIBOMP"):
        return ["-fopenmp"], ["-fopenmp"]
    found = find_libomp(env)
    if found is None:
        sys.exit("setup.py: Apple clang needs LLVM's OpenMP runtime: brew install libomp (or conda install "
                 "llvm-openmp), or set MANAKA_LIBOMP to a prefix holding include/omp.h and lib/libomp.*"
                 if apple else f"setup.py: MANAKA_LIBOMP={env['MANAKA_LIBOMP']!r} holds no include/omp.h "
                 "and lib/libomp.*")
    include, lib = found
    return ["-Xpreprocessor", "-fopenmp", f"-I{include}"], [f"-L{lib}", "-lomp", f"-Wl,-rpath,{lib}"]


def arch_flags(apple, machine=None):
    """-march=native, except -mcpu=native on Apple arm64 (Apple clang refuses -march=native
    there); none with MANAKA_PORTABLE=1."""
    if os.environ.get("MANAKA_PORTABLE", "0") == "1":
        return []
    machine = machine or os.uname().machine
    return ["-mcpu=native"] if apple and machine in ("arm64", "aarch64") else ["-march=native"]


APPLE = is_apple_clang(compiler_version(compiler_command())) if __name__ == "__main__" else False


def c_flags(apple=None):
    # -fno-math-errno: nothing reads errno, and with it sqrtf/expf in a loop keep a scalar
    # error path that stops vectorisation (AdamW ran scalar); results are unchanged.
    apple = APPLE if apple is None else apple
    omp = openmp_flags(apple)[0] if os.environ.get("MANAKA_OPENMP", "1") != "0" else []
    flags = ["-std=c11", "-O3", *omp, "-fno-math-errno", "-pthread", "-Wall", "-Wno-unused-function"]
    flags += arch_flags(apple)
    if not omp:  # the OpenMP runtime is still linked: omp_* calls stay valid
        flags += ["-Wno-unknown-pragmas"]
    return flags


# --------------------------------------------------------------------------- CUDA


def find_cuda():
    """The CUDA toolkit's root (holding bin/nvcc), or None."""
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.path.exists(os.path.join(root, "bin", "nvcc")):
            return root
    nvcc = shutil.which("nvcc")
    return os.path.dirname(os.path.dirname(os.path.realpath(nvcc))) if nvcc else None


def parse_archs(raw):
    archs = sorted({a.strip().replace("sm_", "").replace(".", "") for a in raw.replace(",", ";").split(";") if a.strip()}, key=int)
    if not archs or not all(a.isdigit() for a in archs):
        sys.exit(f"setup.py: MANAKA_CUDA_ARCH={raw!r} is not a list of compute capabilities like '80;90'")
    return archs


def visible_gpus(libcuda="libcuda.so.1"):
    """(compute capabilities of the GPUs the driver shows, e.g. ["90"], and their names), or
    ([], why none is visible). Asked of the driver API through ctypes, as nothing is built yet;
    no driver library, a failing cuInit (no device, CUDA_VISIBLE_DEVICES="") or a count of
    0 all mean no GPU is visible."""
    try:
        cu = ctypes.CDLL(libcuda)
    except OSError:
        return [], f"no NVIDIA driver: {libcuda} not found"
    count, value = ctypes.c_int(0), ctypes.c_int(0)
    rc = cu.cuInit(0)
    if rc != 0:
        return [], f"cuInit failed: CUresult {rc}"
    if cu.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return [], "the driver shows no device"
    archs, names = set(), []
    for i in range(count.value):
        device = ctypes.c_int(0)
        cc = []
        name = ctypes.create_string_buffer(128)
        if cu.cuDeviceGet(ctypes.byref(device), i) != 0:
            continue
        for attribute in (75, 76):  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, _MINOR
            if cu.cuDeviceGetAttribute(ctypes.byref(value), attribute, device) != 0:
                break
            cc.append(value.value)
        if len(cc) == 2:
            archs.add(f"{cc[0]}{cc[1]}")
            if cu.cuDeviceGetName(name, len(name), device) == 0:
                names.append(name.value.decode(errors="replace"))
    if not archs:
        return [], "the driver gave no device's compute capability"
    return sorted(archs, key=int), ", ".join(sorted(set(names))) or "unnamed"


def find_cudart(root):
    return next((os.path.join(root, d, "libcudart_static.a") for d in ("lib64", "lib", "targets/x86_64-linux/lib")
                 if os.path.exists(os.path.join(root, d, "libcudart_static.a"))), None)


def nvcc_archs(root):
    """The compute capabilities this nvcc compiles for (nvcc --list-gpu-arch), or None."""
    try:
        out = subprocess.run([os.path.join(root, "bin", "nvcc"), "--list-gpu-arch"], capture_output=True,
                             text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = [w[len("compute_"):] for w in out.split() if w.startswith("compute_") and w[len("compute_"):].isdigit()]
    return sorted(set(found), key=int) or None


def supported_by_nvcc(archs, known):
    """A GPU newer than this nvcc knows gets the newest generation nvcc has below it (its
    PTX, embedded too, is compiled for the GPU by the driver)."""
    if not known:
        return archs
    return sorted({a if a in known else max((k for k in known if int(k) <= int(a)), key=int, default=a)
                   for a in archs}, key=int)


def span(archs):
    return "sm_" + archs[0] if len(archs) == 1 else f"sm_{archs[0]}..{archs[-1]}"


def cuda_config(env=os.environ, find_cuda=find_cuda, find_cudart=find_cudart, visible_gpus=visible_gpus):
    """(the CUDA build's settings or None, the one line saying what is built and why)."""
    want, arch_env = env.get("MANAKA_CUDA", "auto"), env.get("MANAKA_CUDA_ARCH")
    if want not in ("0", "1", "auto"):
        sys.exit(f"setup.py: MANAKA_CUDA must be 0, 1 or unset, got {want!r}")
    all_archs = parse_archs(DEFAULT_ARCHS)

    def skipped(why):
        return None, f"setup.py: building manaka._core (CPU); manaka._cuda skipped: {why}"

    if want == "0":
        return skipped("MANAKA_CUDA=0")
    if sys.platform == "darwin":  # no CUDA on macOS
        if want == "1" or arch_env:
            sys.exit("setup.py: MANAKA_CUDA=1 / MANAKA_CUDA_ARCH: there is no CUDA on macOS")
        return skipped("macOS has no CUDA")
    root = find_cuda()
    if root is None:
        if want == "1":
            sys.exit("setup.py: MANAKA_CUDA=1 but nvcc was not found (set CUDA_HOME or put nvcc on PATH)")
        return skipped("nvcc not found (set CUDA_HOME or put nvcc on PATH to build it)")
    cudart = find_cudart(root)
    if cudart is None:
        if want == "1":
            sys.exit(f"setup.py: MANAKA_CUDA=1 but libcudart_static.a was not found under {root}")
        return skipped(f"libcudart_static.a not found under {root}")
    if arch_env:
        archs, why = parse_archs(arch_env), "MANAKA_CUDA_ARCH"
    elif want == "1":
        archs, why = all_archs, "MANAKA_CUDA=1: every generation, GPU or not"
    else:
        archs, names = visible_gpus()  # names: why none is visible, when none is
        if not archs:
            return skipped(f"nvcc found but no GPU visible ({names}; MANAKA_CUDA=1 builds it for {span(all_archs)})")
        old = [a for a in archs if int(a) < int(all_archs[0])]
        if old:
            # The backend is written for sm_80 on (the default list's lowest).
            return skipped(f"the visible GPU ({names}) is sm_{old[0]}, below the sm_{all_archs[0]} "
                           f"the CUDA backend supports (MANAKA_CUDA_ARCH={old[0]} tries anyway)")
        archs = supported_by_nvcc(archs, nvcc_archs(root))
        why = f"the visible GPU: {names}; MANAKA_CUDA=1 builds for {span(all_archs)}"
    line = f"setup.py: building manaka._core (CPU) and manaka._cuda for {', '.join('sm_' + a for a in archs)} + PTX ({why})"
    return {"root": root, "archs": archs, "cudart": cudart}, line


def nvcc_flags(archs):
    flags = ["-std=c++17", "-O3", "-Xcompiler", "-fPIC,-Wall,-Wextra,-fvisibility=hidden", "-Icsrc"]
    if WERROR:
        flags += ["-Werror", "all-warnings", "-Xcompiler", "-Werror"]
    for a in archs:
        flags += ["-gencode", f"arch=compute_{a},code=sm_{a}"]
    flags += ["-gencode", f"arch=compute_{archs[-1]},code=compute_{archs[-1]}"]  # PTX
    return flags


def without_rpath(argv):
    """A link command without its -Wl,-rpath options (ours are added per extension)."""
    return [a for a in argv if not a.startswith(("-Wl,-rpath,", "-Wl,-rpath=", "-Wl,-R"))]


class BuildExt(build_ext):
    """Compiles the .cu files of manaka._cuda with nvcc (only those out of date), then lets
    setuptools compile the C files and link everything with the static CUDA runtime."""

    def run(self):
        # Here, not at import: pip runs setup.py once per build hook, but builds once.
        print(BUILD_LINE, file=sys.stderr, flush=True)
        super().run()

    def build_extensions(self):
        # The Python build's link command may carry an rpath into its own prefix (pyenv's
        # -Wl,-rpath,<prefix>/lib): a stray RUNPATH in every .so, naming the build machine.
        self.compiler.linker_so = without_rpath(self.compiler.linker_so)
        # distutils compiles an extension's C files one after another; the core has ~40, and
        # a first install waits for them, so they are compiled side by side here.
        compile_one = self.compiler._compile

        def compile_all(sources, output_dir=None, macros=None, include_dirs=None, debug=0,
                        extra_preargs=None, extra_postargs=None, depends=None):
            macros, objects, extra_postargs, pp_opts, build = self.compiler._setup_compile(
                output_dir, macros, include_dirs, sources, depends, extra_postargs)
            cc_args = self.compiler._get_cc_args(pp_opts, debug, extra_preargs)
            todo = [(obj, *build[obj]) for obj in objects if obj in build]
            with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
                list(pool.map(lambda t: compile_one(t[0], t[1], t[2], cc_args, extra_postargs, pp_opts), todo))
            return objects

        self.compiler.compile = compile_all
        super().build_extensions()

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
        headers = sources("core/*.h", "cuda/*.cuh", "cuda/*.h")
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


def openblas():
    """(include dir, library dir, library name) of the scipy-openblas32 wheel."""
    try:
        import scipy_openblas32
    except ImportError:
        sys.exit("setup.py: building manaka needs the scipy-openblas32 wheel (pip install scipy-openblas32; "
                 "on a machine without network, carry its wheel: tools/gpu_check.sh --fetch)")

    return (scipy_openblas32.get_include_dir(), scipy_openblas32.get_lib_dir(),
            scipy_openblas32.get_library())


def extensions(cuda):
    blas_include, blas_libdir, blas_lib = openblas()
    core = Extension(
        "manaka._core",
        sources=sources("core/*.c", "data/*.c", "cpu/*.c", "shogi/*.c", "python/common/*.c", "python/core/*.c"),
        include_dirs=[numpy.get_include(), "csrc", blas_include],
        library_dirs=[blas_libdir],
        libraries=[blas_lib],
        extra_compile_args=c_flags(),
        extra_link_args=[*openmp_flags(APPLE)[1], "-pthread"],
        depends=sources("core/*.h", "core/*.def", "data/*.h", "cpu/*.h", "shogi/*.h", "python/common/*.h", "python/core/*.h"),
    )
    # The hooks and the CUDA backend link no engine code: they call _core's, which
    # manaka/__init__.py loads with RTLD_GLOBAL (csrc/python/common/engine_link.h says why),
    # so they have one error buffer, thread count and set of checks with it. Hidden
    # visibility: none of their own symbols can stand in for _core's, nor the reverse.
    testing = Extension(
        "manaka._testing",
        sources=sources("python/testing/*.c"),
        include_dirs=[numpy.get_include(), "csrc"],
        extra_compile_args=c_flags() + ["-fvisibility=hidden"],
        depends=sources("core/*.h", "core/*.def", "data/*.h", "python/common/*.h", "python/testing/*.h"),
    )
    if not cuda:
        return [core, testing]
    # Every .cu in csrc/cuda: the fused ops, their index checks, the runtime services the
    # binding uses, and the training step's primitives and op table (backend_cuda.cu). cuBLAS
    # is not linked: cublas_dynamic.c loads it at run time (see its header for why). The
    # engine's host side (checks, errors, argument conversion) is _core's, as for _testing.
    archs = ";".join(cuda["archs"])
    return [core, testing, Extension(
        "manaka._cuda",
        sources=sources("cuda/*.cu", "cuda/*.c") + sources("python/cuda/*.c"),
        include_dirs=[numpy.get_include(), "csrc"],
        define_macros=[("MK_CUDA_ARCHS", f'"{archs}"')],
        extra_compile_args=[f for f in c_flags() if f not in openmp_flags(APPLE)[0]] + ["-fvisibility=hidden"] + (["-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers", "-Werror"] if WERROR else []),
        # The static runtime: the module needs only the driver (libcuda.so, opened at run
        # time by cudart), so it imports on a machine with no GPU or driver at all.
        extra_link_args=[cuda["cudart"], "-ldl", "-lrt", "-lpthread", "-lstdc++"],
        depends=sources("core/*.h", "core/*.def", "python/common/*.h", "python/cuda/*.h", "cuda/*.h", "cuda/*.cuh"),
    )]


# tests/packaging/test_setup.py imports this file for its functions, without building anything.
if __name__ == "__main__":
    CUDA, BUILD_LINE = cuda_config()
    setup(ext_modules=extensions(CUDA), cmdclass={"build_ext": BuildExt})
