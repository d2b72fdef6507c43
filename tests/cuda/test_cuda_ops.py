"""The CUDA kernels of the three ops, on a GPU: against the NumPy references of
tests/helpers/reference.py, against the CPU backend, bitwise reproducibility of every backward,
and bad inputs (same exceptions and messages as the CPU path). Skipped, saying why,
where there is no usable CUDA device: they never fall back to the CPU path."""
import os

import numpy as np
import pytest

import manaka
import op_inputs
import reference as ref
from assertions import assert_close
from op_inputs import legal_indices as legal
from manaka import cuda

pytestmark = [pytest.mark.cuda,  # tools/cuda_emu/run_gpu_tests.py runs it on the emulated device
              pytest.mark.skipif(not cuda.is_available(), reason=f"no CUDA device: {cuda.why_unavailable()}")]
_cuda = cuda._cuda
ops = manaka.ops
# tools/cuda_emu/run_gpu_tests.py runs this file on a CPU emulation of the device
too_big_to_emulate = pytest.mark.skipif(os.environ.get("MANAKA_CUDA_EMULATED") == "1",
                                        reason="too large for the CPU emulation of the device")


def gpu(a):
    return manaka.DeviceArray.from_numpy(np.ascontiguousarray(a))


def host(x):
    assert isinstance(x, manaka.DeviceArray), type(x)
    return x.numpy()


# ------------------------------------------------------------------ GatherDot

@pytest.mark.parametrize("W", [300, 8, 5, 33])  # float4 path, small, scalar path, odd
@pytest.mark.parametrize("with_counts", [True, False])
def test_gather_dot_matches_reference(W, with_counts):
    rng = np.random.default_rng(W)
    B, L, M = 9, 37, 50
    hidden = rng.standard_normal((B, W)).astype(np.float32)
    table = rng.standard_normal((M, W)).astype(np.float32)
    indices, counts = legal(rng, B, L, M, with_counts)
    got = ops.gather_dot(gpu(hidden), gpu(table), gpu(indices), None if counts is None else gpu(counts))
    assert_close(host(got), ref.gather_dot(hidden, table, indices, counts))
    if counts is not None:
        assert np.all(host(got)[np.arange(L)[None, :] >= counts[:, None]] == 0)


@pytest.mark.parametrize("W, collide", [(300, None), (300, 3), (7, 2), (64, 1)])
def test_gather_dot_backward_matches_reference(W, collide):
    rng = np.random.default_rng(W + (collide or 0))
    B, L, M = 11, 29, 40
    hidden = rng.standard_normal((B, W)).astype(np.float32)
    table = rng.standard_normal((M, W)).astype(np.float32)
    indices, counts = legal(rng, B, L, M, collide=collide)
    grad = rng.standard_normal((B, L)).astype(np.float32)
    gh, gt = _cuda.gather_dot_backward(gpu(grad), gpu(hidden), gpu(table), gpu(indices), gpu(counts))
    want_h, want_t = ref.gather_dot_backward(grad, hidden, table, indices, counts)
    assert_close(host(gh), want_h)
    assert_close(host(gt), want_t)


def test_gather_dot_backward_grad_table_is_bitwise_reproducible():
    rng = np.random.default_rng(7)
    B, L, W, M = 512, 300, 300, 64  # heavy collisions: ~75k entries over 64 rows
    hidden, table = gpu(rng.standard_normal((B, W)).astype(np.float32)), gpu(rng.standard_normal((M, W)).astype(np.float32))
    indices, counts = legal(rng, B, L, M)
    grad = gpu(rng.standard_normal((B, L)).astype(np.float32))
    indices, counts = gpu(indices), gpu(counts)
    runs = [ops.gather_dot_backward(grad, hidden, table, indices, counts) for _ in range(4)]
    first_h, first_t = host(runs[0][0]), host(runs[0][1])
    for gh, gt in runs[1:]:
        assert host(gt).tobytes() == first_t.tobytes()
        assert host(gh).tobytes() == first_h.tobytes()


def test_gather_dot_empty_shapes():
    f = lambda *s: gpu(np.ones(s, np.float32))
    i = lambda *s: gpu(np.zeros(s, np.int32))
    assert ops.gather_dot(f(0, 4), f(3, 4), i(0, 5)).shape == (0, 5)
    assert host(ops.gather_dot(f(2, 4), f(3, 4), i(2, 0))).shape == (2, 0)
    gh, gt = ops.gather_dot_backward(f(0, 5), f(0, 4), f(3, 4), i(0, 5))
    assert gh.shape == (0, 4) and np.all(host(gt) == 0)
    zero_w = ops.gather_dot(f(2, 0), f(3, 0), i(2, 5))
    assert np.all(host(zero_w) == 0)


