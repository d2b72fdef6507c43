"""Backward passes against finite differences of the forward passes (tiny sizes), and a
property-based comparison with the references over shapes and contents (hypothesis)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import manaka as mk
import reference as ref
from op_inputs import legal_batch, tokens


def directional(f, x, direction, eps):
    """(f(x + eps d) - f(x - eps d)) / 2 eps, in float64 from float32 evaluations."""
    hi = np.float64(f((x + eps * direction).astype(np.float32)))
    lo = np.float64(f((x - eps * direction).astype(np.float32)))
    return (hi - lo) / (2 * eps)


def check(loss, x, analytic, rng, eps=1e-2, tol=2e-3):
    for _ in range(3):
        d = rng.standard_normal(x.shape)
        numeric = directional(loss, x.astype(np.float64), d, eps)
        assert abs(numeric - np.sum(analytic * d)) <= tol * max(1.0, abs(numeric))


def test_gather_dot_finite_differences(rng):
    hidden, table, indices, counts = legal_batch(rng, 3, 5, 4, 3)
    G = rng.standard_normal((3, 5), dtype=np.float32)
    gh, gt = mk.ops.gather_dot_backward(G, hidden, table, indices, counts)
    check(lambda h: np.sum(G * mk.ops.gather_dot(h, table, indices, counts)), hidden, gh, rng)
    check(lambda t: np.sum(G * mk.ops.gather_dot(hidden, t, indices, counts)), table, gt, rng)


def test_power_sums_finite_differences(rng):
    emb = rng.standard_normal((4, 3), dtype=np.float32) * 0.8
    tok = tokens(rng, 2, 2, 5, 4)
    G = rng.standard_normal((2, 2, 4, 3), dtype=np.float32)
    ge = mk.ops.power_sums_backward(G, emb, tok)
    check(lambda e: np.sum(G * mk.ops.power_sums(e, tok, 4)), emb, ge, rng, eps=1e-3)


def test_pair_sums_finite_differences(rng):
    table = rng.standard_normal((10, 3), dtype=np.float32)
    tok = tokens(rng, 2, 2, 5, 4)
    G = rng.standard_normal((2, 2, 3), dtype=np.float32)
    gp = mk.ops.pair_sums_backward(G, tok, 10)
    check(lambda p: np.sum(G * mk.ops.pair_sums(p, tok)), table, gp, rng)


dims = st.integers(1, 9)


def close(got, want, magnitudes):
    """float32 sums of mixed signs may cancel (hypothesis found a GatherDot of 4.7e-4 from
    terms of order 1, 1.2e-5 off relatively): the error is bounded relative to the sum of
    the terms' magnitudes (`magnitudes`: the same op on |inputs|), the summation's
    condition, not to the cancelled result."""
    err = np.linalg.norm(np.float64(got) - want)
    assert err <= 1e-5 * np.linalg.norm(magnitudes)


@settings(max_examples=60, deadline=None)
@given(B=dims, L=dims, W=dims, M=dims, seed=st.integers(0, 2**32 - 1), pad=st.sampled_from([-1, "garbage"]))
def test_gather_dot_property(B, L, W, M, seed, pad):
    rng = np.random.default_rng(seed)
    hidden, table, indices, counts = legal_batch(rng, B, L, W, M, "random", pad)
    grad = rng.standard_normal((B, L), dtype=np.float32)
    a_hidden, a_table, a_grad = np.abs(hidden), np.abs(table), np.abs(grad)
    close(mk.ops.gather_dot(hidden, table, indices, counts),
          ref.gather_dot(hidden, table, indices, counts),
          ref.gather_dot(a_hidden, a_table, indices, counts))
    for got, want, bound in zip(mk.ops.gather_dot_backward(grad, hidden, table, indices, counts),
                                ref.gather_dot_backward(grad, hidden, table, indices, counts),
                                ref.gather_dot_backward(a_grad, a_hidden, a_table, indices, counts)):
        close(got, want, bound)


@settings(max_examples=60, deadline=None)
@given(B=dims, S=st.integers(1, 3), T=dims, V=dims, D=dims, K=st.integers(1, 6),
       empty=st.floats(0, 1), seed=st.integers(0, 2**32 - 1))
def test_power_and_pair_sums_property(B, S, T, V, D, K, empty, seed):
    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((V, D), dtype=np.float32) * 0.7
    tok = tokens(rng, B, S, T, V, empty)
    close(mk.ops.power_sums(emb, tok, K), ref.power_sums(emb, tok, K),
          ref.power_sums(np.abs(emb), tok, K))
    G = rng.standard_normal((B, S, K, D), dtype=np.float32)
    close(mk.ops.power_sums_backward(G, emb, tok), ref.power_sums_backward(G, emb, tok),
          ref.power_sums_backward(np.abs(G), np.abs(emb), tok))
    table = rng.standard_normal((V * (V + 1) // 2, D), dtype=np.float32)
    close(mk.ops.pair_sums(table, tok), ref.pair_sums(table, tok),
          ref.pair_sums(np.abs(table), tok))
    Gp = rng.standard_normal((B, S, D), dtype=np.float32)
    # with a tiny vocabulary every pair lands in a few rows (V = 1: up to B S T (T-1)/2
    # terms in one row): the heaviest cancellation of all
    close(mk.ops.pair_sums_backward(Gp, tok, len(table)), ref.pair_sums_backward(Gp, tok, len(table)),
          ref.pair_sums_backward(np.abs(Gp), tok, len(table)))
