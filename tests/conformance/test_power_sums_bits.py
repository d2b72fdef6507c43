"""PowerSums on the CPU against the plain per-token loop of docs/design.md, bit for bit.

docs/design.md fixes the order of PowerSums' float operations: each power is the chain
e, e*e, (e*e)*e, ..., summed over a row's tokens in order from +0; the backward's term is
Horner's rule from the top order, added to grad_emb[v] in (b, s, t) order. NumPy's float32
operations are IEEE single precision, one rounding each, so the same loop written in NumPy
gives the exact bits. The cases select each of the kernel's paths (csrc/cpu/power_sums.c):
packed 64-column slabs when the batch uses every table row at least 8 times on average and
a slab of the table fits in 1 MiB, direct gathers otherwise; full slabs, single vectors and
a ragged last vector (D mod 16); K from 1 to 7 (1 to 4 unrolled, more through a buffer);
empty slots, empty rows, repeated tokens; 1 and 2 threads."""
import numpy as np
import pytest

import manaka as mk
from op_inputs import tokens as random_tokens


def forward_in_order(emb, tok, K):
    """out[b, s, k] = sum over t in order of emb[tok]^(k+1), each power by the chain."""
    B, S, T = tok.shape
    out = np.zeros((B, S, K, emb.shape[1]), np.float32)
    for t in range(T):
        present = (tok[:, :, t] >= 0)[..., None]
        e = emb[np.maximum(tok[:, :, t], 0)]
        p = e
        for k in range(K):
            out[:, :, k] = np.where(present, out[:, :, k] + p, out[:, :, k])
            p = p * e
    return out


def backward_in_order(grad, emb, tok):
    """grad_emb[v] += sum_k (k+1) grad[b, s, k] emb[v]^k (Horner from the top order, a
    product and a sum per step), over the occurrences of v in (b, s, t) order."""
    K = grad.shape[2]
    b, s, t = np.nonzero(tok >= 0)  # C order: (b, s, t) ascending
    v = tok[b, s, t]
    g, e = grad[b, s], emb[v]  # [n, K, D], [n, D]
    acc = np.float32(K) * g[:, K - 1]
    for k in range(K - 2, -1, -1):
        acc = acc * e + np.float32(k + 1) * g[:, k]  # two roundings: NumPy never fuses
    grad_emb = np.zeros_like(emb)
    np.add.at(grad_emb, v, acc)  # one float32 addition per occurrence, in index order
    return grad_emb


def test_backward_reference_adds_in_order():
    # np.add.at must add repeated indices one at a time, in order: checked against a loop
    rng = np.random.default_rng(3)
    rows = rng.standard_normal((500, 5)).astype(np.float32) * np.float32(1e4) ** rng.integers(-2, 3, (500, 1))
    index = rng.integers(0, 3, 500)
    looped = np.zeros((3, 5), np.float32)
    for i, r in zip(index, rows):
        looped[i] = looped[i] + r
    at = np.zeros((3, 5), np.float32)
    np.add.at(at, index, rows)
    assert np.array_equal(at, looped)


# (B, S, T, V, D, path): "packed" needs B S T >= 8 V (and V <= 4096), "direct" does not.
CASES = [
    (16, 2, 40, 50, 64, "packed"),    # full slabs only
    (16, 2, 40, 50, 100, "packed"),   # a full slab, two vectors, 4 ragged columns
    (16, 2, 40, 50, 143, "packed"),   # two slabs, 15 ragged columns
    (8, 2, 23, 3, 13, "packed"),      # only a ragged vector; every row repeats tokens
    (12, 2, 40, 60, 1, "packed"),     # one column
    (2, 2, 40, 300, 100, "direct"),
    (1, 1, 40, 2344, 256, "direct"),  # one position at the seed's shapes
    (1, 1, 1, 1, 17, "direct"),       # a single token
]


@pytest.mark.parametrize("B,S,T,V,D,path", CASES)
@pytest.mark.parametrize("K", [1, 2, 3, 4, 5, 7])
@pytest.mark.parametrize("threads", [1, 2])
def test_power_sums_bits(B, S, T, V, D, path, K, threads):
    assert (B * S * T >= 8 * V) == (path == "packed")
    rng = np.random.default_rng(B * 1000 + D * 10 + K)
    emb = rng.standard_normal((V, D), dtype=np.float32) * np.float32(0.9)
    tok = random_tokens(rng, B, S, T, V, empty=0.25)
    if B * S > 1:
        tok[0, -1] = -1  # an empty row
    grad = rng.standard_normal((B, S, K, D), dtype=np.float32)
    mk.set_num_threads(threads)
    try:
        out = mk.ops.power_sums(emb, tok, K)
        grad_emb = mk.ops.power_sums_backward(grad, emb, tok)
    finally:
        mk.set_num_threads(0)
    assert np.array_equal(out, forward_in_order(emb, tok, K))
    assert np.array_equal(grad_emb, backward_in_order(grad, emb, tok))


def test_power_sums_bits_large_vocabulary():
    # enough uses per row to pack, but a slab of a 5000-row table (1.3 MB) would not stay
    # in L2: the direct path
    rng = np.random.default_rng(5)
    V, D, K = 5000, 19, 3
    emb = rng.standard_normal((V, D), dtype=np.float32)
    tok = random_tokens(rng, 512, 2, 40, V, empty=0.1)
    grad = rng.standard_normal((512, 2, K, D), dtype=np.float32)
    assert 512 * 2 * 40 >= 8 * V
    assert np.array_equal(mk.ops.power_sums(emb, tok, K), forward_in_order(emb, tok, K))
    assert np.array_equal(mk.ops.power_sums_backward(grad, emb, tok), backward_in_order(grad, emb, tok))


def test_power_sums_bits_tokens_below_the_table():
    # the forward takes V from the largest token: rows above it are never read
    rng = np.random.default_rng(6)
    emb = rng.standard_normal((400, 70), dtype=np.float32)
    tok = random_tokens(rng, 32, 2, 40, 20, empty=0.3)  # tokens < 20 of 400 rows
    grad = rng.standard_normal((32, 2, 4, 70), dtype=np.float32)
    assert np.array_equal(mk.ops.power_sums(emb, tok, 4), forward_in_order(emb, tok, 4))
    assert np.array_equal(mk.ops.power_sums_backward(grad, emb, tok), backward_in_order(grad, emb, tok))
