"""lab/atomic_scatter: the atomicAdd table gradients, run on the CPU emulation of CUDA
(tools/cuda_emu), against the NumPy references of the two backward passes; and the
experiment still compiles with nvcc against the product's headers."""
import ctypes
import os
import shutil
import subprocess

import numpy as np
import pytest

import emu_build
import op_inputs
import reference as ref
from assertions import assert_close
from op_inputs import legal_indices as legal

P, I64 = ctypes.c_void_p, ctypes.c_int64
LAB = os.path.join(emu_build.ROOT, "lab", "atomic_scatter")


@pytest.fixture(scope="module")
def lib():
    if not shutil.which("g++"):
        pytest.skip("the CUDA emulation needs g++")
    lib = ctypes.CDLL(emu_build.lab("atomic_scatter"))
    lib.mk_lab_gather_dot_table_atomic_cuda.argtypes = [P, P, P, P, P, I64, I64, I64, I64, P]
    lib.mk_lab_pair_sums_table_atomic_cuda.argtypes = [P, P, P, I64, I64, I64, I64, P]
    lib.mk_lab_gather_dot_table_atomic_cuda.restype = lib.mk_lab_pair_sums_table_atomic_cuda.restype = ctypes.c_int
    lib.mk_error.restype = ctypes.c_char_p
    return lib


def run(lib, name, *args):
    data = [a.ctypes.data if isinstance(a, np.ndarray) else a for a in args]
    assert getattr(lib, name)(None, *data) == 0, lib.mk_error().decode()


@pytest.mark.parametrize("W, collide, with_counts", [(300, None, True), (33, 2, True), (8, 1, False)])
def test_gather_dot_table_matches_reference(lib, W, collide, with_counts):
    rng = np.random.default_rng(W)
    B, L, M = 6, 23, 30
    hidden = rng.standard_normal((B, W)).astype(np.float32)
    table = rng.standard_normal((M, W)).astype(np.float32)
    indices, counts = legal(rng, B, L, M, collide=collide)
    if not with_counts:
        indices, counts = np.abs(indices), None
    grad = rng.standard_normal((B, L)).astype(np.float32)
    got = np.full((M, W), np.nan, np.float32)  # every row written, touched or not
    run(lib, "mk_lab_gather_dot_table_atomic_cuda", grad, hidden, indices,
        None if counts is None else counts, B, L, W, M, got)
    assert_close(got, ref.gather_dot_backward(grad, hidden, table, indices, counts)[1])


@pytest.mark.parametrize("Pw, T, V", [(16, 40, 25), (3, 6, 4), (300, 9, 6), (16, 1, 5)])
def test_pair_sums_table_matches_reference(lib, Pw, T, V):
    rng = np.random.default_rng(Pw + T + V)
    B, S = 2, 2
    num_pairs = V * (V + 1) // 2
    tokens = op_inputs.tokens(rng, B, S, T, V, empty=0.3)
    grad = rng.standard_normal((B, S, Pw)).astype(np.float32)
    got = np.full((num_pairs, Pw), np.nan, np.float32)
    run(lib, "mk_lab_pair_sums_table_atomic_cuda", grad, tokens, B * S, T, Pw, num_pairs, got)
    assert_close(got, ref.pair_sums_backward(grad, tokens, num_pairs))


def nvcc():
    found = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if not found:
        pytest.skip("nvcc not found")
    return found


def test_the_experiment_compiles_with_nvcc(tmp_path):
    """The lab is built by nobody else: this keeps it compiling against the product's headers."""
    src = os.path.join(LAB, "atomic_scatter.cu")
    subprocess.run([nvcc(), "-std=c++17", "-arch=sm_90", "-Xcompiler", "-fPIC", "-I", os.path.join(emu_build.ROOT, "csrc"),
                    "-c", src, "-o", str(tmp_path / "atomic_scatter.o")], check=True, capture_output=True, timeout=600)