# ------------------------------------------------------------------ PowerSums

@pytest.mark.parametrize("K", [1, 4, 8, 9])  # register paths and the any-K loop
@pytest.mark.parametrize("D", [256, 5])
def test_power_sums_matches_reference(K, D):
    rng = np.random.default_rng(K * 100 + D)
    B, S, T, V = 6, 2, 13, 20
    emb = (rng.standard_normal((V, D)) * 0.7).astype(np.float32)
    tokens = op_inputs.tokens(rng, B, S, T, V, empty=0.3)
    tokens[0, 0] = -1  # an empty row
    got = host(ops.power_sums(gpu(emb), gpu(tokens), K))
    assert_close(got, ref.power_sums(emb, tokens, K))


@pytest.mark.parametrize("K", [1, 4, 9])
def test_power_sums_backward_matches_reference(K):
    rng = np.random.default_rng(K)
    B, S, T, V, D = 5, 2, 11, 7, 40  # V small: tokens repeat a lot
    emb = (rng.standard_normal((V, D)) * 0.7).astype(np.float32)
    tokens = op_inputs.tokens(rng, B, S, T, V, empty=0.3)
    grad = rng.standard_normal((B, S, K, D)).astype(np.float32)
    got = host(ops.power_sums_backward(gpu(grad), gpu(emb), gpu(tokens)))
    assert_close(got, ref.power_sums_backward(grad, emb, tokens))


def test_power_sums_backward_is_bitwise_reproducible():
    rng = np.random.default_rng(3)
    B, S, T, V, D, K = 256, 2, 40, 30, 256, 4
    emb = gpu((rng.standard_normal((V, D)) * 0.5).astype(np.float32))
    tokens = gpu(op_inputs.tokens(rng, B, S, T, V, empty=0.3))
    grad = gpu(rng.standard_normal((B, S, K, D)).astype(np.float32))
    runs = [host(ops.power_sums_backward(grad, emb, tokens)).tobytes() for _ in range(4)]
    assert len(set(runs)) == 1


# ------------------------------------------------------------------ PairSums

