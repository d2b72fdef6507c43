"""Conformance of every backend to the op table (csrc/core/backend.h), in the spirit of ggml's
test-backend-ops: each entry of mk_backend, enumerated from the compiled table itself,
runs on every backend present against the NumPy references (tests/helpers/reference*.py) with
its own tolerance.

Backends: "cpu", "cpu_staged" (the same table with host_memory = 0), and "cuda" (marked
`cuda`: a real GPU, or the CPU emulation of one under tools/cuda_emu/run_gpu_tests.py;
skipped, saying why, where neither runs). An entry added to mk_backend without a case
here fails test_every_entry_has_a_case.

Perf mode: MANAKA_BACKEND_OPS_PERF=N times the checked call of each case N more times
(synchronised) and prints the median per entry and backend at the end of the run; the
times are never asserted, and the shapes are the small ones of the checks."""
import ctypes
import os
import statistics
import time
import zlib

import numpy as np
import pytest

import backend_table as bt
import op_inputs
import reference as ref
import reference_bf16 as rbf
import reference_model as refm
from assertions import rel_err
from conftest import BACKEND_OPS_PERF

PERF_REPEATS = int(os.environ.get("MANAKA_BACKEND_OPS_PERF") or 0)
BACKENDS = ["cpu", "cpu_staged", pytest.param("cuda", marks=pytest.mark.cuda)]
NOT_TIMED = {"alloc", "free", "stream_create", "stream_destroy", "event_create",
             "event_destroy"}  # repeating them would leak or free twice

CASES = {}


def case(entry, tol):
    """Registers the check of one entry. `tol`: the largest norm-wise relative error
    against the float64 reference (0: the same bits as the float32 reference)."""
    def register(fn):
        assert entry not in CASES, entry
        CASES[entry] = (fn, tol)
        return fn
    return register


class Run:
    """What a case gets: the backend, a seeded generator, its tolerance, and `op` to run
    the entry under test (recorded for perf mode)."""

    def __init__(self, be, rng, tol):
        self.be, self.rng, self.tol, self.last = be, rng, tol, None

    def op(self, entry, *args):
        self.last = (entry, args)
        return self.be.call(entry, *args)

    def close(self, got, want, what=""):
        got = np.asarray(got)
        assert got.shape == np.shape(want), (what, got.shape, np.shape(want))
        assert np.all(np.isfinite(got)), f"{what}: unwritten or non-finite elements"
        if self.tol == 0:
            np.testing.assert_array_equal(got, want, err_msg=what)
        else:
            err = rel_err(got, want)
            assert err <= self.tol, f"{what}: relative error {err:.2e} > {self.tol:.0e}"

    def randn(self, *shape):
        return self.rng.standard_normal(shape, dtype=np.float32)


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request):
    be = bt.table(request.param)
    if isinstance(be, str):
        pytest.skip(f"no {request.param} backend: {be}")
    return be


# ------------------------------------------------------------------ memory

@case("alloc", tol=0)
def _(r):
    for nbytes in (1, 100, 4097, 1 << 20):
        ptr = r.be.alloc(nbytes)
        try:
            assert ptr and ptr % 64 == 0, f"alloc({nbytes}) returned {ptr:#x}, not 64-byte aligned"
            data = r.rng.integers(0, 256, nbytes, dtype=np.uint8)
            r.be.call("to_device", None, ptr, data.ctypes.data, nbytes)
            back = np.empty_like(data)
            r.be.call("to_host", None, back.ctypes.data, ptr, nbytes)
            r.close(back, data, f"{nbytes} bytes")
        finally:
            r.be.entries["free"](None, ptr)


@case("free", tol=0)
def _(r):
    r.be.entries["free"](None, None)  # NULL: a no-op
    ptrs = [r.be.alloc(1000) for _ in range(3)]
    for p in ptrs:
        r.be.entries["free"](None, p)
    again = r.be.put(np.arange(10, dtype=np.float32))  # the allocator still works
    r.close(r.be.get(again), np.arange(10, dtype=np.float32))


@case("to_device", tol=0)
def _(r):
    data = r.rng.integers(0, 256, 1001, dtype=np.uint8)
    dst = r.be.put(np.zeros(1024, np.uint8))
    r.op("to_device", None, dst.ptr + 8, data.ctypes.data, data.nbytes)  # an offset and an odd size
    want = np.zeros(1024, np.uint8)
    want[8:1009] = data
    r.close(r.be.get(dst), want)


@case("to_host", tol=0)
def _(r):
    data = r.rng.integers(0, 256, 1024, dtype=np.uint8)
    src = r.be.put(data)
    out = np.zeros(1001, np.uint8)
    r.op("to_host", None, out.ctypes.data, src.ptr + 16, out.nbytes)
    r.close(out, data[16:1017])


@case("copy", tol=0)
def _(r):
    data = r.randn(1000)
    src, dst = r.be.put(data), r.be.empty(1000)
    r.be.call("fill", None, dst, 0.0, 1000)
    r.op("copy", None, dst.ptr + 12, src.ptr + 4, 4 * 990)
    want = np.zeros(1000, np.float32)
    want[3:993] = data[1:991]
    r.close(r.be.get(dst), want)


@case("fill", tol=0)
def _(r):
    dst = r.be.empty(1003)
    r.op("fill", None, dst, 1.25, 1000)
    got = r.be.get(dst)
    r.close(got[:1000], np.full(1000, 1.25, np.float32))
    assert np.isnan(got[1000:]).all(), "fill wrote past n"


@case("fill_uniform", tol=0)
def _(r):
    n, bound, seed = 4099, np.float32(0.3), 12345
    dst = r.be.empty(n)
    r.op("fill_uniform", None, dst, n, bound, seed)
    u = rbf.uniform01(seed, np.arange(n, dtype=np.uint64))
    r.close(r.be.get(dst), bound * (np.float32(2) * u - np.float32(1)))  # the same bits everywhere


@case("synchronize", tol=0)
def _(r):
    dst = r.be.empty(1 << 16)
    r.be.call("fill", None, dst, 2.0, 1 << 16)
    r.op("synchronize", None)
    r.close(r.be.get(dst), np.full(1 << 16, 2.0, np.float32))


# ------------------------------------------------------------------ dense algebra

@case("gemm", tol=1e-5)
def _(r):
    M, N, K = 7, 5, 9
    for ta in (0, 1):
        for tb in (0, 1):
            for beta in (0.0, 0.5):
                a_rows, a_cols = (K, M) if ta else (M, K)
                b_rows, b_cols = (N, K) if tb else (K, N)
                lda, ldb, ldc = a_cols + 3, b_cols + 2, N + 1  # leading dimensions past the rows
                A, B = r.randn(a_rows, lda), r.randn(b_rows, ldb)
                C0 = r.randn(M, ldc)
                opa, opb = A[:, :a_cols], B[:, :b_cols]
                opa, opb = (opa.T if ta else opa), (opb.T if tb else opb)
                want = 0.7 * (np.float64(opa) @ np.float64(opb)) + beta * np.float64(C0[:, :N])
                c_init = C0.copy()
                if beta == 0.0:
                    c_init[:, :N] = np.nan  # beta = 0 must not read C
                C = r.be.put(c_init)
                r.op("gemm", None, ta, tb, M, N, K, 0.7, r.be.put(A), lda, r.be.put(B), ldb, beta,
                     C, ldc)
                got = r.be.get(C)
                r.close(got[:, :N], want, f"trans_a={ta} trans_b={tb} beta={beta}")
                np.testing.assert_array_equal(got[:, N:], c_init[:, N:])  # past N: untouched


@case("gemm_batch", tol=1e-5)
def _(r):
    """A layer backward's mix (a transposed dW, a dx accumulating with beta = 1, shapes the
    CPU cuts into 2 tiles and shapes it does not): each C as the float64 product and
    bitwise as the same call through `gemm`; a bad call anywhere fails the batch with
    nothing written."""
    shapes = [(1, 0, 1100, 40, 600, 0.0), (0, 0, 530, 520, 700, 1.0), (0, 1, 9, 1030, 1040, 0.5),
              (1, 1, 5, 7, 3, 0.0), (0, 0, 0, 4, 4, 0.0)]  # trans_a, trans_b, M, N, K, beta
    calls, wants, inits, outs = [], [], [], []
    for ta, tb, M, N, K, beta in shapes:
        A = r.randn(K, M + 2) if ta else r.randn(M, K + 2)  # leading dimensions past the rows
        B = r.randn(N, K + 1) if tb else r.randn(K, N + 1)
        C0 = r.randn(M, N + 3)
        opa = A[:, :M].T if ta else A[:, :K]
        opb = B[:, :K].T if tb else B[:, :N]
        wants.append(0.5 * (np.float64(opa) @ np.float64(opb)) + beta * np.float64(C0[:, :N]))
        # the same call through gemm, for the bits
        one = r.be.put(C0)
        r.be.call("gemm", None, ta, tb, M, N, K, 0.5, r.be.put(A), A.shape[1], r.be.put(B),
                  B.shape[1], beta, one, C0.shape[1])
        C = r.be.put(C0)
        calls.append(bt.GemmCall(ta, tb, M, N, K, 0.5, beta, r.be.put(A).ptr, r.be.put(B).ptr,
                                 C.ptr, A.shape[1], B.shape[1], C0.shape[1]))
        inits.append(C0)
        outs.append((C, r.be.get(one)))
    r.op("gemm_batch", None, (bt.GemmCall * len(calls))(*calls), len(calls))
    for k, (want, C0, (C, one)) in enumerate(zip(wants, inits, outs)):
        got = r.be.get(C)
        N = C0.shape[1] - 3
        if want.size:
            r.close(got[:, :N], want, f"call {k}")
        np.testing.assert_array_equal(got, one, err_msg=f"call {k}: not the bits of gemm")
        np.testing.assert_array_equal(got[:, N:], C0[:, N:])  # past N: untouched
    # A bad last call (lda below its row length): nothing written, the call named.
    first = r.be.put(inits[0])
    bad = [bt.GemmCall(*[getattr(calls[0], f) for f, _ in bt.GemmCall._fields_]) for _ in range(2)]
    bad[0].C = first.ptr
    bad[1].lda = 1
    assert r.be.status("gemm_batch", None, (bt.GemmCall * 2)(*bad), 2) == bt.MK_ERR_VALUE
    assert "gemm_batch call 1" in r.be.error() and "leading dimension" in r.be.error()
    np.testing.assert_array_equal(r.be.get(first), inits[0])
    for count in (-1, 17):
        assert r.be.status("gemm_batch", None, (bt.GemmCall * 1)(calls[0]), count) == bt.MK_ERR_VALUE
        assert "count" in r.be.error()
    r.op("gemm_batch", None, None, 0)  # nothing to do


