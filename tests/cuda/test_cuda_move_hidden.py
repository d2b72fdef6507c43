"""MoveHidden (core/backend_ops.def: move_hidden, move_hidden_backward) on the CUDA backend's
table against the CPU backend's: the def fixes every summation order, so pre, the logits and
all three gradients must be the same bits (the conformance case, tests/conformance/
test_backend_ops.py, holds every backend to the NumPy reference). Rows longer than a block
(L > 256), counts with zeros, empty token slots, pieces in hand, a token stride wider than
T, a non-square board, D = 1, D past a block's threads, more tokens than shared memory
holds; padded slots hold NaN, so a kernel that read one would show it, and must stay NaN
in pre. The backward gives the same
bits on the step's scratch, on the workspace pool's and on less than the step's (which it
takes in more chunks of positions)."""
import os

import numpy as np
import pytest

import backend_table as bt
from cuda_backends import backends  # noqa: F401 (a fixture)

pytestmark = pytest.mark.cuda  # tools/cuda_emu/run_gpu_tests.py runs it on the emulated device
EMULATED = os.environ.get("MANAKA_CUDA_EMULATED") == "1"
NAN = np.float32(np.nan)


class Case:
    """Random inputs for a W x H board with K token kinds, C = class_kinds W H classes and D units:
    tokens [B, stride] of which the first T are read (a third from 5 common tokens, ~10 %
    empty, one piece in hand per position at most), legal moves below 3 C (classes repeat
    in a position), counts with zeros and a full row, padded grad and legal slots NaN / -1."""

    def __init__(self, rng, B, T, L, W, H, K, D, with_counts=True, class_kinds=2, per_position=False):
        S = W * H
        self.B, self.T, self.L, self.W, self.H, self.K, self.D = B, T, L, W, H, K, D
        self.C, self.stride = class_kinds * S, T + 3
        self.R = K * (2 * W - 1) * (2 * H - 1) * (self.C // S)
        tokens = rng.integers(0, K * S + 9, (B, self.stride)).astype(np.int32)  # >= K S: in hand
        tokens[:, :T // 3] = rng.integers(0, 5, (B, T // 3))
        tokens[:, :T][rng.random((B, T)) < 0.1] = -1
        self.tokens = tokens
        counts = rng.integers(0, L + 1, B).astype(np.int32)
        counts[0], counts[-1] = 0, L
        self.counts = counts if with_counts else None
        self.n = counts if with_counts else np.full(B, L, np.int32)
        self.padded = np.arange(L)[None] >= self.n[:, None]
        legal = rng.integers(0, 3 * self.C, (B, L)).astype(np.int32)
        legal[self.padded] = -1
        self.legal = legal
        self.relative = (0.5 * rng.standard_normal((self.R, D))).astype(np.float32)
        self.class_rows = rng.standard_normal((self.C, D)).astype(np.float32)
        # one readout [D] (out_stride 0), or a readout per position [B, D] (the gated one)
        self.out = rng.standard_normal((B, D) if per_position else D).astype(np.float32)
        self.out_stride = D if per_position else 0
        grad = rng.standard_normal((B, L)).astype(np.float32)
        grad[self.padded] = NAN
        self.grad = grad
        self.logits = rng.standard_normal((B, L)).astype(np.float32)

    def sizes(self):
        return self.B, self.T, self.L, self.C, self.W, self.H, self.K, self.D

    def forward(self, be):
        """(pre, logits) of `be`'s move_hidden on copies of the inputs; pre starts NaN."""
        pre = np.full((self.B, self.L, self.D), NAN, np.float32)
        logits = self.logits.copy()
        if be.label == "cpu":
            be.call("move_hidden", None, self.relative.ctypes.data, self.class_rows.ctypes.data,
                    self.out.ctypes.data, self.out_stride, self.tokens.ctypes.data, self.stride,
                    self.legal.ctypes.data,
                    None if self.counts is None else self.counts.ctypes.data, *self.sizes(),
                    pre.ctypes.data, logits.ctypes.data)
            return pre, logits
        p, x = be.put(pre), be.put(logits)
        be.call("move_hidden", None, be.put(self.relative), be.put(self.class_rows),
                be.put(self.out), self.out_stride, be.put(self.tokens), self.stride, be.put(self.legal),
                be.put(self.counts), *self.sizes(), p, x)
        return be.get(p), be.get(x)

    def backward(self, be, pre, scratch=None):
        """(grad_relative, grad_class, grad_out) of `be`'s move_hidden_backward, each output
        filled with NaN first; `scratch`: (buffer, bytes) or None for the table's own."""
        outs = [np.full((self.R, self.D), NAN, np.float32),
                np.full((self.C, self.D), NAN, np.float32), np.full(self.out.shape, NAN, np.float32)]
        if be.label == "cpu":
            be.call("move_hidden_backward", None, self.grad.ctypes.data, pre.ctypes.data,
                    self.out.ctypes.data, self.out_stride, self.tokens.ctypes.data, self.stride,
                    self.legal.ctypes.data,
                    None if self.counts is None else self.counts.ctypes.data, *self.sizes(),
                    *[o.ctypes.data for o in outs], None, 0)
            return outs
        bufs = [be.put(o) for o in outs]
        be.call("move_hidden_backward", None, be.put(self.grad), be.put(pre), be.put(self.out),
                self.out_stride, be.put(self.tokens), self.stride, be.put(self.legal), be.put(self.counts),
                *self.sizes(), *bufs, *(scratch or (None, 0)))
        return [be.get(b) for b in bufs]


def assert_same_bits(got, want, what):
    assert got.shape == want.shape, what
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), err_msg=what)


