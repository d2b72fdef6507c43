"""Every fused op against its NumPy reference (tests/helpers/reference.py) on fresh random inputs."""
import numpy as np
import pytest

import manaka as mk
import reference as ref
from assertions import rel_err
from op_inputs import legal_batch, tokens

TOL = 1e-5  # float32 data against a float64 reference

# Each public op and the tests that cover it; test_every_op_is_tested keeps this honest.
COVERED = {
    "gather_dot": "test_gather_dot",
    "gather_dot_backward": "test_gather_dot_backward",
    "power_sums": "test_power_sums",
    "power_sums_backward": "test_power_sums_backward",
    "pair_sums": "test_pair_sums",
    "pair_sums_backward": "test_pair_sums_backward",
    "pair_index": "test_pair_index",
}


def test_every_op_is_tested():
    assert set(mk.ops.__all__) == set(COVERED), "an op without a test (or a test without an op)"
    for test in COVERED.values():
        assert callable(globals()[test])


GATHER_SHAPES = [  # B, L, W, M
    (1, 1, 1, 1),
    (1, 7, 5, 3),
    (4, 16, 33, 9),  # W not a multiple of the vector width
    (17, 40, 64, 2),  # heavy collisions: 2 rows for 680 slots
    (64, 128, 300, 2187),
    (5, 593, 125, 700),  # > 256 legal moves; W = 64 + 32 + 16 + 8 + 4 + 1: every column block
    (6, 300, 13, 9000),  # > 4096 moves: the CPU's sort by table row takes two passes
]


@pytest.mark.parametrize("B,L,W,M", GATHER_SHAPES)
@pytest.mark.parametrize("counts", ["random", "full", "none"])
@pytest.mark.parametrize("pad", [-1, "garbage"])
def test_gather_dot(rng, B, L, W, M, counts, pad):
    hidden, table, indices, cnt = legal_batch(rng, B, L, W, M, counts, pad)
    got = mk.ops.gather_dot(hidden, table, indices, cnt)
    assert got.dtype == np.float32 and got.shape == (B, L)
    assert rel_err(got, ref.gather_dot(hidden, table, indices, cnt)) < TOL
    if cnt is not None:
        assert not np.any(got[np.arange(L)[None] >= cnt[:, None]]), "padded slots must be 0"


@pytest.mark.parametrize("B,L,W,M", GATHER_SHAPES)
@pytest.mark.parametrize("counts", ["random", "full", "none"])
def test_gather_dot_backward(rng, B, L, W, M, counts):
    hidden, table, indices, cnt = legal_batch(rng, B, L, W, M, counts, "garbage")
    grad = rng.standard_normal((B, L), dtype=np.float32)
    gh, gt = mk.ops.gather_dot_backward(grad, hidden, table, indices, cnt)
    want_h, want_t = ref.gather_dot_backward(grad, hidden, table, indices, cnt)
    assert gh.shape == (B, W) and gt.shape == (M, W)
    assert rel_err(gh, want_h) < TOL
    assert rel_err(gt, want_t) < TOL


def test_gather_dot_zero_counts_everywhere(rng):
    hidden, table, indices, _ = legal_batch(rng, 5, 8, 4, 3)
    counts = np.zeros(5, np.int32)
    assert not mk.ops.gather_dot(hidden, table, np.full((5, 8), -7), counts).any()
    gh, gt = mk.ops.gather_dot_backward(np.ones((5, 8), np.float32), hidden, table, indices, counts)
    assert not gh.any() and not gt.any()


def test_gather_dot_backward_is_deterministic_across_thread_counts(rng):
    # ~600 slots per row into 3 rows: the worst case for a scatter.
    hidden, table, indices, counts = legal_batch(rng, 64, 600, 37, 3, "full")
    grad = rng.standard_normal((64, 600), dtype=np.float32)
    results = []
    for threads in (1, 2, 3, 0):
        mk.set_num_threads(threads)
        results.append(mk.ops.gather_dot_backward(grad, hidden, table, indices, counts)[1])
    mk.set_num_threads(0)
    for other in results[1:]:
        assert np.array_equal(results[0], other)


