"""Builds csrc/cuda's kernels and launchers for the CPU emulator (include/emu.h) into one
shared library: ``python tools/cuda_emu/build.py [OUT_DIR]`` prints its path.

Each .cu file is rewritten (launches `k<<<grid, block, smem, stream>>>(args)` become
`mk_emu::launch(...)`, `extern __shared__ T x[]` a pointer to the block's buffer) and
compiled as C++20 with g++; nothing else in the kernel source changes."""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RUNTIME_CU = "runtime.cu"  # in the extension build only: the kernel tests call launchers directly
# Every kernel file: the fused ops and the training step's primitives and op table.
SOURCES = sorted(f for f in os.listdir(os.path.join(ROOT, "csrc", "cuda")) if f.endswith(".cu") and f != RUNTIME_CU)
# The C files those need (backend.c: the table check; batch.c: the batch's rules and the wording of its faults; check.c:
# the host check; cublas_dynamic.c: the cuBLAS loader, which the emulated build points at cublas_emu.c's stand-in).
C_SOURCES = ["csrc/core/error.c", "csrc/core/backend.c", "csrc/core/batch.c", "csrc/core/check.c"] + sorted(
    os.path.join("csrc", "cuda", f) for f in os.listdir(os.path.join(ROOT, "csrc", "cuda")) if f.endswith(".c"))


def split_top_level(text):
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


def rewrite_launches(src):
    out, pos = [], 0
    while True:
        at = src.find("<<<", pos)
        if at < 0:
            out.append(src[pos:])
            return "".join(out)
        head = re.search(r"([A-Za-z_]\w*(?:<[^<>;]*>)?)\s*$", src[pos:at])
        name_start = pos + head.start(1)
        end_cfg = src.index(">>>", at)
        config = split_top_level(src[at + 3:end_cfg])
        if len(config) != 4:
            raise SystemExit(f"translate: launch needs grid, block, smem, stream: {src[name_start:end_cfg + 3]}")
        open_paren = src.index("(", end_cfg)
        depth, i = 0, open_paren
        while True:
            depth += {"(": 1, ")": -1}.get(src[i], 0)
            if depth == 0:
                break
            i += 1
        args = src[open_paren + 1:i]
        out.append(src[pos:name_start])
        out.append(f"mk_emu::launch(dim3({config[0]}), dim3({config[1]}), {config[2]}, {config[3]}, "
                   f"[&]() {{ {head.group(1)}({args}); }})")
        pos = i + 1


def translate(src):
    src = re.sub(r"extern __shared__ (\w+) (\w+)\[\];", r"\1 *\2 = (\1 *)mk_emu::shared_mem();", src)
    src = re.sub(r"__shared__ (\w+) (\w+)((?:\[[^\]]+\])+);",
                 r'auto &\2 = *reinterpret_cast<\1 (*)\3>(mk_emu::static_shared("\2", sizeof(\1\3)));', src)
    return rewrite_launches(src)


def inputs():
    """Every file the emulated library is built from."""
    files = [os.path.join(ROOT, "csrc", "cuda", f) for f in os.listdir(os.path.join(ROOT, "csrc", "cuda"))]
    files += [os.path.join(ROOT, "csrc", "core", f) for f in os.listdir(os.path.join(ROOT, "csrc", "core"))]
    files += [__file__, os.path.join(HERE, "emu.cpp"), os.path.join(HERE, "cublas_emu.c")]
    for sub in ("common", "cuda"):
        files += [os.path.join(ROOT, "csrc", "python", sub, f) for f in os.listdir(os.path.join(ROOT, "csrc", "python", sub))]
    for folder, _, names in os.walk(os.path.join(HERE, "include")):
        files += [os.path.join(folder, n) for n in names]
    return files


def _up_to_date(target):
    return os.path.exists(target) and os.path.getmtime(target) >= max(os.path.getmtime(f) for f in inputs())


