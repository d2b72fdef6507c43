"""The CPU GEMM (csrc/cpu/gemm.c) through the _testing.backend_gemm hook: the same bits for
every thread count, shape by shape (tiles of C depend on the shape only), results within
float32 rounding of a float64 NumPy reference, and bad dimensions refused.

OpenBLAS chooses its kernel by CPU and by the shape of each call; the subprocess test
forces the kernels of several CPUs (OPENBLAS_CORETYPE) so that the thread-count promise is
checked against more than the kernel this machine happens to pick."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import manaka as mk
from manaka import _testing

THREADS = [1, 2, 3, 4, 5, (os.cpu_count() or 1) + 1]

# (M, N, K): tiny, 1-wide, prime, not a multiple of 16 or of a tile, large enough to be
# cut into many tiles, and the model's three GEMMs at trainer-like shapes (forward
# x @ W^T, dW = dout^T @ x, dx = dout @ W).
SHAPES = [(1, 1, 1), (1, 7, 3), (5, 1, 9), (2, 3, 0), (17, 19, 23), (97, 131, 53),
          (257, 263, 127), (300, 200, 1031), (1031, 37, 300), (1024, 512, 256),
          (523, 1021, 67)]
MODEL_GEMMS = [  # (M, N, K, trans_a, trans_b)
    (300, 300, 264, False, True), (300, 264, 300, True, False), (300, 264, 300, False, False),
    (1024, 512, 2112, False, True), (512, 2112, 1024, True, False),
    (1024, 2112, 512, False, False)]


def operands(rng, M, N, K, trans_a, trans_b):
    a = rng.standard_normal((K, M) if trans_a else (M, K)).astype(np.float32)
    b = rng.standard_normal((N, K) if trans_b else (K, N)).astype(np.float32)
    return a, b


def reference(a, b, trans_a, trans_b, alpha=1.0, beta=0.0, c=None):
    """alpha op(a) op(b) + beta c in float64, and the sum of the terms' magnitudes."""
    A = np.float64(a.T if trans_a else a)
    B = np.float64(b.T if trans_b else b)
    want = alpha * (A @ B)
    mag = abs(alpha) * (np.abs(A) @ np.abs(B))
    if c is not None:
        want += beta * np.float64(c)
        mag += abs(beta) * np.abs(np.float64(c))
    return want, mag


def assert_within_rounding(got, want, mag, K):
    """|got - want| <= (K + 2) eps32 * sum |terms|: the worst case of any summation order."""
    bound = (K + 2) * np.finfo(np.float32).eps * mag + 1e-30
    err = np.abs(np.float64(got) - want)
    worst = np.unravel_index(np.argmax(err - bound), err.shape) if err.size else None
    assert np.all(err <= bound), f"error {err[worst]:.3e} > bound {bound[worst]:.3e} at {worst}"


def gemm_for_threads(a, b, **kw):
    out = []
    try:
        for t in THREADS:
            mk.set_num_threads(t)
            out.append(_testing.backend_gemm("cpu", a, b, **kw))
    finally:
        mk.set_num_threads(0)
    return out


def assert_same_bits(results):
    first = results[0].view(np.uint32)
    for t, r in zip(THREADS[1:], results[1:]):
        diff = np.flatnonzero(r.view(np.uint32) != first)
        assert diff.size == 0, (f"{t} threads differ from 1 thread in {diff.size} elements, "
                                f"up to {np.max(np.abs(r - results[0])):.3e}")


