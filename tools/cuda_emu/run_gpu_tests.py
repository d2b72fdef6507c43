"""Runs the GPU test files (tests/test_cuda_ops.py, test_device_array.py, test_cuda_step.py,
test_cuda_bf16.py, test_bench_step_cuda.py, test_cuda_policy_head.py,
test_cuda_device_batch.py, test_cuda_arena.py)
against manaka._cuda built on the CPU emulator: the real binding, kernels and runtime
wrapper, with host memory standing in for device memory.

    python tools/cuda_emu/run_gpu_tests.py [pytest arguments]

MANAKA_CUDA_EMULATED=1 tells those tests to skip what is too big to emulate."""
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def main(argv):
    sys.path.insert(0, HERE)
    import build

    so = build.build_extension(os.environ.get("MK_EMU_EXT_DIR") or os.path.join(ROOT, "build", "cuda_emu_ext"))
    spec = importlib.util.spec_from_file_location("manaka._cuda", so)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    import ctypes

    ctypes.CDLL(so).mk_emu_strict(1)  # device-memory rules as on a GPU
    sys.modules["manaka._cuda"] = module
    os.environ["MANAKA_CUDA_EMULATED"] = "1"
    os.environ["MANAKA_CUBLAS"] = build.build_cublas(os.path.dirname(so))  # the loops of cublas_emu.c
    sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]
    import pytest

    args = list(argv)
    if not any(not a.startswith("-") for a in args):
        args += [os.path.join(ROOT, "tests", name) for name in
                 ("test_cuda_ops.py", "test_device_array.py", "test_cuda_step.py",
                  "test_cuda_bf16.py", "test_bench_step_cuda.py", "test_cuda_policy_head.py",
                  "test_cuda_device_batch.py", "test_cuda_arena.py")]
    return pytest.main(["-q", "-p", "no:cacheprovider", "-rs", *args])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
