"""Runs the GPU test files (tests/test_cuda_ops.py, test_device_array.py, test_cuda_step.py,
test_cuda_bf16.py, test_bench_step_cuda.py, test_cuda_policy_head.py,
test_cuda_device_batch.py, test_cuda_arena.py)
against manaka._cuda built on the CPU emulator: the real binding, kernels and runtime
wrapper, with host memory standing in for device memory.

    python tools/cuda_emu/run_gpu_tests.py [pytest arguments]

MANAKA_CUDA_EMULATED=1 tells those tests to skip what is too big to emulate."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def main(argv):
    sys.path.insert(0, HERE)
    import emulated

    emulated.install()
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