@case("bias_act", tol=1e-6)
def _(r):
    rows, cols = 13, 37
    for relu in (0, 1):
        y0, bias = r.randn(rows, cols), r.randn(cols)
        y = r.be.put(y0)
        r.op("bias_act", None, y, r.be.put(bias), rows, cols, relu)
        want = np.float64(y0) + bias
        r.close(r.be.get(y), np.maximum(want, 0) if relu else want, f"relu={relu}")


@case("bias_act_backward", tol=1e-5)
def _(r):
    rows, cols = 29, 11
    for relu in (0, 1):
        dy0, y0 = r.randn(rows, cols), np.maximum(r.randn(rows, cols), 0)  # y: a relu's output
        dy, dbias = r.be.put(dy0), r.be.empty(cols)
        r.op("bias_act_backward", None, dy, r.be.put(y0), rows, cols, relu, dbias)
        want = np.where(y0 > 0, np.float64(dy0), 0.0) if relu else np.float64(dy0)
        r.close(r.be.get(dy), want, f"dy relu={relu}")
        r.close(r.be.get(dbias), want.sum(axis=0), f"dbias relu={relu}")


@case("sigmoid", tol=1e-6)
def _(r):
    x0 = r.randn(1001) * 6
    out = r.be.empty(1001)
    r.op("sigmoid", None, r.be.put(x0), 1001, out)
    r.close(r.be.get(out), 1 / (1 + np.exp(-np.float64(x0))))


# ------------------------------------------------------------------ the fused ops

def _legal(r, B, L, M, counts=True):
    return op_inputs.legal_indices(r.rng, B, L, M, counts=counts)


@case("gather_dot", tol=1e-5)
def _(r):
    B, L, W, M = 6, 9, 33, 20
    for with_counts in (True, False):
        hidden, table = r.randn(B, W), r.randn(M, W)
        indices, counts = _legal(r, B, L, M, with_counts)
        logits = r.be.empty((B, L))
        r.op("gather_dot", None, r.be.put(hidden), r.be.put(table), r.be.put(indices),
             r.be.put(counts), B, L, W, logits)
        r.close(r.be.get(logits), ref.gather_dot(hidden, table, indices, counts), f"counts={with_counts}")


@case("gather_dot_backward", tol=1e-5)
def _(r):
    B, L, W, M = 7, 11, 33, 9  # few moves: rows of grad_table collect many (b, l)
    hidden, table, grad = r.randn(B, W), r.randn(M, W), r.randn(B, L)
    indices, counts = _legal(r, B, L, M)
    want_h, want_t = ref.gather_dot_backward(grad, hidden, table, indices, counts)
    args = [r.be.put(a) for a in (grad, hidden, table, indices, counts)]
    work, nbytes = r.be.scratch(B=B, L=L, M=M)
    for halves in ("both", "hidden", "table"):
        gh = r.be.empty((B, W)) if halves != "table" else None
        gt = r.be.empty((M, W)) if halves != "hidden" else None
        r.op("gather_dot_backward", None, *args, B, L, W, M, gh, gt, None, work, nbytes)
        if gh:
            r.close(r.be.get(gh), want_h, f"grad_hidden ({halves})")
        if gt:
            r.close(r.be.get(gt), want_t, f"grad_table ({halves})")
    # a row mask (the sparse move update's) over a table longer than the indices reach (twice;
    # and past 4096 rows, where the CPU's sort by row takes two passes): the named rows, plus
    # one no index names, are written; every other row keeps what it held (NaN here)
    for M2 in (2 * M, 5000):
        big = r.randn(M2, W)
        want_big = ref.gather_dot_backward(grad, hidden, big, indices, counts)[1]
        rows = np.zeros(M2, np.uint8)
        rows[np.unique(np.concatenate([indices[b, :counts[b]] for b in range(B)]))] = 1
        rows[M + 3] = 1
        gt = r.be.empty((M2, W))
        work2, nbytes2 = r.be.scratch(B=B, L=L, M=M2)
        r.op("gather_dot_backward", None, args[0], args[1], r.be.put(big), args[3], args[4], B, L,
             W, M2, None, gt, r.be.put(rows), work2, nbytes2)
        got = r.be.get(gt)
        r.close(got[rows == 1], want_big[rows == 1], f"grad_table (masked rows of {M2})")
        assert (got[M + 3] == 0).all() and np.isnan(got[rows == 0]).all(), "rows outside the mask written"
        # no mask: every row is written, 0 where no index lands (most rows here)
        gt = r.be.empty((M2, W))
        r.op("gather_dot_backward", None, args[0], args[1], r.be.put(big), args[3], args[4], B, L,
             W, M2, None, gt, None, work2, nbytes2)
        r.close(r.be.get(gt), want_big, f"grad_table (every row of {M2})")
    gt = r.be.empty((M, W))
    _too_little(r, gt, "gather_dot_backward", None, *args, B, L, W, M, None, gt, None, work, nbytes - 1)


@case("move_pair_sums", tol=1e-5)
def _(r):
    # the small shape, then one whose legal slots outnumber a block's threads and one whose
    # tokens do not fit in shared memory (CUDA's other paths; small integers there, so that
    # sums of 10^4 terms are exact in any order)
    for B, S, T, L, V, C in ((6, 2, 7, 9, 11, 5), (3, 1, 5, 700, 6, 13), (2, 1, 13000, 5, 4, 3)):
        draw = r.randn if T < 1000 else lambda *shape: r.rng.integers(-4, 5, shape).astype(np.float32)
        table = draw(V, C)
        tokens = op_inputs.tokens(r.rng, B, S, T, V)
        for with_counts in (True, False):
            legal, counts = _legal(r, B, L, 3 * C, with_counts)  # classes repeat: m % C
            base = draw(B, L)
            logits = r.be.put(base)
            # perspective 0 of [B, S, T] tokens: a stride of S T between positions
            r.op("move_pair_sums", None, r.be.put(table), r.be.put(tokens), S * T,
                 r.be.put(legal), r.be.put(counts), B, T, L, C, logits)
            want = base + ref.move_pair_sums(table, tokens[:, 0], legal, counts)
            r.close(r.be.get(logits), want, f"B={B} T={T} L={L} counts={with_counts}")


def _move_pair_backward_check(r, B, S, T, L, V, C, with_counts=True, scratch=True, long_rows=0):
    """grad_table against the reference, bitwise equal over two runs, and (with scratch)
    one byte too little refused cleanly. long_rows: counts kept below it while L is wider
    (the padded width alone decides some of CUDA's paths)."""
    grad = r.randn(B, L)
    tokens = op_inputs.tokens(r.rng, B, S, T, V)
    legal, counts = _legal(r, B, L, 3 * C, with_counts)  # classes repeat: m % C
    if long_rows:
        counts = np.minimum(counts, long_rows).astype(np.int32)
    want = ref.move_pair_sums_backward(grad, tokens[:, 0], legal, counts, V, C)
    work, nbytes = r.be.scratch(B=B, L=L, M=3 * C, T=T, V=V) if scratch else (None, 0)
    args = [r.be.put(a) for a in (grad, tokens)] + [S * T] + [r.be.put(a) for a in (legal, counts)]
    got = []
    for _ in range(2):
        out = r.be.empty((V, C))
        r.op("move_pair_sums_backward", None, *args, B, T, L, V, C, out, work, nbytes)
        got.append(r.be.get(out))
    shape = f"B={B} T={T} L={L} V={V} C={C} counts={with_counts}"
    r.close(got[0], want, shape)
    assert got[0].tobytes() == got[1].tobytes(), f"{shape}: two runs differ in their bits"
    if scratch:
        out = r.be.empty((V, C))
        _too_little(r, out, "move_pair_sums_backward", None, *args, B, T, L, V, C, out, work,
                    nbytes - 1)


@case("move_pair_sums_backward", tol=1e-5)
def _(r):
    # few tokens and classes: entries collect many (b, t, l)
    _move_pair_backward_check(r, 7, 2, 6, 11, 5, 4)
    # a token in more positions than CUDA looks up at once, slots beyond a block's threads
    _move_pair_backward_check(r, 80, 2, 12, 300, 9, 400)
    _move_pair_backward_check(r, 9, 1, 8, 13, 6, 5, with_counts=False, scratch=False)
    # a row too wide for shared memory; a legal width too wide for it
    _move_pair_backward_check(r, 5, 2, 4, 9, 3, 13000)
    _move_pair_backward_check(r, 3, 1, 5, 6200, 4, 6, long_rows=40)