CASES = [pytest.param(dict(B=5, T=10, L=300, W=3, H=4, K=3, D=16), id="long-rows-D16"),
         pytest.param(dict(B=5, T=10, L=300, W=3, H=4, K=3, D=1), id="long-rows-D1"),
         pytest.param(dict(B=4, T=7, L=40, W=5, H=2, K=2, D=5, with_counts=False), id="no-counts"),
         # a readout per position (out [B, D], ModelConfig.move_hidden_gate)
         pytest.param(dict(B=5, T=10, L=300, W=3, H=4, K=3, D=16, per_position=True), id="per-position-out"),
         pytest.param(dict(B=3, T=6, L=20, W=2, H=3, K=2, D=300), id="D-past-a-block"),
         # the tokens' row parts no longer fit shared memory: the forward reads them in place
         pytest.param(dict(B=2, T=6200, L=5, W=3, H=3, K=2, D=2), id="tokens-past-shared-memory"),
         # the most units the kernels' shared memory takes (MK_MOVE_HIDDEN_MAX_D)
         pytest.param(dict(B=2, T=5, L=6, W=2, H=2, K=2, D=4096), id="D-at-the-limit"),
         # shogi's board at the seed batch's widths: the backward sorts in two chunks
         pytest.param(dict(B=256, T=40, L=600, W=9, H=9, K=28, D=16, class_kinds=27), id="shogi-shapes",
                      marks=pytest.mark.skipif(EMULATED, reason="too large for the CPU emulation of the device"))]


@pytest.mark.parametrize("shape", CASES)
def test_forward_is_the_cpu_bits(backends, shape):
    cuda, cpu = backends
    case = Case(np.random.default_rng(11), **shape)
    want_pre, want_logits = case.forward(cpu)
    got_pre, got_logits = case.forward(cuda)
    valid = ~case.padded
    assert np.isfinite(want_pre[valid]).all() and case.padded.any() == (case.counts is not None)
    assert_same_bits(got_pre[valid], want_pre[valid], "pre")
    assert np.isnan(got_pre[case.padded]).all(), "a padded slot of pre was written"
    assert_same_bits(got_logits, want_logits, "logits")  # padded slots: the input's
    assert_same_bits(got_logits[case.padded], case.logits[case.padded], "padded logits")
    assert (got_pre[valid] > 0).any() and (got_pre[valid] < 0).any()  # both sides of the ReLU


