"""cuBLAS handles, one per (device, stream), on the CPU emulation of the device with
tools/cuda_emu/cublas_emu.c standing in for cuBLAS (it counts handles and the GEMMs each
stream received). One process-wide handle, re-pointed with cublasSetStream before each GEMM,
sent GEMMs to another thread's stream when two models ran at once with the GIL released."""
import ctypes
import shutil
import threading

import numpy as np
import pytest

import emu_build

pytestmark = pytest.mark.skipif(shutil.which("g++") is None or shutil.which("gcc") is None,
                                reason="no g++/gcc to build the CPU emulation of the CUDA kernels")
P, I64, F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float


@pytest.fixture(scope="module")
def libs():
    # The library test_cuda_emulated.py builds (and loads: the handle table is shared with
    # it, so the counts below are relative).
    emu = ctypes.CDLL(emu_build.library())
    blas = ctypes.CDLL(emu_build.cublas())
    emu.mk_gemm_cuda.argtypes = [P, ctypes.c_int, ctypes.c_int, I64, I64, I64, F, P, I64, P, I64, F, P, I64]
    emu.mk_cublas_load.argtypes = [ctypes.c_char_p]
    blas.cublas_emu_gemms_on.argtypes = [P]
    blas.cublas_emu_gemms_on.restype = ctypes.c_long
    assert emu.mk_cublas_load(emu_build.cublas().encode()) == 0
    return emu, blas


def gemm(emu, stream, rng, m=3, n=4, k=5):
    """C = A @ B on `stream`, checked against NumPy."""
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    c = np.zeros((m, n), np.float32)
    rc = emu.mk_gemm_cuda(stream, 0, 0, m, n, k, 1.0, a.ctypes.data, k, b.ctypes.data, n, 0.0, c.ctypes.data, n)
    assert rc == 0
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_one_handle_per_device_and_stream(libs):
    emu, blas = libs
    rng = np.random.default_rng()
    before = emu.mk_cublas_handle_count()
    for stream in (0x100, 0x200, 0x100, 0x200, 0x100):
        gemm(emu, stream, rng)
    assert emu.mk_cublas_handle_count() == before + 2 == blas.cublas_emu_handles()
    emu.mk_emu_set_device(1)  # the same stream value on another device is another handle
    try:
        gemm(emu, 0x100, rng)
    finally:
        emu.mk_emu_set_device(0)
    assert emu.mk_cublas_handle_count() == before + 3
    assert blas.cublas_emu_gemms_on(0x100) >= 3 and blas.cublas_emu_gemms_on(0x200) >= 2


def test_concurrent_threads_keep_their_gemms_on_their_own_streams(libs):
    emu, blas = libs
    blas.cublas_emu_reset()
    counts = {0x300: 150, 0x400: 250, 0x500: 200}
    errors = []

    def worker(stream, n):
        rng = np.random.default_rng(stream)
        try:
            for _ in range(n):
                gemm(emu, stream, rng, 2, 2, 2)
        except AssertionError as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=item) for item in counts.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert {s: blas.cublas_emu_gemms_on(s) for s in counts} == counts