@pytest.mark.parametrize("B,S,T,V,D", [(1, 1, 1, 1, 1), (3, 2, 5, 1, 4), (4, 2, 40, 50, 17),
                                       (8, 2, 40, 2344, 256)])
@pytest.mark.parametrize("K", [1, 2, 4, 6])
def test_power_sums(rng, B, S, T, V, D, K):
    emb = rng.standard_normal((V, D), dtype=np.float32) * 0.7
    tok = tokens(rng, B, S, T, V)
    got = mk.ops.power_sums(emb, tok, K)
    assert got.dtype == np.float32 and got.shape == (B, S, K, D)
    assert rel_err(got, ref.power_sums(emb, tok, K)) < TOL


@pytest.mark.parametrize("B,S,T,V,D", [(1, 1, 1, 1, 1), (3, 2, 5, 1, 4), (4, 2, 40, 50, 17),
                                       (8, 2, 40, 2344, 64)])
@pytest.mark.parametrize("K", [1, 3, 6])
def test_power_sums_backward(rng, B, S, T, V, D, K):
    emb = rng.standard_normal((V, D), dtype=np.float32) * 0.7
    tok = tokens(rng, B, S, T, V)
    grad = rng.standard_normal((B, S, K, D), dtype=np.float32)
    got = mk.ops.power_sums_backward(grad, emb, tok)
    assert got.shape == (V, D)
    assert rel_err(got, ref.power_sums_backward(grad, emb, tok)) < TOL


def test_power_sums_all_empty(rng):
    emb = rng.standard_normal((6, 3), dtype=np.float32)
    tok = np.full((2, 2, 4), -1, np.int32)
    assert not mk.ops.power_sums(emb, tok, 3).any()
    assert not mk.ops.power_sums_backward(np.ones((2, 2, 3, 3), np.float32), emb, tok).any()


@pytest.mark.parametrize("B,S,T,V,P", [(1, 1, 1, 1, 1), (1, 1, 2, 1, 3), (3, 2, 6, 4, 16),
                                       (5, 2, 40, 2344, 16), (2, 2, 40, 300, 5)])