@pytest.mark.parametrize("shape", CASES)
def test_backward_is_the_cpu_bits_on_every_scratch(backends, shape):
    cuda, cpu = backends
    case = Case(np.random.default_rng(12), **shape)
    pre, _ = case.forward(cpu)
    want = case.backward(cpu, pre)
    for w in want:
        assert np.isfinite(w).all()
    work, nbytes = cuda.scratch(B=case.B, L=case.L, T=case.T, C=case.C, D=case.D)
    assert nbytes > 0
    # a byte short of the query's: a chunk of one position fewer; a quarter: more chunks
    smaller = [nbytes - 1] + ([nbytes // 4] if case.B >= 5 and case.T * case.L >= 3000 else [])
    for scratch in [(work, nbytes), None] + [(work, n) for n in smaller]:
        got = case.backward(cuda, pre, scratch)
        for name, g, w in zip(("grad_relative", "grad_class", "grad_out"), got, want):
            assert_same_bits(g, w, f"{name}, scratch {scratch and scratch[1]}")
    assert (want[0] != 0).any() and (want[0] == 0).any()  # rows that nothing maps to are 0


def test_backward_refuses_too_little_scratch_and_writes_nothing(backends):
    cuda, cpu = backends
    case = Case(np.random.default_rng(13), B=3, T=6, L=20, W=2, H=3, K=2, D=4)
    pre, _ = case.forward(cpu)
    work, _ = cuda.scratch(B=case.B, L=case.L, T=case.T, C=case.C, D=case.D)
    bufs = [cuda.put(np.full(shape, NAN, np.float32))
            for shape in ((case.R, case.D), (case.C, case.D), (case.D,))]
    with pytest.raises(bt.BackendError, match="scratch given holds 64 bytes"):
        cuda.call("move_hidden_backward", None, cuda.put(case.grad), cuda.put(pre),
                  cuda.put(case.out), 0, cuda.put(case.tokens), case.stride, cuda.put(case.legal),
                  cuda.put(case.counts), *case.sizes(), *bufs, work, 64)
    for b in bufs:
        assert np.isnan(cuda.get(b)).all()


def test_scratch_bytes_grow_with_move_hidden_only_when_it_is_there(backends):
    cuda, _ = backends
    shapes = dict(B=64, L=300, T=40, V=300, M=700, C=162)
    _, without = cuda.scratch(**shapes)
    _, zero_d = cuda.scratch(**shapes, D=0)
    _, with_d = cuda.scratch(**shapes, D=16)
    assert zero_d == without
    # one chunk of 64 40 300 (token, move) pairs: four 4-byte words each, and CUB's buffers
    assert with_d >= 64 * 40 * 300 * 16 and with_d > without


def test_too_many_units_is_a_clear_error(backends):
    cuda, cpu = backends
    case = Case(np.random.default_rng(14), B=2, T=3, L=4, W=2, H=2, K=1, D=1)
    big = 4097
    args = [cuda.put(np.zeros((case.R, big), np.float32)),
            cuda.put(np.zeros((case.C, big), np.float32)), cuda.put(np.zeros(big, np.float32)), 0,
            cuda.put(case.tokens), case.stride, cuda.put(case.legal), cuda.put(case.counts),
            case.B, case.T, case.L, case.C, case.W, case.H, case.K, big,
            cuda.empty((case.B, case.L, big)), cuda.put(case.logits)]  # 18 arguments after stream
    with pytest.raises(bt.BackendError, match="D must be in"):
        cuda.call("move_hidden", None, *args)
    with pytest.raises(bt.BackendError, match="D must be in"):  # a model sizing its scratch
        cuda.scratch(B=case.B, L=case.L, T=case.T, C=case.C, D=big)
    work, nbytes = cuda.scratch(B=case.B, L=case.L, T=case.T, C=case.C, D=4096)
    grads = [cuda.empty((case.R, big)), cuda.empty((case.C, big)), cuda.empty((big,))]
    with pytest.raises(bt.BackendError, match="D <= 4096"):
        cuda.call("move_hidden_backward", None, cuda.put(case.grad), args[16], args[2], *args[3:16],
                  *grads, work, nbytes)


# A model with MoveHidden on the CUDA backend against the same model on the CPU:
# tests/cuda/test_cuda_step.py (forward, every gradient, five AdamW steps).


def test_scratch_for_more_than_2_31_triples_is_chunked(backends):
    """B T L = 4.8 G (token, move) triples: MoveHidden's scratch holds one chunk's sort
    (~4 M triples) plus B + 1 offsets and B L slot numbers of 8 bytes, not B T L of anything
    (the step's scratch is the largest of its users': here GatherDot's backward's)."""
    import ctypes

    cuda, _ = backends
    B, T, L = 200_000, 40, 600
    sizes = []
    for D in (0, 16):
        size = ctypes.c_size_t()
        shapes = bt.StepShapes(B=B, L=L, T=T, V=300, M=700, C=2187, D=D)
        cuda.call("scratch_bytes", ctypes.byref(shapes), ctypes.byref(size))
        sizes.append(size.value)
    assert B * T * L > 2**31
    assert sizes[1] <= max(sizes[0], 8 * B * L + 8 * B + 200 * 2**20)