# boards of the relative move pairs: (W, H, K, class kinds, hand tokens beyond K W H)
_BOARDS = ((3, 2, 2, 3, 4), (4, 3, 3, 2, 5), (1, 1, 2, 2, 1))


@case("move_pair_relative_sums", tol=1e-5)
def _(r):
    # non-square boards, a 1 x 1 board; legal slots beyond a CUDA block's threads
    for (W, H, K, DK, hand), B, T, L in zip(_BOARDS, (6, 3, 4), (7, 9, 5), (9, 700, 6)):
        S, C = W * H, W * H * DK
        V = K * S + hand
        relative = r.randn(K * (2 * W - 1) * (2 * H - 1), DK)
        tokens = op_inputs.tokens(r.rng, B, 2, T, V)
        for with_counts in (True, False):
            legal, counts = _legal(r, B, L, 3 * C, with_counts)  # classes repeat: m % C
            base = r.randn(B, L)
            logits = r.be.put(base)
            r.op("move_pair_relative_sums", None, r.be.put(relative), r.be.put(tokens), 2 * T,
                 r.be.put(legal), r.be.put(counts), B, T, L, C, W, H, K, logits)
            want = base + ref.move_pair_relative_sums(relative, tokens[:, 0], legal, counts, C, W, H, K)
            r.close(r.be.get(logits), want, f"W={W} H={H} K={K} L={L} counts={with_counts}")


@case("move_pair_relative_backward", tol=1e-5)
def _(r):
    for W, H, K, DK, hand in _BOARDS:
        S, C = W * H, W * H * DK
        V = K * S + hand
        grad_table = r.randn(V, C)
        want = ref.move_pair_relative_backward(grad_table, C, W, H, K)
        got = []
        for _ in range(2):
            out = r.be.put(np.full(want.shape, np.nan, np.float32))  # every entry written
            r.op("move_pair_relative_backward", None, r.be.put(grad_table), V, C, W, H, K, out)
            got.append(r.be.get(out))
        r.close(got[0], want, f"W={W} H={H} K={K}")
        assert got[0].tobytes() == got[1].tobytes(), f"W={W} H={H}: two runs differ in their bits"
        # the documented order: each entry summed in float32 in increasing v from 0
        seq = np.zeros(want.size, np.float32)
        for v in range(K * S):
            for c in range(C):
                i = ref.relative_index(v, c, C, W, H, K)
                seq[i] = np.float32(seq[i] + grad_table[v, c])
        assert got[0].reshape(-1).tobytes() == seq.tobytes(), f"W={W} H={H}: not the documented order"


def _move_hidden_cases(r):
    """Every MoveHidden case, as (what, B, T, L, D, board, args after `stream` up to D,
    relative, class_rows, out, tokens, legal, counts, C): the boards of the relative part
    (_BOARDS), legal slots beyond a CUDA block's threads, D of 1, 3 and 16, with and
    without counts, one readout out [D] (out_stride 0) and one per position (out [B, D],
    out_stride D: the gated readout)."""
    for board, B, T, L, D in zip(_BOARDS, (6, 3, 4), (7, 9, 5), (9, 700, 6), (3, 16, 1)):
        W, H, K, DK, hand = board
        S, C = W * H, W * H * DK
        for with_counts, per_position in ((True, False), (False, False), (True, True)):
            relative = r.randn(K * (2 * W - 1) * (2 * H - 1) * DK, D)
            class_rows, out = r.randn(C, D), r.randn(B, D) if per_position else r.randn(D)
            tokens = op_inputs.tokens(r.rng, B, 2, T, K * S + hand)
            legal, counts = _legal(r, B, L, 3 * C, with_counts)  # classes repeat: m % C
            args = [r.be.put(a) for a in (relative, class_rows, out)] + [D if per_position else 0] + \
                [r.be.put(tokens), 2 * T] + [r.be.put(a) for a in (legal, counts)] + [B, T, L, C, W, H, K, D]
            what = f"W={W} H={H} K={K} L={L} D={D} counts={with_counts} per_position={per_position}"
            yield what, B, T, L, D, board, args, relative, class_rows, out, tokens, legal, counts, C


def _move_hidden_in_order(relative, class_rows, out, tokens, legal, counts, C, board):
    """(logit terms [B, L], pre [B, L, D]) in float32, in the order backend_ops.def states."""
    W, H, K = board[:3]
    B, L = legal.shape
    pre = np.zeros((B, L, class_rows.shape[1]), np.float32)
    add = np.zeros((B, L), np.float32)
    for b in range(B):
        for l in range(counts[b] if counts is not None else L):
            c = int(legal[b, l]) % C
            u = class_rows[c].copy()
            for t in tokens[b, 0]:
                i = ref.relative_index(int(t), c, C, W, H, K)
                if i >= 0:
                    u = (u + relative[i]).astype(np.float32)
            o = out[b] if out.ndim == 2 else out
            acc = np.float32(0)
            for d in range(len(u)):
                acc = np.float32(acc + np.float32(o[d] * max(u[d], np.float32(0))))
            pre[b, l], add[b, l] = u, acc
    return add, pre


@case("move_hidden", tol=1e-5)
def _(r):
    for what, B, T, L, D, board, args, relative, class_rows, out, tokens, legal, counts, C in _move_hidden_cases(r):
        base = r.randn(B, L)
        logits, pre = r.be.put(base), r.be.put(np.full((B, L, D), np.nan, np.float32))
        r.op("move_hidden", None, *args, pre, logits)
        add, want_pre = ref.move_hidden(relative, class_rows, out, tokens[:, 0], legal, counts, C, *board[:3])
        r.close(r.be.get(logits), base + add, what)
        mask = ref.legal_mask(legal, counts)
        r.close(r.be.get(pre)[mask], want_pre[mask], what + " pre")
        if L <= 9:  # the documented order, bitwise
            seq_add, seq_pre = _move_hidden_in_order(relative, class_rows, out, tokens, legal, counts, C, board)
            assert r.be.get(pre)[mask].tobytes() == seq_pre[mask].tobytes(), what + " pre order"
            assert r.be.get(logits)[mask].tobytes() == (base + seq_add)[mask].tobytes(), what + " order"


def _move_hidden_grads_in_order(grad, pre, out, tokens, legal, counts, C, board, rows):
    """(grad_relative, grad_class, grad_out) in float32, in the orders backend_ops.def states."""
    W, H, K = board[:3]
    B, L = legal.shape
    D = out.shape[-1]
    n = counts if counts is not None else np.full(B, L)
    g_out = np.zeros(out.shape, np.float32)  # [D], or [B, D] for a readout per position
    g_cls, g_rel = np.zeros((C, D), np.float32), np.zeros((rows, D), np.float32)
    o = lambda b: out[b] if out.ndim == 2 else out
    unit = lambda b, l: np.where(pre[b, l] > 0, np.float32(grad[b, l]) * o(b), np.float32(0)).astype(np.float32)
    for b in range(B):
        for l in range(n[b]):  # grad_out and grad_class: (b, l)
            if out.ndim == 2:
                g_out[b] = (g_out[b] + np.float32(grad[b, l]) * np.maximum(pre[b, l], 0)).astype(np.float32)
            else:
                g_out = (g_out + np.float32(grad[b, l]) * np.maximum(pre[b, l], 0)).astype(np.float32)
            c = int(legal[b, l]) % C
            g_cls[c] = (g_cls[c] + unit(b, l)).astype(np.float32)
        for t in tokens[b, 0]:  # grad_relative: (b, t, l)
            for l in range(n[b]):
                i = ref.relative_index(int(t), int(legal[b, l]) % C, C, W, H, K)
                if i >= 0:
                    g_rel[i] = (g_rel[i] + unit(b, l)).astype(np.float32)
    return g_rel, g_cls, g_out


@case("move_hidden_backward", tol=1e-5)
def _(r):
    for what, B, T, L, D, board, args, relative, class_rows, out, tokens, legal, counts, C in _move_hidden_cases(r):
        _, pre = ref.move_hidden(relative, class_rows, out, tokens[:, 0], legal, counts, C, *board[:3])
        pre = np.float32(pre)
        grad = r.randn(B, L)
        want = ref.move_hidden_backward(grad, pre, out, tokens[:, 0], legal, counts, C, *board[:3], len(relative))
        work, nbytes = r.be.scratch(B=B, L=L, M=3 * C, rows=2 * B, T=T, V=int(tokens.max()) + 1, C=C, D=D)
        got = []
        for _ in range(2):
            outs = [r.be.put(np.full(a.shape, np.nan, np.float32)) for a in want[:2]] + \
                [r.be.put(np.full(out.shape, np.nan, np.float32))]
            r.op("move_hidden_backward", None, r.be.put(grad), r.be.put(pre), args[2], *args[3:], *outs,
                 work, nbytes)
            got.append([r.be.get(o) for o in outs])
        for g, w, name in zip(got[0], want, ("relative", "class", "out")):
            r.close(g.reshape(w.shape), w, f"{what} grad_{name}")
        assert all(a.tobytes() == b.tobytes() for a, b in zip(*got)), f"{what}: two runs differ in their bits"
        if L <= 9:  # the documented orders, bitwise
            seq = _move_hidden_grads_in_order(grad, pre, out, tokens, legal, counts, C, board, len(relative))
            for g, w, name in zip(got[0], seq, ("relative", "class", "out")):
                assert g.reshape(-1).tobytes() == w.reshape(-1).tobytes(), f"{what} grad_{name}: not the documented order"