@pytest.mark.parametrize("P, T", [(16, 40), (3, 6), (300, 9), (16, 1)])
def test_pair_sums_matches_reference(P, T):
    rng = np.random.default_rng(P + T)
    B, S, V = 4, 2, 25
    table = rng.standard_normal((V * (V + 1) // 2, P)).astype(np.float32)
    tokens = op_inputs.tokens(rng, B, S, T, V, empty=0.3)
    got = host(ops.pair_sums(gpu(table), gpu(tokens)))
    assert_close(got, ref.pair_sums(table, tokens))


@pytest.mark.parametrize("P, T, V", [(16, 40, 25), (3, 6, 4), (300, 9, 6), (16, 1, 5)])
def test_pair_sums_backward_matches_reference(P, T, V):
    rng = np.random.default_rng(P + T + V)
    B, S = 4, 2
    num_pairs = V * (V + 1) // 2
    tokens = op_inputs.tokens(rng, B, S, T, V, empty=0.3)
    grad = rng.standard_normal((B, S, P)).astype(np.float32)
    got = host(_cuda.pair_sums_backward(gpu(grad), gpu(tokens), num_pairs))
    assert_close(got, ref.pair_sums_backward(grad, tokens, num_pairs))


def test_pair_sums_backward_is_bitwise_reproducible():
    rng = np.random.default_rng(5)
    B, S, T, V, P = 256, 2, 40, 12, 16  # a small vocabulary: every pair repeats often
    tokens = gpu(op_inputs.tokens(rng, B, S, T, V, empty=0.1))
    grad = gpu(rng.standard_normal((B, S, P)).astype(np.float32))
    runs = [host(ops.pair_sums_backward(grad, tokens, V * (V + 1) // 2)).tobytes() for _ in range(4)]
    assert len(set(runs)) == 1


# ------------------------------------------------------------------ CPU vs CUDA

@too_big_to_emulate
def test_cpu_and_cuda_agree_at_the_seed_shapes():
    rng = np.random.default_rng(0)
    B, T, V, D, K, P, W, M, L = 1024, 40, 2344, 256, 4, 16, 300, 2187, 600
    counts = np.clip(np.round(rng.lognormal(np.log(90), 0.6, B)), 1, 593).astype(np.int32)
    indices = rng.integers(0, M, size=(B, L)).astype(np.int32)
    hidden = rng.standard_normal((B, W)).astype(np.float32)
    table = (rng.standard_normal((M, W)) * 0.05).astype(np.float32)
    grad = rng.standard_normal((B, L)).astype(np.float32)
    tokens = op_inputs.tokens(rng, B, 2, T, V, empty=0.2)
    emb = (rng.standard_normal((V, D)) * 0.5).astype(np.float32)
    pair_table = (rng.standard_normal((V * (V + 1) // 2, P)) * 0.05).astype(np.float32)
    gsum = rng.standard_normal((B, 2, K, D)).astype(np.float32)
    gpair = rng.standard_normal((B, 2, P)).astype(np.float32)

    assert_close(host(ops.gather_dot(gpu(hidden), gpu(table), gpu(indices), gpu(counts))),
          ops.gather_dot(hidden, table, indices, counts))
    for g, c in zip(ops.gather_dot_backward(gpu(grad), gpu(hidden), gpu(table), gpu(indices), gpu(counts)),
                    ops.gather_dot_backward(grad, hidden, table, indices, counts)):
        assert_close(host(g), c)
    assert_close(host(ops.power_sums(gpu(emb), gpu(tokens), K)), ops.power_sums(emb, tokens, K))
    assert_close(host(ops.power_sums_backward(gpu(gsum), gpu(emb), gpu(tokens))),
          ops.power_sums_backward(gsum, emb, tokens))
    assert_close(host(ops.pair_sums(gpu(pair_table), gpu(tokens))), ops.pair_sums(pair_table, tokens))
    num_pairs = V * (V + 1) // 2
    assert_close(host(ops.pair_sums_backward(gpu(gpair), gpu(tokens), num_pairs)),
          ops.pair_sums_backward(gpair, tokens, num_pairs))


# ------------------------------------------------------------------ bad inputs

def _message(error, fn, *args):
    with pytest.raises(error) as info:
        fn(*args)
    return str(info.value)


def test_index_errors_match_the_cpu_messages():
    rng = np.random.default_rng(1)
    B, L, W, M = 4, 6, 8, 10
    hidden = rng.standard_normal((B, W)).astype(np.float32)
    table = rng.standard_normal((M, W)).astype(np.float32)
    grad = rng.standard_normal((B, L)).astype(np.float32)
    indices = rng.integers(0, M, size=(B, L)).astype(np.int32)
    counts = np.array([6, 3, 0, 5], np.int32)
    indices[1, 3:] = -1  # padding: fine
    bad_index = indices.copy()
    bad_index[2, 4] = 99  # ignored: row 2 has no legal slots
    bad_index[3, 2] = M
    bad_count = counts.copy()
    bad_count[1] = 7
    negative = indices.copy()
    negative[0, 5] = -3
    cases = [(ops.gather_dot, (hidden, table, bad_index, counts)),
             (ops.gather_dot, (hidden, table, indices, bad_count)),
             (ops.gather_dot, (hidden, table, negative, counts)),
             (ops.gather_dot, (hidden, table, negative, None)),
             (ops.gather_dot_backward, (grad, hidden, table, bad_index, counts))]
    for fn, args in cases:
        want = _message(ValueError, fn, *args)
        got = _message(ValueError, fn, *[None if a is None else gpu(a) for a in args])
        assert got == want


def test_token_errors_match_the_cpu_messages():
    rng = np.random.default_rng(2)
    V, D, P = 6, 4, 3
    emb = rng.standard_normal((V, D)).astype(np.float32)
    table = rng.standard_normal((V * (V + 1) // 2, P)).astype(np.float32)
    tokens = rng.integers(0, V, size=(2, 2, 5)).astype(np.int32)
    for bad in (V, -2):
        t = tokens.copy()
        t[1, 0, 3] = bad
        t[1, 1, 4] = V + 5  # later: the first one is reported
        grad_s = np.ones((2, 2, 2, D), np.float32)
        grad_p = np.ones((2, 2, P), np.float32)
        cases = [(ops.power_sums, (emb, t, 2)), (ops.power_sums_backward, (grad_s, emb, t)),
                 (ops.pair_sums, (table, t)), (ops.pair_sums_backward, (grad_p, t, len(table)))]
        for fn, args in cases:
            want = _message(ValueError, fn, *args)
            got = _message(ValueError, fn, *[gpu(a) if isinstance(a, np.ndarray) else a for a in args])
            assert got == want
            assert "tokens[1, 0, 3]" in got


def test_wrong_dtypes_and_mixed_devices():
    h = gpu(np.ones((2, 3), np.float32))
    t = gpu(np.ones((4, 3), np.float32))
    i = gpu(np.zeros((2, 5), np.int32))
    with pytest.raises(TypeError, match="hidden must have dtype float32, got float64"):
        ops.gather_dot(gpu(np.ones((2, 3))), t, i)
    with pytest.raises(TypeError, match="indices must have an integer dtype, got float32"):
        ops.gather_dot(h, t, gpu(np.zeros((2, 5), np.float32)))
    with pytest.raises(TypeError, match="table is a CPU array"):
        ops.gather_dot(h, np.ones((4, 3), np.float32), i)


def test_non_contiguous_cai_is_refused():
    a = gpu(np.ones((4, 6), np.float32))

    class View:  # every other column of `a`
        __cuda_array_interface__ = {"shape": (4, 3), "typestr": "<f4", "data": (a.ptr, False),
                                    "strides": (24, 8), "version": 3}

    with pytest.raises(ValueError, match="hidden must be C-contiguous"):
        ops.gather_dot(View(), gpu(np.ones((5, 3), np.float32)), gpu(np.zeros((4, 2), np.int32)))


def test_host_pointer_is_refused():
    host_buffer = np.ones((2, 3), np.float32)

    class Fake:
        __cuda_array_interface__ = {"shape": (2, 3), "typestr": "<f4",
                                    "data": (host_buffer.ctypes.data, False), "version": 3}

    with pytest.raises(ValueError, match="not CUDA device or managed memory"):
        ops.gather_dot(Fake(), gpu(np.ones((4, 3), np.float32)), gpu(np.zeros((2, 5), np.int32)))


# ------------------------------------------------------------------ keyword extras

def test_out_and_unchecked_calls():
    rng = np.random.default_rng(4)
    hidden = rng.standard_normal((3, 8)).astype(np.float32)
    table = rng.standard_normal((5, 8)).astype(np.float32)
    indices, counts = legal(rng, 3, 4, 5)
    out = manaka.DeviceArray.empty((3, 4), "float32")
    res = _cuda.gather_dot(gpu(hidden), gpu(table), gpu(indices), gpu(counts), out=out, check=False)
    assert res is out
    assert_close(host(out), ref.gather_dot(hidden, table, indices, counts))
    with pytest.raises(ValueError, match="out.shape\\[1\\]: expected 4, got 5"):
        _cuda.gather_dot(gpu(hidden), gpu(table), gpu(indices), gpu(counts), out=manaka.DeviceArray.empty((3, 5)))
    gh, gt = manaka.DeviceArray.empty((3, 8)), manaka.DeviceArray.empty((5, 8))
    grad = rng.standard_normal((3, 4)).astype(np.float32)
    res = _cuda.gather_dot_backward(gpu(grad), gpu(hidden), gpu(table), gpu(indices), gpu(counts), out=(gh, gt))
    assert res[0] is gh and res[1] is gt
    want_h, want_t = ref.gather_dot_backward(grad, hidden, table, indices, counts)
    assert_close(host(gt), want_t)


def test_cai_stream_is_waited_for():
    rng = np.random.default_rng(6)
    hidden = gpu(rng.standard_normal((3, 8)).astype(np.float32))
    table = rng.standard_normal((5, 8)).astype(np.float32)
    t = gpu(table)

    class OnPerThreadStream:
        __cuda_array_interface__ = {"shape": (5, 8), "typestr": "<f4", "data": (t.ptr, False),
                                    "version": 3, "stream": 2}

    indices = np.zeros((3, 4), np.int32)
    got = host(ops.gather_dot(hidden, OnPerThreadStream(), gpu(indices)))
    assert_close(got, ref.gather_dot(hidden.numpy(), table, indices))


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int64, np.uint8, np.uint16, np.uint32])
def test_any_integer_index_dtype_is_narrowed_like_on_the_cpu(dtype):
    rng = np.random.default_rng(8)
    hidden = rng.standard_normal((3, 8)).astype(np.float32)
    table = rng.standard_normal((5, 8)).astype(np.float32)
    indices = rng.integers(0, 5, size=(3, 4)).astype(dtype)
    counts = np.array([4, 0, 2], dtype)
    got = host(ops.gather_dot(gpu(hidden), gpu(table), gpu(indices), gpu(counts)))
    assert_close(got, ops.gather_dot(hidden, table, indices, counts))
    tokens = rng.integers(0, 5, size=(2, 2, 3)).astype(dtype)
    emb = rng.standard_normal((5, 8)).astype(np.float32)
    assert_close(host(ops.power_sums(gpu(emb), gpu(tokens), 2)), ops.power_sums(emb, tokens, 2))


def test_index_values_outside_int32_match_the_cpu_message():
    hidden, table = np.ones((2, 3), np.float32), np.ones((4, 3), np.float32)
    for dtype, value in ((np.int64, 2**32), (np.int64, -2**31 - 1), (np.uint32, 2**31)):
        indices = np.zeros((2, 5), dtype)
        indices[1, 2] = value
        want = _message(ValueError, ops.gather_dot, hidden, table, indices)
        got = _message(ValueError, ops.gather_dot, gpu(hidden), gpu(table), gpu(indices))
        assert got == want and "flat position 7" in got