@pytest.mark.parametrize("trans", [(False, False), (False, True), (True, False), (True, True)],
                         ids=["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
def test_same_bits_for_every_thread_count_and_close_to_float64(rng, shape, trans):
    M, N, K = shape
    a, b = operands(rng, M, N, K, *trans)
    results = gemm_for_threads(a, b, trans_a=trans[0], trans_b=trans[1])
    assert results[0].shape == (M, N) and results[0].dtype == np.float32
    assert_same_bits(results)
    want, mag = reference(a, b, *trans)
    assert_within_rounding(results[0], want, mag, K)


@pytest.mark.parametrize("case", MODEL_GEMMS, ids=[f"{m}x{n}x{k}{'t' if ta else 'n'}{'t' if tb else 'n'}"
                                                   for m, n, k, ta, tb in MODEL_GEMMS])
def test_model_gemms_same_bits_for_every_thread_count(rng, case):
    M, N, K, ta, tb = case
    a, b = operands(rng, M, N, K, ta, tb)
    c = rng.standard_normal((M, N)).astype(np.float32)
    results = gemm_for_threads(a, b, c=c, trans_a=ta, trans_b=tb, beta=1.0)  # dx accumulates
    assert_same_bits(results)
    want, mag = reference(a, b, ta, tb, beta=1.0, c=c)
    assert_within_rounding(results[0], want, mag, K)


@pytest.mark.parametrize("alpha,beta", [(0.5, 0.0), (1.0, 1.0), (-2.0, 0.25), (0.0, 3.0)])
def test_alpha_beta(rng, alpha, beta):
    M, N, K = 300, 257, 129
    a, b = operands(rng, M, N, K, False, True)
    c = rng.standard_normal((M, N)).astype(np.float32)
    results = gemm_for_threads(a, b, c=c, trans_b=True, alpha=alpha, beta=beta)
    assert_same_bits(results)
    want, mag = reference(a, b, False, True, alpha, beta, c)
    assert_within_rounding(results[0], want, mag, K)


def test_inputs_are_not_modified(rng):
    a, b = operands(rng, 400, 300, 200, False, False)
    c = rng.standard_normal((400, 300)).astype(np.float32)
    copies = a.copy(), b.copy(), c.copy()
    _testing.backend_gemm("cpu", a, b, c=c, beta=1.0)
    for x, y in zip((a, b, c), copies):
        assert np.array_equal(x, y)


@pytest.mark.parametrize("dims,name", [((-1, 4, 4), "M = -1"), ((4, -2, 4), "N = -2"),
                                       ((4, 4, -3), "K = -3")])
def test_negative_dimensions_are_refused_by_the_backend(dims, name):
    a = np.ones((4, 4), np.float32)
    with pytest.raises(ValueError, match=f"gemm: negative dimension .*{name}"):
        _testing.backend_gemm("cpu", a, a, dims=dims)


def test_bad_hook_arguments_are_named():
    a = np.ones((4, 5), np.float32)
    with pytest.raises(ValueError, match=r"op\(a\) is \[4, 5\] but op\(b\) is \[4, 5\]"):
        _testing.backend_gemm("cpu", a, a)
    with pytest.raises(ValueError, match="c must be"):
        _testing.backend_gemm("cpu", a, a, c=np.ones((4, 5), np.float32), trans_b=True)
    with pytest.raises(ValueError, match="exceed"):
        _testing.backend_gemm("cpu", a, a, trans_b=True, dims=(5, 4, 5))


# Forced kernels: Haswell (AVX2), Zen, Sandybridge (AVX); SkylakeX/Cooperlake (AVX-512)
# only where the CPU has it, since OpenBLAS then runs AVX-512 instructions.
def _has_avx512():
    try:
        with open("/proc/cpuinfo") as f:
            return "avx512f" in f.read()
    except OSError:
        return False


CORETYPES = ["Haswell", "Zen", "Sandybridge"] + (["SkylakeX"] if _has_avx512() else [])

_CHILD = textwrap.dedent("""
    import os, sys
    import numpy as np
    import manaka as mk
    from manaka import _testing
    threads = [1, 2, 3, 4, 5, (os.cpu_count() or 1) + 1]
    rng = np.random.default_rng(7)
    worst = 0.0
    for M, N, K, ta, tb in [(1024, 300, 264, 0, 1), (300, 264, 1024, 1, 0),
                            (1024, 264, 300, 0, 0), (523, 1021, 67, 1, 1), (97, 131, 53, 0, 0)]:
        a = rng.standard_normal((K, M) if ta else (M, K)).astype(np.float32)
        b = rng.standard_normal((N, K) if tb else (K, N)).astype(np.float32)
        out = []
        for t in threads:
            mk.set_num_threads(t)
            out.append(_testing.backend_gemm("cpu", a, b, trans_a=bool(ta), trans_b=bool(tb)))
        for r in out[1:]:
            worst = max(worst, float(np.max(np.abs(r - out[0]))))
            if not np.array_equal(r.view(np.uint32), out[0].view(np.uint32)):
                print(f"DIFFER {M}x{N}x{K} ta={ta} tb={tb}: up to {worst:.3e}")
                sys.exit(1)
    print("SAME", worst)
""")


@pytest.mark.parametrize("coretype", CORETYPES)
def test_same_bits_under_forced_openblas_kernels(coretype):
    env = dict(os.environ, OPENBLAS_CORETYPE=coretype, OPENBLAS_VERBOSE="2")
    proc = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and "SAME 0.0" in proc.stdout, proc.stdout + proc.stderr
    # OPENBLAS_VERBOSE=2 prints the core actually used: the forced one must have been taken
    # (OpenBLAS runs Zen on its Haswell kernels and says so).
    used = {"Zen": "Haswell"}.get(coretype, coretype)
    assert f"Core: {used}" in proc.stderr, proc.stderr