def _too_little(r, out, entry, *args, before=None):
    """One byte less scratch than scratch_bytes gave for the entry's shapes (the largest
    need of every scratch user at those shapes, so this entry may not need that much: it
    may succeed). If it refuses, it is with MK_ERR_VALUE and before writing `out`."""
    if args[-1] < 0:
        return
    status = r.be.status(entry, *args)
    assert status in (bt.MK_OK, bt.MK_ERR_VALUE), (status, r.be.error())
    if status == bt.MK_ERR_VALUE:
        got = r.be.get(out)
        if before is None:
            assert np.isnan(got).all(), f"{entry} wrote its output, then refused the scratch"
        else:
            np.testing.assert_array_equal(got, before)


def _tokens(r, B, S, T, V):
    return op_inputs.tokens(r.rng, B, S, T, V)


@case("power_sums", tol=1e-5)
def _(r):
    B, S, T, V, D, K = 3, 2, 6, 8, 5, 4
    emb, tokens = r.randn(V, D), _tokens(r, B, S, T, V)
    out = r.be.empty((B, S, K, D))
    r.op("power_sums", None, r.be.put(emb), r.be.put(tokens), B * S, T, D, K, out)
    r.close(r.be.get(out), ref.power_sums(emb, tokens, K))


@case("power_sums_backward", tol=1e-5)
def _(r):
    B, S, T, V, D, K = 4, 2, 6, 5, 7, 3
    emb, tokens, grad = r.randn(V, D), _tokens(r, B, S, T, V), r.randn(B, S, K, D)
    work, nbytes = r.be.scratch(rows=B * S, T=T, V=V)
    out = r.be.empty((V, D))
    args = [r.be.put(a) for a in (grad, emb, tokens)]
    r.op("power_sums_backward", None, *args, B * S, T, D, K, V, out, work, nbytes)
    r.close(r.be.get(out), ref.power_sums_backward(grad, emb, tokens))
    out = r.be.empty((V, D))
    _too_little(r, out, "power_sums_backward", None, *args, B * S, T, D, K, V, out, work, nbytes - 1)


