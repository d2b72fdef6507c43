"""MovePairSums on the CUDA backend's table at the shapes of real use (the conformance case,
tests/conformance/test_backend_ops.py, holds every backend to the NumPy reference on small
shapes): against the CPU backend, and the backward's bits the same on every run, whether
its scratch comes from the step's region or the workspace pool. Real positions hold tokens
that most of them share (pawns on their home squares), the case where many occurrences of
one token are summed in order. The seed shapes are too big for the emulated device, which
runs a smaller copy of the same checks."""
import os

import numpy as np
import pytest

from assertions import assert_close
from cuda_backends import backends  # noqa: F401 (a fixture)

pytestmark = pytest.mark.cuda  # tools/cuda_emu/run_gpu_tests.py runs it on the emulated device
EMULATED = os.environ.get("MANAKA_CUDA_EMULATED") == "1"


def _inputs(rng, B, T, L, V, C):
    """tokens [B, T] of which the first T / 3 slots draw from 24 common tokens; legal moves
    below 3 C (so some classes repeat in a position) with log-normal counts, padded with -1."""
    tokens = rng.integers(0, V, (B, T)).astype(np.int32)
    tokens[:, :T // 3] = rng.integers(0, 24, (B, T // 3))
    tokens[rng.random((B, T)) < 0.05] = -1
    counts = np.clip(np.round(rng.lognormal(np.log(90), 0.6, B)), 1, L).astype(np.int32)
    counts[-1] = L
    legal = rng.integers(0, 3 * C, (B, L)).astype(np.int32)
    legal[np.arange(L)[None] >= counts[:, None]] = -1
    return tokens, legal, counts


SHAPES = [pytest.param(64, 40, 200, 300, 250, id="emulated-size"),
          pytest.param(2048, 40, 600, 2344, 2187, id="seed-shapes",
                       marks=pytest.mark.skipif(EMULATED, reason="too large for the CPU emulation of the device"))]


@pytest.mark.parametrize("B, T, L, V, C", SHAPES)
def test_backward_is_bitwise_reproducible_and_matches_the_cpu(backends, B, T, L, V, C):
    cuda, cpu = backends
    rng = np.random.default_rng(B + L)
    tokens, legal, counts = _inputs(rng, B, T, L, V, C)
    grad = rng.standard_normal((B, L)).astype(np.float32)
    want = np.empty((V, C), np.float32)
    cpu.call("move_pair_sums_backward", None, grad.ctypes.data, tokens.ctypes.data, T,
             legal.ctypes.data, counts.ctypes.data, B, T, L, V, C, want.ctypes.data, None, 0)
    args = [cuda.put(grad), cuda.put(tokens), T, cuda.put(legal), cuda.put(counts), B, T, L, V, C]
    work, nbytes = cuda.scratch(B=B, L=L, T=T, V=V, M=3 * C)
    runs = []
    for scratch in ((work, nbytes), (work, nbytes), (None, 0)):  # the step's, twice; the pool's
        out = cuda.empty((V, C))
        cuda.call("move_pair_sums_backward", None, *args, out, *scratch)
        runs.append(cuda.get(out))
    assert_close(runs[0], want)
    for got in runs[1:]:
        assert got.tobytes() == runs[0].tobytes(), "the backward's bits differ between runs"


@pytest.mark.parametrize("B, T, L, V, C", SHAPES)
def test_forward_matches_the_cpu(backends, B, T, L, V, C):
    cuda, cpu = backends
    rng = np.random.default_rng(B + T)
    tokens, legal, counts = _inputs(rng, B, T, L, V, C)
    table = rng.standard_normal((V, C)).astype(np.float32)
    base = rng.standard_normal((B, L)).astype(np.float32)
    want = base.copy()
    cpu.call("move_pair_sums", None, table.ctypes.data, tokens.ctypes.data, T, legal.ctypes.data,
             counts.ctypes.data, B, T, L, C, want.ctypes.data)
    logits = cuda.put(base)
    cuda.call("move_pair_sums", None, cuda.put(table), cuda.put(tokens), T, cuda.put(legal),
              cuda.put(counts), B, T, L, C, logits)
    got = cuda.get(logits)
    assert_close(got, want)
    padded = np.arange(L)[None] >= counts[:, None]
    np.testing.assert_array_equal(got[padded], base[padded])  # padded slots untouched