def test_pair_sums(rng, B, S, T, V, P):
    table = rng.standard_normal((V * (V + 1) // 2, P), dtype=np.float32)
    tok = tokens(rng, B, S, T, V)
    got = mk.ops.pair_sums(table, tok)
    assert got.dtype == np.float32 and got.shape == (B, S, P)
    assert rel_err(got, ref.pair_sums(table, tok)) < TOL


@pytest.mark.parametrize("B,S,T,V,P", [(1, 1, 1, 1, 1), (1, 1, 2, 1, 3), (3, 2, 6, 4, 16),
                                       (5, 2, 40, 200, 16)])
def test_pair_sums_backward(rng, B, S, T, V, P):
    tok = tokens(rng, B, S, T, V)
    grad = rng.standard_normal((B, S, P), dtype=np.float32)
    num_pairs = V * (V + 1) // 2
    got = mk.ops.pair_sums_backward(grad, tok, num_pairs)
    assert got.shape == (num_pairs, P)
    assert rel_err(got, ref.pair_sums_backward(grad, tok, num_pairs)) < TOL


@pytest.mark.parametrize("T,P", [(46, 5), (47, 5), (48, 16), (100, 5), (100, 16), (100, 20)])
def test_pair_sums_sums_in_pair_order(rng, T, P):
    # Rows of more than 1,024 pairs (T >= 47) are listed in several blocks by the forward;
    # the sum must still run over (j, i), i < j, in order: the same bits as float32
    # additions in that order, for widths summed in registers (<= 16) or in place.
    V = 300
    table = rng.standard_normal((V * (V + 1) // 2, P), dtype=np.float32)
    tok = tokens(rng, 3, 2, T, V)
    want = np.zeros((3, 2, P), np.float32)
    for b, s in np.ndindex(3, 2):
        t = tok[b, s]
        for j in range(1, T):
            for i in range(j):
                if t[i] >= 0 and t[j] >= 0:
                    want[b, s] += table[ref.pair_index(t[i], t[j])]
    assert mk.ops.pair_sums(table, tok).tobytes() == want.tobytes()


def test_pair_sums_duplicate_tokens(rng):
    # The same token twice in a row is a real pair (a, a): pair_index(a, a) is its own row.
    table = rng.standard_normal((10, 2), dtype=np.float32)
    tok = np.array([[[3, 3, -1, 3]]], np.int32)
    want = 3 * table[ref.pair_index(3, 3)]
    assert np.allclose(mk.ops.pair_sums(table, tok)[0, 0], want, rtol=1e-6)


def test_pair_index():
    assert mk.ops.pair_index(0, 0) == 0
    assert mk.ops.pair_index(2, 1) == mk.ops.pair_index(1, 2) == 4
    V = 2344
    assert mk.ops.pair_index(V - 1, V - 1) == V * (V + 1) // 2 - 1
    a = np.arange(60).reshape(6, 10)
    b = a[::-1]
    got = mk.ops.pair_index(a, b)
    assert got.dtype == np.int64 and np.array_equal(got, ref.pair_index(a, b))
    # Every pair of a small vocabulary maps to a distinct row in [0, V(V+1)/2).
    i, j = np.triu_indices(50)
    rows = mk.ops.pair_index(i, j)
    assert sorted(rows.tolist()) == list(range(50 * 51 // 2))
    with pytest.raises(ValueError, match="negative"):
        mk.ops.pair_index(-1, 3)
    with pytest.raises(TypeError, match="pair_index: a"):
        mk.ops.pair_index(np.array([1.5]), np.array([1]))


@pytest.mark.parametrize("dtype", [np.int16, np.int64, np.uint8, np.uint64])
def test_index_dtypes_are_converted(rng, dtype):
    hidden, table, indices, counts = legal_batch(rng, 6, 9, 8, 7, pad=0)
    want = mk.ops.gather_dot(hidden, table, indices, counts)
    assert np.array_equal(want, mk.ops.gather_dot(hidden, table, indices.astype(dtype), counts.astype(dtype)))
    tok = tokens(rng, 3, 2, 5, 7).astype(np.int16 if np.dtype(dtype).kind == "u" else dtype)  # -1 needs a sign
    emb = rng.standard_normal((7, 4), dtype=np.float32)
    assert np.array_equal(mk.ops.power_sums(emb, tok, 2), mk.ops.power_sums(emb, tok.astype(np.int32), 2))


def test_non_contiguous_inputs_are_accepted(rng):
    hidden, table, indices, counts = legal_batch(rng, 8, 12, 10, 5, pad=0)
    want = mk.ops.gather_dot(hidden, table, indices, counts)
    got = mk.ops.gather_dot(np.asfortranarray(hidden), table[:, :].T.copy().T,
                            np.repeat(indices, 2, axis=1)[:, ::2], counts)
    assert np.array_equal(want, got)
    emb = rng.standard_normal((9, 8), dtype=np.float32)[:, ::2]
    tok = tokens(rng, 2, 2, 6, 9)
    assert rel_err(mk.ops.power_sums(emb, tok, 3), ref.power_sums(emb, tok, 3)) < TOL


def test_inputs_are_never_modified(rng):
    hidden, table, indices, counts = legal_batch(rng, 8, 12, 10, 5)
    grad = rng.standard_normal((8, 12), dtype=np.float32)
    emb = rng.standard_normal((9, 4), dtype=np.float32)
    tok = tokens(rng, 3, 2, 6, 9)
    pair_table = rng.standard_normal((45, 3), dtype=np.float32)
    args = [hidden, table, indices, counts, grad, emb, tok, pair_table]
    before = [a.copy() for a in args]
    mk.ops.gather_dot(hidden, table, indices, counts)
    mk.ops.gather_dot_backward(grad, hidden, table, indices, counts)
    mk.ops.power_sums_backward(mk.ops.power_sums(emb, tok, 3), emb, tok)
    mk.ops.pair_sums_backward(mk.ops.pair_sums(pair_table, tok), tok, 45)
    for a, b in zip(args, before):
        assert np.array_equal(a, b)


def test_out_and_unchecked_calls_on_the_host():
    """_core's ops take out= and check= as _cuda's do (one entry point for every backend)."""
    from manaka import _core

    rng = np.random.default_rng(11)
    hidden, table, indices, counts = legal_batch(rng, 3, 4, 8, 5)
    out = np.full((3, 4), np.nan, np.float32)
    res = _core.gather_dot(hidden, table, indices, counts, out=out, check=False)
    assert res is out
    assert rel_err(out, ref.gather_dot(hidden, table, indices, counts)) < 1e-6
    grad = rng.standard_normal((3, 4), dtype=np.float32)
    gh, gt = np.empty((3, 8), np.float32), np.empty((5, 8), np.float32)
    res = _core.gather_dot_backward(grad, hidden, table, indices, counts, out=(gh, gt))
    assert res[0] is gh and res[1] is gt
    want_h, want_t = ref.gather_dot_backward(grad, hidden, table, indices, counts)
    assert rel_err(gh, want_h) < 1e-6 and rel_err(gt, want_t) < 1e-6
    with pytest.raises(ValueError, match=r"gather_dot: out.shape\[1\]: expected 4, got 5"):
        _core.gather_dot(hidden, table, indices, counts, out=np.empty((3, 5), np.float32))
    frozen = np.empty((3, 4), np.float32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="gather_dot: out is read-only"):
        _core.gather_dot(hidden, table, indices, counts, out=frozen)
    with pytest.raises(ValueError, match="gather_dot: out must be C-contiguous"):
        _core.gather_dot(hidden, table, indices, counts, out=np.empty((4, 3), np.float32).T)
    with pytest.raises(TypeError, match="gather_dot: out must have dtype float32"):
        _core.gather_dot(hidden, table, indices, counts, out=np.empty((3, 4)))
    with pytest.raises(TypeError, match=r"gather_dot\(\) takes 3 positional arguments and an optional one \(2 given\)"):
        _core.gather_dot(hidden, table)
    with pytest.raises(TypeError, match="out must be a \\(grad_hidden, grad_table\\) tuple"):
        _core.gather_dot_backward(grad, hidden, table, indices, counts, out=gh)


def documented_order_dots(hidden, table, indices, counts):
    """GatherDot's logits in the order docs/design.md gives for the CPU, in float32 NumPy:
    eight lanes over w below W - W mod 8, the rest into lane 0, then the lanes in order."""
    W = hidden.shape[1]
    W8 = W - W % 8
    b, l = np.nonzero(np.arange(indices.shape[1])[None] < counts[:, None])
    prod = hidden[b] * table[indices[b, l]]  # float32 products, each rounded
    lanes = np.zeros((len(b), 8), np.float32)
    for c in range(0, W8, 8):
        lanes = lanes + prod[:, c:c + 8]
    for w in range(W8, W):
        lanes[:, 0] = lanes[:, 0] + prod[:, w]
    total = np.zeros(len(b), np.float32)
    for j in range(8):
        total = total + lanes[:, j]
    out = np.zeros(indices.shape, np.float32)
    out[b, l] = total
    return out


@pytest.mark.parametrize("W", [1, 7, 8, 13, 64, 125, 300])
def test_gather_dot_sums_in_the_documented_order(rng, W):
    """The CPU's logits are bitwise the documented order's (eight moves at a time and the
    leftovers one by one: counts 0 to 23, 599 and 600)."""
    hidden, table, _, _ = legal_batch(rng, 26, 600, W, 97)
    indices = rng.integers(0, 97, (26, 600)).astype(np.int32)
    counts = np.concatenate([np.arange(24), [600, 599]]).astype(np.int32)
    want = documented_order_dots(hidden, table, indices, counts)
    np.testing.assert_array_equal(mk.ops.gather_dot(hidden, table, indices, counts), want)