@case("pair_sums", tol=1e-5)
def _(r):
    B, S, T, V, Pd = 3, 2, 7, 6, 5
    table, tokens = r.randn(V * (V + 1) // 2, Pd), _tokens(r, B, S, T, V)
    out = r.be.empty((B * S, Pd))
    r.op("pair_sums", None, r.be.put(table), r.be.put(tokens), B * S, T, Pd, out)
    r.close(r.be.get(out), ref.pair_sums(table, tokens).reshape(B * S, Pd))


@case("pair_sums_backward", tol=1e-5)
def _(r):
    B, S, T, V, Pd = 4, 2, 7, 5, 3
    npairs = V * (V + 1) // 2
    tokens, grad = _tokens(r, B, S, T, V), r.randn(B, S, Pd)
    work, nbytes = r.be.scratch(rows=B * S, T=T, V=V)
    out = r.be.empty((npairs, Pd))
    args = [r.be.put(grad), r.be.put(tokens)]
    r.op("pair_sums_backward", None, *args, B * S, T, Pd, npairs, out, work, nbytes)
    r.close(r.be.get(out), ref.pair_sums_backward(grad, tokens, npairs))
    out = r.be.empty((npairs, Pd))
    _too_little(r, out, "pair_sums_backward", None, *args, B * S, T, Pd, npairs, out, work, nbytes - 1)


# ------------------------------------------------------------------ losses

@case("softmax_xent", tol=1e-5)
def _(r):
    B, L, W, M = 9, 13, 4, 30
    for soft in (False, True):
        _, _, legal, counts, target, policy_target = op_inputs.policy_head_batch(r.rng, B, L, W, M,
                                                                                  soft=soft)
        logits = r.randn(B, L) * 3
        logits[np.arange(L)[None] >= counts[:, None]] = np.nan  # padded slots: never read
        want_loss, want_correct, d = refm.policy_rows(np.nan_to_num(logits), counts, target,
                                                      policy_target)
        args = [r.be.put(a) for a in (logits, counts, target, policy_target)]
        for with_grad in (True, False):
            dlogits = r.be.empty((B, L)) if with_grad else None
            row_loss, row_correct = r.be.empty(B), r.be.empty(B)
            r.op("softmax_xent", None, *args, B, L, 0.25, dlogits, row_loss, row_correct)
            r.close(r.be.get(row_loss), want_loss, f"row_loss soft={soft}")
            np.testing.assert_array_equal(r.be.get(row_correct), want_correct)
            if with_grad:
                r.close(r.be.get(dlogits), 0.25 * d, f"dlogits soft={soft}")


@case("value_bce", tol=1e-6)
def _(r):
    B = 101
    z, t = r.randn(B) * 5, r.rng.random(B, dtype=np.float32)
    z[:3] = (80, -80, 0)  # the stable form: no overflow at large |z|
    z64 = np.float64(z)
    want = np.maximum(z64, 0) - t * z64 + np.log1p(np.exp(-np.abs(z64)))
    for with_grad in (True, False):
        dz, row_loss = (r.be.empty(B) if with_grad else None), r.be.empty(B)
        r.op("value_bce", None, r.be.put(z), r.be.put(t), B, 0.5, dz, row_loss)
        r.close(r.be.get(row_loss), want, "row_loss")
        if with_grad:
            r.close(r.be.get(dz), 0.5 * (1 / (1 + np.exp(-z64)) - t), "dz")


@case("loss_stats", tol=1e-6)
def _(r):
    B = 77
    pol, val = r.rng.random(B, dtype=np.float32) * 3, r.rng.random(B, dtype=np.float32)
    correct = (r.rng.random(B) < 0.4).astype(np.float32)
    for finite in (True, False):
        if not finite:
            pol[5] = np.inf
        init = np.full(bt.MK_STAT_COUNT, np.nan, np.float32)
        init[bt.MK_STAT_LR] = 0.125
        stats = r.be.put(init)
        r.op("loss_stats", None, r.be.put(pol), r.be.put(val), r.be.put(correct), B, 2.5, stats)
        got = r.be.get(stats)
        assert got[bt.MK_STAT_LR] == np.float32(0.125), "loss_stats wrote the learning rate"
        assert got[bt.MK_STAT_FINITE] == float(finite)
        policy, value = np.float64(pol).mean(), np.float64(val).mean()
        if finite:
            r.close(got[[bt.MK_STAT_LOSS, bt.MK_STAT_POLICY_LOSS, bt.MK_STAT_VALUE_LOSS,
                         bt.MK_STAT_ACCURACY]], [policy + 2.5 * value, policy, value, correct.mean()])


# ------------------------------------------------------------------ optimizer

HYPER = rbf.adamw_args(1e-2, (0.9, 0.999), 1e-8, 0.1, t=3)


def _stats(r, finite):
    s = np.zeros(bt.MK_STAT_COUNT, np.float32)
    s[bt.MK_STAT_FINITE] = 1.0 if finite else 0.0
    return r.be.put(s)


def _moments(r, n, bf16):
    m, v = r.randn(n) * 0.1, r.rng.random(n, dtype=np.float32) * 0.01
    return (rbf.nearest(m), rbf.nearest(v)) if bf16 else (m, v)


@case("adamw", tol=0)
def _(r):
    n = 1003
    p0, g, (m0, v0) = r.randn(n), r.randn(n), _moments(r, n, False)
    args = bt.AdamwArgs(*HYPER)
    for stats in ("not finite", "none", "finite"):  # the last one is timed in perf mode
        p, m, v = r.be.put(p0), r.be.put(m0), r.be.put(v0)
        st = None if stats == "none" else _stats(r, stats == "finite")
        r.op("adamw", None, p, r.be.put(g), m, v, n, ctypes.byref(args), st)
        want = (p0, m0, v0) if stats == "not finite" else rbf.adamw_f32(p0, g, m0, v0, HYPER)
        for name, buf, w in zip("pmv", (p, m, v), want):
            r.close(r.be.get(buf), w, f"{name} (stats: {stats})")


@case("adamw_bf16", tol=0)
def _(r):
    n, seed = 1003, 0xFEEDFACE12345
    p0, g, (m0, v0) = r.randn(n), r.randn(n), _moments(r, n, True)
    args = bt.AdamwArgs(*HYPER)
    for finite in (False, True):
        p, m, v = r.be.put(p0), r.be.put(m0), r.be.put(v0)
        r.op("adamw_bf16", None, p, r.be.put(g), m, v, n, ctypes.byref(args), _stats(r, finite), seed)
        want = rbf.adamw_bf16(p0, g, m0, v0, HYPER, seed) if finite else (p0, m0, v0)
        for name, buf, w in zip("pmv", (p, m, v), want):
            r.close(r.be.get(buf), w, f"{name} (finite: {finite})")


def _pair_update(r, bf16):
    """The fused pair-table backward + AdamW against the NumPy reference (to the entry's
    tolerance) and against the backend's own pair_sums_backward followed by its adamw
    entry (the same bits: backend.h promises it for bf16 everywhere, fp32 on the CPU)."""
    B, S, T, V, Pd, seed = 4, 2, 6, 5, 3, 77
    npairs = V * (V + 1) // 2
    tokens, grad = _tokens(r, B, S, T, V), r.randn(B * S, Pd)
    p0, (m0, v0) = r.randn(npairs, Pd), _moments(r, npairs * Pd, bf16)
    m0, v0 = m0.reshape(npairs, Pd), v0.reshape(npairs, Pd)
    args = bt.AdamwArgs(*HYPER)
    work, nbytes = r.be.scratch(rows=B * S, T=T, V=V)
    dgrad, dtok = r.be.put(grad), r.be.put(tokens)
    entry = "pair_sums_backward_adamw" + ("_bf16" if bf16 else "")
    tail = (seed, work, nbytes) if bf16 else (work, nbytes)
    results = {}
    for finite in (False, True):
        p, m, v = r.be.put(p0), r.be.put(m0), r.be.put(v0)
        r.op(entry, None, dgrad, dtok, B * S, T, Pd, V, p, m, v, ctypes.byref(args),
             _stats(r, finite), *tail)
        results[finite] = [r.be.get(b) for b in (p, m, v)]
    for name, got, old in zip("pmv", results[False], (p0, m0, v0)):
        np.testing.assert_array_equal(got, old, err_msg=f"{name} changed on a non-finite step")
    g = np.float32(ref.pair_sums_backward(grad.reshape(B, S, Pd), tokens, npairs))
    want = (rbf.adamw_bf16 if bf16 else rbf.adamw_f32)(p0, g, m0, v0, HYPER, *((seed,) if bf16 else ()))
    got = results[True]
    r.close(got[0], want[0], "p")
    for name, a, w in zip("mv", got[1:], want[1:]):
        a, w = (rbf.to_float(a), rbf.to_float(w)) if bf16 else (a, w)
        err = rel_err(a, w)
        assert err <= (1e-2 if bf16 else r.tol), f"{name}: relative error {err:.1e}"  # bf16: one rounding
    if bf16 or r.be.label.startswith("cpu"):  # the unfused entries of the same backend
        gbuf = r.be.empty((npairs, Pd))
        r.be.call("pair_sums_backward", None, dgrad, dtok, B * S, T, Pd, npairs, gbuf, work, nbytes)
        p, m, v = r.be.put(p0), r.be.put(m0), r.be.put(v0)
        if bf16:
            r.be.call("adamw_bf16", None, p, gbuf, m, v, npairs * Pd, ctypes.byref(args),
                      _stats(r, True), seed)
        else:
            r.be.call("adamw", None, p, gbuf, m, v, npairs * Pd, ctypes.byref(args), _stats(r, True))
        for name, a, b in zip("pmv", got, (r.be.get(x) for x in (p, m, v))):
            np.testing.assert_array_equal(a, b, err_msg=f"{name}: fused != unfused")
    p = r.be.put(p0)
    _too_little(r, p, entry, None, dgrad, dtok, B * S, T, Pd, V, p, r.be.put(m0), r.be.put(v0),
                ctypes.byref(args), _stats(r, True), *tail[:-1], nbytes - 1, before=p0)


@case("pair_sums_backward_adamw", tol=1e-5)
def _(r):
    _pair_update(r, bf16=False)


@case("pair_sums_backward_adamw_bf16", tol=1e-5)
def _(r):
    _pair_update(r, bf16=True)


# ------------------------------------------------------------------ sparse pair-table update

def _gap_window(r, n):
    """n gap entries after a few random steps each (core/pair_gap.h), as the trainer keeps
    them: entry i has seen the steps since i."""
    e = np.zeros((0, 5))
    for i in range(n):
        if len(e):
            e = rbf.gap_advance(e, 1 - 0.01 * r.rng.random(), 0.01 * r.rng.random(), 1 + r.rng.random(),
                                0.9, np.sqrt(0.999))
        e = np.concatenate([e, rbf.gap_reset()[None]])
    return e


@case("pair_gap_advance", tol=0)
def _(r):
    n = 7
    e0 = _gap_window(r, n + 1)
    e0[n] = np.nan  # entry n is reset whatever it held
    consts = (0.999, 3e-3, 1.7, 0.9, np.sqrt(0.999))
    for finite in (False, True):
        buf = r.be.put(e0)
        r.op("pair_gap_advance", None, buf, n, *consts, _stats(r, finite))
        want = e0.copy()
        if finite:
            want[:n] = rbf.gap_advance(e0[:n], *consts)
        want[n] = rbf.gap_reset()
        r.close(r.be.get(buf), want, f"finite: {finite}")
    buf = r.be.put(e0)  # betas[1] = 0: c is 0, DRIFT_C infinite (the row's drift is then m / eps)
    r.op("pair_gap_advance", None, buf, n, 0.999, 3e-3, 1.7, 0.9, 0.0, None)
    got = r.be.get(buf)
    assert np.isinf(got[:n, rbf.GAP_DRIFT_C]).all() and (got[:n, rbf.GAP_R2] == 0).all()


def _named_rows(tokens, V):
    """The pair-table rows some pair (i < j, both >= 0) of tokens [rows, T] names."""
    named = set()
    for row in tokens.reshape(-1, tokens.shape[-1]):
        t = row[row >= 0]
        for j in range(len(t)):
            for i in range(j):
                lo, hi = min(t[i], t[j]), max(t[i], t[j])
                named.add(hi * (hi + 1) // 2 + lo)
    return np.array(sorted(named), np.int64)


def _sparse_table(r, npairs, Pd, bf16):
    p0, (m0, v0) = r.randn(npairs, Pd), _moments(r, npairs * Pd, bf16)
    m0[:Pd] = 0  # row 0: moments that decay to nothing
    return p0, m0.reshape(npairs, Pd), v0.reshape(npairs, Pd)


def _catch_up_case(r, bf16):
    B, S, T, V, Pd, now, seed, eps = 3, 2, 5, 6, 3, 5, 91, 1e-3
    npairs = V * (V + 1) // 2
    tokens = _tokens(r, B, S, T, V)
    gaps = _gap_window(r, now + 1)
    p0, m0, v0 = _sparse_table(r, npairs, Pd, bf16)
    stamps0 = r.rng.integers(0, now + 1, npairs).astype(np.int32)
    work, nbytes = r.be.scratch(rows=B * S, T=T, V=V)
    for drift in (1, 0):
        for every in (False, True):
            p, m, v, st = r.be.put(p0), r.be.put(m0), r.be.put(v0), r.be.put(stamps0)
            r.op("pair_catch_up", None, None if every else r.be.put(tokens), B * S, T, Pd, V, p, m, v,
                 int(bf16), st, r.be.put(gaps), now, drift, eps, seed,
                 *((None, 0) if every else (work, nbytes)))
            rows = np.arange(npairs) if every else _named_rows(tokens, V)
            rows = rows[stamps0[rows] != now]
            want_p, want_m, want_v, want_st = p0.copy(), m0.copy(), v0.copy(), stamps0.copy()
            mf, vf = (rbf.to_float(m0[rows]), rbf.to_float(v0[rows])) if bf16 else (m0[rows], v0[rows])
            a, b, c = rbf.gap_apply(gaps[stamps0[rows]], drift, eps, p0[rows], mf, vf)
            if bf16:
                noise = rbf.rounding_noise(seed, (rows[:, None] * Pd + np.arange(Pd)).astype(np.uint64))
                b, c = rbf.stochastic(b, noise), rbf.stochastic(c, noise >> np.uint32(16))
            want_p[rows], want_m[rows], want_v[rows], want_st[rows] = a, b, c, now
            what = f"drift={drift} every={every}"
            r.close(r.be.get(p), want_p, "p " + what)
            for name, buf, w in (("m", m, want_m), ("v", v, want_v), ("stamps", st, want_st)):
                np.testing.assert_array_equal(r.be.get(buf), w, err_msg=f"{name} {what}")
            assert len(rows) and (want_p[rows] != p0[rows]).any()  # the case caught something up
    p = r.be.put(p0)
    _too_little(r, p, "pair_catch_up", None, r.be.put(tokens), B * S, T, Pd, V, p, r.be.put(m0),
                r.be.put(v0), int(bf16), r.be.put(stamps0), r.be.put(gaps), now, 1, eps, seed, work,
                nbytes - 1, before=p0)


@case("pair_catch_up", tol=0)
def _(r):
    _catch_up_case(r, bf16=False)
    _catch_up_case(r, bf16=True)


def _sparse_update_case(r, bf16, bucketed):
    """The rows the batch names get exactly the dense fused entry's bits and the stamp; no
    other row, moment or stamp is touched; a non-finite step changes nothing. `bucketed`:
    the scratch is the one pair_catch_up left for the same tokens (on other tables), which
    the entry may reuse: the same result."""
    B, S, T, V, Pd, seed, now = 4, 2, 6, 7, 3, 77, 9
    npairs = V * (V + 1) // 2
    tokens, grad = _tokens(r, B, S, T, V), r.randn(B * S, Pd)
    p0, m0, v0 = _sparse_table(r, npairs, Pd, bf16)
    stamps0 = r.rng.integers(0, now, npairs).astype(np.int32)
    args = bt.AdamwArgs(*HYPER)
    work, nbytes = r.be.scratch(rows=B * S, T=T, V=V)
    dgrad, dtok = r.be.put(grad), r.be.put(tokens)
    tail = (seed, work, nbytes, bucketed)
    for finite in (False, True):
        if bucketed:  # the catch-up leaves its bucketing of the tokens in work
            r.be.call("pair_catch_up", None, dtok, B * S, T, Pd, V, *(r.be.put(x) for x in (p0, m0, v0)),
                      int(bf16), r.be.put(stamps0), r.be.put(_gap_window(r, now)), now - 1, 1, 1e-3,
                      5, work, nbytes)
        p, m, v, st = r.be.put(p0), r.be.put(m0), r.be.put(v0), r.be.put(stamps0)
        r.op("pair_sums_backward_adamw_sparse", None, dgrad, dtok, B * S, T, Pd, V, p, m, v, int(bf16),
             st, now, ctypes.byref(args), _stats(r, finite), *tail)
        got = [r.be.get(b) for b in (p, m, v, st)]
        if not finite:
            for name, a, w in zip("pmvs", got, (p0, m0, v0, stamps0)):
                np.testing.assert_array_equal(a, w, err_msg=f"{name} changed on a non-finite step")
    dense = [r.be.put(x) for x in (p0, m0, v0)]
    entry = "pair_sums_backward_adamw" + ("_bf16" if bf16 else "")
    r.be.call(entry, None, dgrad, dtok, B * S, T, Pd, V, *dense, ctypes.byref(args), _stats(r, True),
              *((seed,) if bf16 else ()), work, nbytes)
    dense = [r.be.get(x) for x in dense]
    rows = _named_rows(tokens, V)
    other = np.setdiff1d(np.arange(npairs), rows)
    for name, a, d, old in zip("pmv", got, dense, (p0, m0, v0)):
        np.testing.assert_array_equal(a[rows], d[rows], err_msg=f"{name}: named rows != the dense update")
        np.testing.assert_array_equal(a[other], old[other], err_msg=f"{name}: a row no pair names changed")
    want_st = stamps0.copy()
    want_st[rows] = now
    np.testing.assert_array_equal(got[3], want_st)
    p = r.be.put(p0)
    _too_little(r, p, "pair_sums_backward_adamw_sparse", None, dgrad, dtok, B * S, T, Pd, V, p,
                r.be.put(m0), r.be.put(v0), int(bf16), r.be.put(stamps0), now, ctypes.byref(args),
                _stats(r, True), seed, work, nbytes - 1, 0, before=p0)


@case("pair_sums_backward_adamw_sparse", tol=0)
def _(r):
    for bucketed in (0, 1):
        _sparse_update_case(r, bf16=False, bucketed=bucketed)
        _sparse_update_case(r, bf16=True, bucketed=bucketed)


# ------------------------------------------------------------------ pair rows, exchanged

@case("pair_grad_rows", tol=1e-5)
def _(r):
    """The named rows, ascending, with the backend's own pair_sums_backward rows (the same
    bits) and the NumPy reference's (to the tolerance); too small a capacity gives the
    count and writes nothing."""
    B, S, T, V, Pd = 4, 2, 6, 7, 3
    npairs = V * (V + 1) // 2
    tokens, grad = _tokens(r, B, S, T, V), r.randn(B * S, Pd)
    work, nbytes = r.be.scratch(rows=B * S, T=T, V=V)
    dgrad, dtok = r.be.put(grad), r.be.put(tokens)
    want_ids = _named_rows(tokens, V)
    n = len(want_ids)
    assert 0 < n < npairs
    count = ctypes.c_int64(-1)
    ids, out = r.be.put(np.full(n, -7, np.int64)), r.be.put(np.full((n, Pd), np.nan, np.float32))
    r.op("pair_grad_rows", None, dgrad, dtok, B * S, T, Pd, V, ids, out, n - 1, ctypes.addressof(count),
         work, nbytes)
    assert count.value == n
    assert (r.be.get(ids) == -7).all() and np.isnan(r.be.get(out)).all(), "written beyond the capacity"
    r.op("pair_grad_rows", None, dgrad, dtok, B * S, T, Pd, V, ids, out, n, ctypes.addressof(count),
         work, nbytes)
    assert count.value == n
    np.testing.assert_array_equal(r.be.get(ids), want_ids)
    r.close(r.be.get(out), ref.pair_sums_backward(grad.reshape(B, S, Pd), tokens, npairs)[want_ids])
    full = r.be.empty((npairs, Pd))
    r.be.call("pair_sums_backward", None, dgrad, dtok, B * S, T, Pd, npairs, full, work, nbytes)
    np.testing.assert_array_equal(r.be.get(out), r.be.get(full)[want_ids])
    empty = np.full_like(tokens, -1)
    r.op("pair_grad_rows", None, dgrad, r.be.put(empty), B * S, T, Pd, V, ids, out, n,
         ctypes.addressof(count), work, nbytes)
    assert count.value == 0


@case("pair_rows_scatter", tol=0)
def _(r):
    npairs, Pd = 40, 5
    ids = np.sort(r.rng.choice(npairs, 13, replace=False)).astype(np.int64)
    src, dst0 = r.randn(13, Pd), r.randn(npairs, Pd)
    dst = r.be.put(dst0)
    r.op("pair_rows_scatter", None, r.be.put(ids[::-1].copy()), r.be.put(src[::-1].copy()), 13, Pd, dst)
    want = dst0.copy()
    want[ids] = src
    r.close(r.be.get(dst), want)


def _rows_adamw_case(r, bf16):
    """Dense (no stamps): each given row gets exactly adamw / adamw_bf16's element update
    (the element index inside the table for the bf16 noise), the others nothing. Sparse
    (stamps): a row behind now - 1 is first caught up as pair_catch_up does, and stamped
    now; a non-finite step changes nothing."""
    npairs, Pd, seed, catch_seed, now, eps = 28, 3, 77, 5, 6, 1e-3
    p0, m0, v0 = _sparse_table(r, npairs, Pd, bf16)
    ids = np.sort(r.rng.choice(npairs, 11, replace=False)).astype(np.int64)
    grad = r.randn(11, Pd)
    args = bt.AdamwArgs(*HYPER)
    gaps = _gap_window(r, now)
    stamps0 = r.rng.integers(0, now, npairs).astype(np.int32)
    stamps0[ids[:3]] = now - 1  # some rows already caught up
    for sparse in (False, True):
        for finite in (False, True):
            p, m, v, st = r.be.put(p0), r.be.put(m0), r.be.put(v0), r.be.put(stamps0)
            r.op("pair_rows_adamw", None, r.be.put(ids), r.be.put(grad), 11, Pd, p, m, v, int(bf16),
                 st if sparse else None, r.be.put(gaps), now, 1, eps, catch_seed, ctypes.byref(args),
                 _stats(r, finite), seed)
            got = [r.be.get(b) for b in (p, m, v, st)]
            if not finite:
                for name, a, w in zip("pmvs", got, (p0, m0, v0, stamps0)):
                    np.testing.assert_array_equal(a, w, err_msg=f"{name} changed on a non-finite step")
                continue
            # the reference: catch-up (sparse) with pair_catch_up of the same backend, then the
            # dense adamw entry over the whole table with the rows' gradient and 0 elsewhere
            wp, wm, wv, ws = r.be.put(p0), r.be.put(m0), r.be.put(v0), r.be.put(stamps0)
            if sparse:
                toks = np.full((11, 2), -1, np.int32)
                for x, q in enumerate(ids):  # a row of tokens naming exactly pair q
                    hi = int((np.sqrt(8 * q + 1) - 1) // 2)
                    while hi * (hi + 1) // 2 > q:
                        hi -= 1
                    toks[x] = (q - hi * (hi + 1) // 2, hi)
                cwork, cbytes = r.be.scratch(rows=11, T=2, V=7)
                r.be.call("pair_catch_up", None, r.be.put(toks), 11, 2, Pd, 7, wp, wm, wv, int(bf16), ws,
                          r.be.put(gaps), now - 1, 1, eps, catch_seed, cwork, cbytes)
            g = np.zeros((npairs, Pd), np.float32)
            g[ids] = grad
            before = [r.be.get(b) for b in (wp, wm, wv)]
            if bf16:
                r.be.call("adamw_bf16", None, wp, r.be.put(g), wm, wv, npairs * Pd, ctypes.byref(args),
                          _stats(r, True), seed)
            else:
                r.be.call("adamw", None, wp, r.be.put(g), wm, wv, npairs * Pd, ctypes.byref(args),
                          _stats(r, True))
            want = [r.be.get(b) for b in (wp, wm, wv)]
            other = np.setdiff1d(np.arange(npairs), ids)
            for name, a, w, b in zip("pmv", got, want, before):
                np.testing.assert_array_equal(a[ids], w[ids], err_msg=f"{name} sparse={sparse}")
                np.testing.assert_array_equal(a[other], b[other], err_msg=f"{name}: another row changed")
            want_st = stamps0.copy()
            if sparse:
                want_st[ids] = now
            np.testing.assert_array_equal(got[3], want_st)


@case("pair_rows_adamw", tol=0)
def _(r):
    _rows_adamw_case(r, bf16=False)
    _rows_adamw_case(r, bf16=True)


# ------------------------------------------------------------------ the shared move embeddings

def _move_shared_inputs(r, B, L, C, G, counts=True):
    """Legal moves over C classes and G groups (classes and groups repeat within a position:
    the scatter adds several moves into one entry), their two score matrices, and the
    documented float32 results computed slot by slot: (inputs, add, dcls, dgrp, dlogits)."""
    legal, n = _legal(r, B, L, C * G, counts)
    cls, grp, base, dlogits = r.randn(B, C), r.randn(B, G), r.randn(B, L), r.randn(B, L)
    want = base.copy()
    dcls, dgrp = np.zeros((B, C), np.float32), np.zeros((B, G), np.float32)
    for b in range(B):
        for l in range(n[b] if n is not None else L):
            m = int(legal[b, l])
            want[b, l] = np.float32(np.float32(want[b, l] + cls[b, m % C]) + grp[b, m // C])
            dcls[b, m % C] = np.float32(dcls[b, m % C] + dlogits[b, l])
            dgrp[b, m // C] = np.float32(dgrp[b, m // C] + dlogits[b, l])
    return legal, n, cls, grp, base, dlogits, want, dcls, dgrp


@case("move_shared_add", tol=0)
def _(r):
    """The documented order bitwise (the padded slots keep what they held), against the
    float64 reference to float rounding, with and without counts."""
    for B, L, C, G, counts in ((5, 9, 4, 3, True), (3, 300, 7, 5, True), (2, 6, 3, 2, False)):
        legal, n, cls, grp, base, _, want, _, _ = _move_shared_inputs(r, B, L, C, G, counts)
        logits = r.be.put(base)
        r.op("move_shared_add", None, r.be.put(cls), r.be.put(grp), r.be.put(legal), r.be.put(n), B, L,
             C, G, logits)
        got = r.be.get(logits)
        r.close(got, want, f"B={B} L={L}")
        ref_add = ref.move_shared_add(cls, grp, legal, n if n is not None else np.full(B, L), C)
        assert rel_err(got - base, ref_add) < 1e-5


@case("move_shared_backward", tol=0)
def _(r):
    """Both outputs overwritten (entries no move lands on are 0, whatever they held), each
    sum in slot order bitwise, against the float64 reference to float rounding."""
    for B, L, C, G, counts in ((5, 9, 4, 3, True), (3, 300, 7, 5, True), (2, 6, 3, 2, False)):
        legal, n, _, _, _, dlogits, _, dcls, dgrp = _move_shared_inputs(r, B, L, C, G, counts)
        gc, gg = r.be.put(np.full((B, C), np.nan, np.float32)), r.be.put(np.full((B, G), np.nan, np.float32))
        r.op("move_shared_backward", None, r.be.put(dlogits), r.be.put(legal), r.be.put(n), B, L, C, G, gc, gg)
        r.close(r.be.get(gc), dcls, f"dcls B={B} L={L}")
        r.close(r.be.get(gg), dgrp, f"dgrp B={B} L={L}")
        want = ref.move_shared_backward(dlogits, legal, n if n is not None else np.full(B, L), C, G)
        assert rel_err(r.be.get(gc), want[0]) < 1e-5 and rel_err(r.be.get(gg), want[1]) < 1e-5


# ------------------------------------------------------------------ move kinds

@case("move_kind_split", tol=0)
def _(r):
    """Every slot written (padded ones 0, whatever they held), against the reference's
    integer arithmetic, with and without counts, up to labels near 2^31."""
    for B, L, R, C, F, counts in ((5, 9, 12, 4, 3, True), (3, 300, 262440, 2187, 14, True),
                                  (2, 6, 6, 3, 2, False), (2, 5, 2 ** 31 // 8, 2 ** 10, 7, True)):
        legal, n = _legal(r, B, L, R * F, counts)
        legal[0, 0] = R * F - 1  # the largest label: the last row of both tables
        moves, kinds = r.be.put(np.full((B, L), -9, np.int32)), r.be.put(np.full((B, L), -9, np.int32))
        r.op("move_kind_split", None, r.be.put(legal), r.be.put(n), B, L, R, C, moves, kinds)
        want = ref.move_kind_split(legal, n if n is not None else np.full(B, L), R, C)
        np.testing.assert_array_equal(r.be.get(moves), want[0], err_msg=f"moves B={B} L={L} R={R}")
        np.testing.assert_array_equal(r.be.get(kinds), want[1], err_msg=f"kind rows B={B} L={L} R={R}")
        assert want[1].max() < C * F and want[0].max() < R


# ------------------------------------------------------------------ sparse move-table update

def _move_rows_case_inputs(r, rows, P, B, L, now):
    """A move table, its fp32 moments (row 0's decaying to nothing), stamps up to now, and
    a batch of legal labels with padding (-1, never read) naming some rows, some twice."""
    p0, (m0, v0) = r.randn(rows, P), _moments(r, rows * P, False)
    m0, v0 = m0.reshape(rows, P), v0.reshape(rows, P)
    m0[0] = 0
    counts = r.rng.integers(1, L + 1, B).astype(np.int32)
    legal = np.full((B, L), -1, np.int32)
    for b in range(B):
        legal[b, :counts[b]] = r.rng.choice(rows // 2, counts[b])  # the upper half: never named
    stamps0 = r.rng.integers(0, now + 1, rows).astype(np.int32)
    return p0, m0, v0, legal, counts, stamps0


@case("move_rows_catch_up", tol=0)
def _(r):
    """The mask is exactly the named rows; the named rows behind `now` (every row when
    legal is NULL) get pair_gap.h's catch-up, the same bits as the float32 reference of
    mk_gap_apply, and the stamp now; nothing else changes."""
    rows, P, B, L, now, eps = 37, 5, 4, 6, 7, 1e-3
    p0, m0, v0, legal, counts, stamps0 = _move_rows_case_inputs(r, rows, P, B, L, now)
    gaps = _gap_window(r, now + 1)
    named = np.unique(np.concatenate([legal[b, :counts[b]] for b in range(B)]))
    for drift in (1, 0):
        for every in (False, True):
            p, m, v, st = r.be.put(p0), r.be.put(m0), r.be.put(v0), r.be.put(stamps0)
            mask = r.be.put(np.full(rows, 7, np.uint8))
            r.op("move_rows_catch_up", None, None if every else r.be.put(legal),
                 None if every else r.be.put(counts), B, L, rows, P, p, m, v, st, r.be.put(gaps), now,
                 drift, eps, mask)
            want_mask = np.zeros(rows, np.uint8)
            want_mask[named] = 1
            if not every:
                np.testing.assert_array_equal(r.be.get(mask), want_mask, err_msg="mask")
            todo = np.arange(rows) if every else named
            todo = todo[stamps0[todo] != now]
            want_p, want_m, want_v, want_st = p0.copy(), m0.copy(), v0.copy(), stamps0.copy()
            a, b, c = rbf.gap_apply(gaps[stamps0[todo]], drift, eps, p0[todo], m0[todo], v0[todo])
            want_p[todo], want_m[todo], want_v[todo], want_st[todo] = a, b, c, now
            what = f"drift={drift} every={every}"
            r.close(r.be.get(p), want_p, "p " + what)
            for name, buf, w in (("m", m, want_m), ("v", v, want_v), ("stamps", st, want_st)):
                np.testing.assert_array_equal(r.be.get(buf), w, err_msg=f"{name} {what}")
            assert len(todo) and (want_p[todo] != p0[todo]).any()  # the case caught something up


@case("move_rows_adamw", tol=0)
def _(r):
    """The masked rows get exactly the dense adamw entry's bits (the gradient of the other
    rows is never read: it is NaN here) and the stamp now; no other row, moment or stamp
    changes; a non-finite step changes nothing."""
    rows, P, now = 41, 6, 9
    p0, m0, v0, _, _, stamps0 = _move_rows_case_inputs(r, rows, P, 1, 1, now - 1)
    mask0 = (r.rng.random(rows) < 0.3).astype(np.uint8)
    mask0[:2] = 1
    grad = r.randn(rows, P)
    grad[mask0 == 0] = np.nan
    args = bt.AdamwArgs(*HYPER)
    for finite in (False, True):
        p, m, v, st = r.be.put(p0), r.be.put(m0), r.be.put(v0), r.be.put(stamps0)
        r.op("move_rows_adamw", None, r.be.put(mask0), rows, P, p, r.be.put(grad), m, v, st, now,
             ctypes.byref(args), _stats(r, finite))
        got = [r.be.get(b) for b in (p, m, v, st)]
        if not finite:
            for name, a, w in zip("pmvs", got, (p0, m0, v0, stamps0)):
                np.testing.assert_array_equal(a, w, err_msg=f"{name} changed on a non-finite step")
            continue
        on = mask0 == 1
        wp, wm, wv = r.be.put(p0[on]), r.be.put(m0[on]), r.be.put(v0[on])
        r.be.call("adamw", None, wp, r.be.put(grad[on]), wm, wv, int(on.sum()) * P, ctypes.byref(args),
                  _stats(r, True))
        for name, a, w, b in zip("pmv", got, (r.be.get(wp), r.be.get(wm), r.be.get(wv)), (p0, m0, v0)):
            np.testing.assert_array_equal(a[on], w, err_msg=name)
            np.testing.assert_array_equal(a[~on], b[~on], err_msg=f"{name}: an unmasked row changed")
        np.testing.assert_array_equal(got[3], np.where(on, now, stamps0))


# ------------------------------------------------------------------ fused policy head

@case("policy_head", tol=1e-5)
def _(r):
    B, L, W, M = 9, 17, 40, 25
    for soft in (False, True):
        q, table, legal, counts, target, pt = op_inputs.policy_head_batch(r.rng, B, L, W, M, soft=soft,
                                                                         scale=3.0)
        outs = [r.be.empty((B, L)), r.be.empty((B, W)), r.be.empty(B), r.be.empty(B)]
        r.op("policy_head", None, *[r.be.put(a) for a in (q, table, legal, counts, target, pt)],
             B, L, W, 0.5, *outs)
        want = refm.policy_head(q, table, legal, counts, target, pt, grad_scale=0.5)
        got = [r.be.get(o) for o in outs]
        for name, a, w in zip(("dlogits", "dq", "row_loss"), got, want):
            r.close(a, w, f"{name} soft={soft}")
        np.testing.assert_array_equal(got[3], want[3])


# ------------------------------------------------------------------ streams and events

def _ordered_copy(r, entry):
    """fill on a second stream, an event recorded after it, the default stream waiting for
    the event before a copy, the host waiting for the event: the copy sees the fill."""
    stream, event = ctypes.c_void_p(), ctypes.c_void_p()
    r.be.call("stream_create", ctypes.byref(stream))
    r.be.call("event_create", ctypes.byref(event))
    try:
        n = 1 << 18
        src, dst = r.be.empty(n), r.be.empty(n)
        r.be.call("fill", stream, src, 3.5, n)
        r.be.call("event_record", stream, event)
        r.be.call("stream_wait_event", None, event)
        r.be.call("copy", None, dst, src, 4 * n)
        r.be.call("event_synchronize", event)
        r.close(r.be.get(dst), np.full(n, 3.5, np.float32))
    finally:
        r.be.entries["event_destroy"](event)
        r.be.entries["stream_destroy"](stream)
    if entry == "stream_destroy":
        r.be.entries["stream_destroy"](None)  # NULL: a no-op
    if entry in ("event_record", "stream_wait_event", "event_synchronize"):
        r.last = None  # not timed alone: they need the stream and event made above


for _entry in ("stream_create", "stream_destroy", "event_create", "event_destroy", "event_record",
               "stream_wait_event", "event_synchronize"):
    case(_entry, tol=0)(lambda r, _entry=_entry: _ordered_copy(r, _entry))


# ------------------------------------------------------------------ batches and scratch

FAULT_NONE, FAULT_TOKEN, FAULT_COUNT, FAULT_LEGAL, FAULT_TARGET, FAULT_VALUE, FAULT_SOFT_ENTRY, \
    FAULT_SOFT_SUM = range(8)


def first_fault(tokens, legal, counts, target, value, soft, V, M, with_targets):
    """check.h's mk_find_fault over a batch's rules in NumPy: (kind, index, slot) of the
    first bad entry, in the order the checks run."""
    flat = tokens.reshape(-1)
    bad = np.nonzero((flat < -1) | (flat >= V))[0]
    if bad.size:
        return FAULT_TOKEN, bad[0], 0
    L = legal.shape[1]
    for row in range(len(counts)):
        if not 1 <= counts[row] <= L:
            return FAULT_COUNT, row, 0
    for row in range(len(counts)):
        bad = np.nonzero((legal[row, :counts[row]] < 0) | (legal[row, :counts[row]] >= M))[0]
        if bad.size:
            return FAULT_LEGAL, row, bad[0]
    if with_targets:
        for row in range(len(counts)):
            if not 0 <= target[row] < counts[row]:
                return FAULT_TARGET, row, 0
        for row in range(len(counts)):
            if not (np.isfinite(value[row]) and 0 <= value[row] <= 1):
                return FAULT_VALUE, row, 0
        if soft is not None:
            for row in range(len(counts)):
                entries = soft[row, :counts[row]]
                bad = np.nonzero(~np.isfinite(entries) | (entries < 0))[0]
                if bad.size:
                    return FAULT_SOFT_ENTRY, row, bad[0]
                if abs(np.float64(entries).sum() - 1) > 1e-3:
                    return FAULT_SOFT_SUM, row, 0
    return FAULT_NONE, 0, 0


@case("batch_check", tol=0)
def _(r):
    B, S, T, L, V, M = 5, 2, 4, 6, 7, 9
    _, _, legal, counts, target, soft = op_inputs.policy_head_batch(r.rng, B, L, 1, M, soft=True)
    tokens, value = _tokens(r, B, S, T, V), r.rng.random(B, dtype=np.float32)
    plants = {
        "clean": lambda a: None,
        "token": lambda a: a["tokens"].reshape(-1).__setitem__(9, V),
        "count": lambda a: a["counts"].__setitem__(3, 0),
        "legal": lambda a: a["legal"].__setitem__((2, min(1, a["counts"][2] - 1)), M),
        "target": lambda a: a["target"].__setitem__(1, a["counts"][1]),
        "value": lambda a: a["value"].__setitem__(4, 1.5),
        "soft entry": lambda a: a["soft"].__setitem__((0, 0), -0.25),
        "soft sum": lambda a: a["soft"].__setitem__(2, a["soft"][2] * 0.9),
    }
    work = r.be.put(np.zeros(64, np.uint8))  # MK_BATCH_CHECK_WORK_BYTES
    for plant, fn in plants.items():
        for with_targets in (1, 0):
            a = {"tokens": tokens.copy(), "legal": legal.copy(), "counts": counts.copy(),
                 "target": target.copy(), "value": value.copy(), "soft": soft.copy()}
            fn(a)
            d = {k: r.be.put(x) for k, x in a.items()}
            batch = bt.Batch(B=B, S=S, T=T, L=L, on_device=1,
                             **{k: d[k].ptr for k in ("tokens", "legal", "counts", "target", "value")},
                             policy_target=d["soft"].ptr)
            fault = bt.Fault(kind=-1)
            r.op("batch_check", None, ctypes.byref(batch), V, M, with_targets, ctypes.byref(fault),
                 work, 64)
            want = first_fault(a["tokens"], a["legal"], a["counts"], a["target"], a["value"],
                               a["soft"], V, M, with_targets)
            got = (fault.kind, fault.index, fault.slot if fault.kind in (FAULT_LEGAL, FAULT_SOFT_ENTRY) else 0)
            assert got == want, f"{plant} (with_targets={with_targets}): fault {got}, want {want}"
            if plant != "clean" and with_targets:
                assert fault.kind != FAULT_NONE, plant


@case("scratch_bytes", tol=0)
def _(r):
    def size(**shapes):
        out = ctypes.c_size_t()
        r.op("scratch_bytes", ctypes.byref(bt.StepShapes(**shapes)), ctypes.byref(out))
        return out.value

    assert size() >= 0  # nothing: whatever the backend needs for no work
    small = dict(B=8, L=16, M=100, rows=16, T=10, V=50)
    for name in small:  # never smaller for a larger shape, one field at a time
        bigger = dict(small, **{name: small[name] * 3})
        assert size(**bigger) >= size(**small), name


# ------------------------------------------------------------------ the suite itself

def test_every_entry_has_a_case():
    """The compiled table's entries (by offset) are exactly the cases: a new entry needs a
    case, and a case for a removed entry goes. (This replaces test_model.py's hand-kept
    map from entry to the test that exercised it.)"""
    from manaka import _testing

    assert set(bt.entries()) == set(CASES)
    assert _testing.backend_entries("cpu_staged") == _testing.backend_entries("cpu")
    with pytest.raises(ValueError, match="not in this build"):
        _testing.backend_entries("tpu")
    with pytest.raises(ValueError, match="not in this build"):
        _testing.backend_table("tpu")


def test_entry_list_follows_the_struct_and_the_ctypes_mirrors_match_the_compiled_layout():
    from manaka import _testing

    assert _testing.backend_entries("cpu") == bt.entries()  # MK_BACKEND_ENTRIES's order
    assert bt.check_layout() == []


# The test and benchmark hooks (csrc/python/testing/): all of manaka._testing's functions.
HOOKS = {"backend_adamw", "backend_pair_adamw", "backend_scratch_bytes", "backend_gemm",
         "backend_policy_head", "backend_layout", "backend_table", "backend_entries",
         "toy_game", "TOY_RECORD_BYTES"}  # the second game of tests/data/test_loader_row_source.py


def test_the_hooks_are_in_testing_and_not_in_the_shipped_core():
    """manaka._core holds no test hook: they are manaka._testing's, which the
    package never imports; and _testing links no copy of the engine (it would have its own
    error buffer and thread count: csrc/python/common/engine_link.h), so none of the
    engine's symbols is defined in it: its calls resolve to _core's."""
    import subprocess
    import sys

    import manaka
    from manaka import _testing

    public = {name for name in dir(_testing) if not name.startswith("_")}
    assert public == HOOKS
    assert not HOOKS & set(dir(manaka._core))
    assert not [name for name in dir(manaka._core) if name.startswith("backend_")]
    core, testing = ctypes.CDLL(manaka._core.__file__), ctypes.CDLL(_testing.__file__)
    for symbol in ("mk_fail", "mk_error", "mk_backend_cpu", "mk_batch_check", "mk_model_create"):
        assert hasattr(core, symbol), symbol  # the names are the engine's: the check can fail
        assert not hasattr(testing, symbol), symbol
    # Importing the package loads neither the hooks nor anything that imports them.
    out = subprocess.run([sys.executable, "-c", "import sys, manaka, manaka.bench; "
                          "print('manaka._testing' in sys.modules)"], capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


@pytest.mark.parametrize("entry", list(CASES))
def test_entry(backend, entry, request):
    fn, tol = CASES[entry]
    r = Run(backend, np.random.default_rng(zlib.crc32(entry.encode())), tol)
    try:
        fn(r)
        if PERF_REPEATS and r.last and entry not in NOT_TIMED:
            _time(request, backend, *r.last)
    finally:
        backend.close()


def _time(request, be, entry, args):
    times = []
    for _ in range(PERF_REPEATS):
        be.call("synchronize", None)
        start = time.perf_counter()
        be.call(entry, *args)
        be.call("synchronize", None)
        times.append(time.perf_counter() - start)
    perf = request.config.stash.setdefault(BACKEND_OPS_PERF, {})
    perf[(entry, be.label)] = statistics.median(times)