def _compile(out_dir, sources, link_extra, target, c_sources=C_SOURCES):
    inc = os.path.join(HERE, "include")
    cpps = []
    for name in sources:
        src = name if os.path.isabs(name) else os.path.join(ROOT, "csrc", "cuda", name)
        cpp = os.path.join(out_dir, os.path.basename(name)[:-3] + ".cpp")
        with open(src) as f, open(cpp, "w") as g:
            g.write(f'#line 1 "{src}"\n' + translate(f.read()))
        cpps.append(cpp)
    # MK_EMU_ASAN=1: AddressSanitizer, to catch out-of-bounds reads and writes (run Python
    # with LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0).
    sanitize = ["-fsanitize=address", "-fno-omit-frame-pointer"] if os.environ.get("MK_EMU_ASAN") == "1" else []
    c_objects = []
    for c in c_sources:
        obj = os.path.join(out_dir, os.path.basename(c)[:-2] + ".o")
        subprocess.check_call(["gcc", "-std=c11", "-O1", "-fPIC", *sanitize, "-I", inc, "-I", os.path.join(ROOT, "csrc"), "-c",
                               os.path.join(ROOT, c), "-o", obj])
        c_objects.append(obj)
    subprocess.check_call(["g++", "-std=c++20", "-O1", "-g", "-fPIC", "-shared", "-pthread", *sanitize,
                           "-I", inc, "-I", os.path.join(ROOT, "csrc"), "-I", os.path.join(ROOT, "csrc", "cuda"), "-include", "emu.h",
                           os.path.join(HERE, "emu.cpp"), *cpps, *c_objects, *link_extra, "-ldl", "-o", target])
    return target


def build(out_dir):
    """The kernels and launchers as libmk_emu.so in out_dir (rebuilt when out of date).

    It holds its own copy of the engine's host side (error.c, check.c, ...), and manaka._core
    is loaded with RTLD_GLOBAL in the same process (csrc/python/common/engine_link.h):
    -Bsymbolic binds the library's calls to its own functions, so its mk_fail writes the
    buffer its mk_error reads, not _core's."""
    os.makedirs(out_dir, exist_ok=True)
    lib = os.path.join(out_dir, "libmk_emu.so")
    return lib if _up_to_date(lib) else _compile(out_dir, SOURCES, ["-Wl,-Bsymbolic"], lib)


def build_lab(folder, out_dir):
    """The .cu files of an experiment folder (lab/<name>/) as lib<name>_emu.so in out_dir, with the
    engine's error functions (error.c) bound to its own copy as in build(): its launchers, for its tests."""
    os.makedirs(out_dir, exist_ok=True)
    sources = sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".cu"))
    lib = os.path.join(out_dir, f"lib{os.path.basename(folder.rstrip(os.sep))}_emu.so")
    fresh = os.path.exists(lib) and os.path.getmtime(lib) >= max(os.path.getmtime(f) for f in inputs() + sources)
    return lib if fresh else _compile(out_dir, sources, ["-Wl,-Bsymbolic"], lib, ["csrc/core/error.c"])


def build_cublas(out_dir):
    """cublas_emu.c as libcublas_emu.so in out_dir: what MANAKA_CUBLAS points at under emulation."""
    os.makedirs(out_dir, exist_ok=True)
    lib = os.path.join(out_dir, "libcublas_emu.so")
    if not _up_to_date(lib):
        subprocess.check_call(["gcc", "-std=c11", "-O2", "-fPIC", "-shared", "-pthread",
                               os.path.join(HERE, "cublas_emu.c"), "-o", lib])
    return lib


def build_extension(out_dir):
    """manaka._cuda built against the emulator: the real binding (csrc/python/cuda/*.c),
    kernels and runtime.cu, so the GPU test files run without a GPU (run_gpu_tests.py)."""
    import sysconfig

    import numpy

    os.makedirs(out_dir, exist_ok=True)
    target = os.path.join(out_dir, "_cuda" + sysconfig.get_config_var("EXT_SUFFIX"))
    if _up_to_date(target):
        return target
    py_dir = os.path.join(ROOT, "csrc", "python")
    objects = []
    for c in sorted("cuda/" + f for f in os.listdir(os.path.join(py_dir, "cuda")) if f.endswith(".c")):
        obj = os.path.join(out_dir, os.path.basename(c)[:-2] + ".o")
        subprocess.check_call(["gcc", "-std=c11", "-O1", "-g", "-fPIC", "-Wall", "-I", sysconfig.get_paths()["include"],
                               "-I", numpy.get_include(), "-I", os.path.join(ROOT, "csrc"),
                               '-DMK_CUDA_ARCHS="emulated"', "-c", os.path.join(py_dir, c), "-o", obj])
        objects.append(obj)
    # As in setup.py: the engine's host side (errors, checks, the argument conversion) is
    # manaka._core's, which the package loads with RTLD_GLOBAL, so no csrc/core file and no
    # python/common file is compiled in (csrc/python/common/engine_link.h).
    return _compile(out_dir, SOURCES + [RUNTIME_CU], objects, target,
                    [c for c in C_SOURCES if not c.startswith("csrc/core/")])


if __name__ == "__main__":
    print(build(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "cuda_emu")))
