"""manaka.torch's operators on CPU tensors: forward and every gradient against the float64
NumPy references (tests/helpers/reference.py), a float32 directional-derivative check of each
backward, the torch.library registration (opcheck), and the argument errors of manaka.ops.
Skipped when torch is not installed."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed: pip install torch (manaka[torch])")

import manaka as mk  # noqa: E402
import manaka.torch as mkt  # noqa: E402
import reference as ref  # noqa: E402
from assertions import assert_close  # noqa: E402
from op_inputs import legal_indices, tokens as make_tokens  # noqa: E402

# (B, L, W, M, collide): collide draws moves from the first ids only, so many positions
# (and slots) share table rows
GATHER_SHAPES = [(1, 1, 1, 1, None), (5, 9, 4, 7, None), (16, 33, 12, 20, 3), (3, 64, 40, 500, None),
                 (32, 12, 8, 6, 2)]
# (B, S, T, V, K, D, P, empty fraction)
TOKEN_SHAPES = [(1, 1, 1, 1, 1, 1, 1, 0.0), (4, 2, 6, 8, 3, 5, 4, 0.25), (7, 2, 13, 30, 4, 9, 3, 0.5),
                (3, 1, 40, 5, 2, 3, 2, 0.1), (2, 2, 5, 6, 1, 4, 5, 1.0)]


def t(a, requires_grad=False):
    x = torch.from_numpy(np.ascontiguousarray(a))
    return x.requires_grad_() if requires_grad else x


def gather_inputs(rng, B, L, W, M, collide, counts=True):
    indices, c = legal_indices(rng, B, L, M, counts=counts, collide=collide)
    hidden = rng.standard_normal((B, W), dtype=np.float32)
    table = rng.standard_normal((M, W), dtype=np.float32)
    return hidden, table, indices, c


@pytest.mark.parametrize("counts", [True, False], ids=["counts", "no-counts"])
@pytest.mark.parametrize("shape", GATHER_SHAPES, ids=str)
def test_gather_dot_forward_and_gradients_match_reference(rng, shape, counts):
    hidden, table, indices, c = gather_inputs(rng, *shape, counts=counts)
    grad = rng.standard_normal(indices.shape, dtype=np.float32)
    h, tb = t(hidden, True), t(table, True)
    out = mkt.gather_dot(h, tb, t(indices).long(), None if c is None else t(c))
    assert out.dtype == torch.float32 and out.shape == indices.shape
    assert_close(out.detach().numpy(), ref.gather_dot(hidden, table, indices, c))
    if c is not None:  # padded slots are exactly 0 (a row with counts 0 is all 0)
        assert not out.detach().numpy()[np.arange(indices.shape[1])[None] >= c[:, None]].any()
    out.backward(t(grad))
    want_h, want_t = ref.gather_dot_backward(grad, hidden, table, indices, c)
    assert_close(h.grad.numpy(), want_h)
    assert_close(tb.grad.numpy(), want_t)


@pytest.mark.parametrize("shape", TOKEN_SHAPES, ids=str)
def test_power_sums_forward_and_gradient_match_reference(rng, shape):
    B, S, T, V, K, D, _, empty = shape
    tok = make_tokens(rng, B, S, T, V, empty)
    emb = (rng.standard_normal((V, D)) * 0.7).astype(np.float32)
    grad = rng.standard_normal((B, S, K, D), dtype=np.float32)
    e = t(emb, True)
    out = mkt.power_sums(e, t(tok).long(), K)
    assert out.shape == (B, S, K, D)
    assert_close(out.detach().numpy(), ref.power_sums(emb, tok, K))
    out.backward(t(grad))
    assert_close(e.grad.numpy(), ref.power_sums_backward(grad, emb, tok))


@pytest.mark.parametrize("shape", TOKEN_SHAPES, ids=str)
def test_pair_sums_forward_and_gradient_match_reference(rng, shape):
    B, S, T, V, _, _, P, empty = shape
    tok = make_tokens(rng, B, S, T, V, empty)
    table = rng.standard_normal((V * (V + 1) // 2, P), dtype=np.float32)
    grad = rng.standard_normal((B, S, P), dtype=np.float32)
    pt = t(table, True)
    out = mkt.pair_sums(pt, t(tok))
    assert out.shape == (B, S, P)
    assert_close(out.detach().numpy(), ref.pair_sums(table, tok))
    out.backward(t(grad))
    assert_close(pt.grad.numpy(), ref.pair_sums_backward(grad, tok, len(table)))


def test_all_empty_tokens_give_zero_sums_and_zero_gradients(rng):
    tok = np.full((3, 2, 5), -1, np.int32)
    e, pt = t(rng.standard_normal((4, 3), dtype=np.float32), True), t(rng.standard_normal((10, 2), dtype=np.float32), True)
    ps, pair = mkt.power_sums(e, t(tok), 3), mkt.pair_sums(pt, t(tok))
    assert not ps.detach().any() and not pair.detach().any()
    (ps.sum() + pair.sum()).backward()
    assert not e.grad.any() and not pt.grad.any()


def test_repeated_moves_accumulate_and_backward_is_bitwise_reproducible(rng):
    # every slot of every position is move 2: its table row gets the sum of all of them
    B, L, W, M = 64, 50, 6, 4
    hidden = rng.standard_normal((B, W), dtype=np.float32)
    table = rng.standard_normal((M, W), dtype=np.float32)
    indices = np.full((B, L), 2, np.int64)
    counts = rng.integers(0, L + 1, B)
    grad = rng.standard_normal((B, L), dtype=np.float32)
    runs = []
    for _ in range(3):
        tb = t(table, True)
        mkt.gather_dot(t(hidden), tb, t(indices), t(counts)).backward(t(grad))
        runs.append(tb.grad.numpy().copy())
    assert_close(runs[0], ref.gather_dot_backward(grad, hidden, table, indices, counts)[1])
    assert not runs[0][[0, 1, 3]].any()
    for r in runs[1:]:
        np.testing.assert_array_equal(r, runs[0])


def test_gradient_only_where_required(rng):
    hidden, table, indices, c = gather_inputs(rng, 4, 6, 3, 5, None)
    tb = t(table, True)
    out = mkt.gather_dot(t(hidden), tb, t(indices), t(c))
    assert out.requires_grad
    out.sum().backward()
    assert tb.grad is not None
    with torch.no_grad():
        assert not mkt.gather_dot(t(hidden), tb, t(indices), t(c)).requires_grad


@pytest.mark.parametrize("index_dtype", [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8])
def test_any_integer_index_dtype_and_non_contiguous_floats(rng, index_dtype):
    hidden, table, indices, c = gather_inputs(rng, 5, 7, 4, 9, None)
    indices = np.where(indices < 0, 0, indices)  # uint8 has no -1; padded slots are ignored anyway
    h = t(np.asfortranarray(hidden))  # non-contiguous views are accepted (copied, as in manaka.ops)
    h_view = torch.from_numpy(np.ascontiguousarray(hidden.T)).T
    assert not h_view.is_contiguous()
    for hh in (h, h_view):
        out = mkt.gather_dot(hh, t(table), t(indices).to(index_dtype), t(c).to(index_dtype))
        assert_close(out.numpy(), ref.gather_dot(hidden, table, indices, c))


# ---------------------------------------------------------------- directional derivatives

def directional_check(f, x, rng, h, tol):
    """d/de f(x + e v) at 0 by central differences (float32 forward, float64 sums) against
    <grad f(x), v> from autograd, for a random direction v."""
    x = x.detach().clone().requires_grad_()
    f(x).backward()
    v = torch.from_numpy(rng.standard_normal(tuple(x.shape)).astype(np.float32))
    with torch.no_grad():
        plus, minus = float(f(x + h * v).double()), float(f(x - h * v).double())
    numeric = (plus - minus) / (2 * h)
    analytic = float((x.grad.double() * v.double()).sum())
    assert abs(numeric - analytic) <= tol * max(abs(analytic), 1.0), (numeric, analytic)


# Tolerances: gather_dot and pair_sums are linear in each float input, so the central
# difference is exact up to float32 rounding of f (~1e-7 |f| / h); power_sums is a
# polynomial of degree K, whose h^2 truncation term at h = 1e-2 and |emb| <= ~2 stays
# under 1e-3 relative.
def test_directional_derivatives_float32(rng):
    hidden, table, indices, c = gather_inputs(rng, 6, 10, 5, 8, 3)
    w = t(rng.standard_normal(indices.shape, dtype=np.float32))
    I, C = t(indices), t(c)
    directional_check(lambda x: (mkt.gather_dot(x, t(table), I, C) * w).sum(), t(hidden), rng, 1e-2, 1e-3)
    directional_check(lambda x: (mkt.gather_dot(t(hidden), x, I, C) * w).sum(), t(table), rng, 1e-2, 1e-3)
    tok = t(make_tokens(rng, 5, 2, 7, 6))
    K, D, P = 4, 3, 2
    wp = t(rng.standard_normal((5, 2, K, D), dtype=np.float32))
    emb = t((rng.standard_normal((6, D)) * 0.7).astype(np.float32))
    directional_check(lambda x: (mkt.power_sums(x, tok, K) * wp).sum(), emb, rng, 1e-2, 1e-3)
    wq = t(rng.standard_normal((5, 2, P), dtype=np.float32))
    table2 = t(rng.standard_normal((21, P), dtype=np.float32))
    directional_check(lambda x: (mkt.pair_sums(x, tok) * wq).sum(), table2, rng, 1e-2, 1e-3)


def test_opcheck_registration(rng):
    """torch.library.opcheck: schema, fake (meta) kernel against the real one, autograd
    registration and AOT dispatch, for each op."""
    hidden, table, indices, c = gather_inputs(rng, 4, 6, 3, 5, None)
    tok = t(make_tokens(rng, 3, 2, 5, 6))
    cases = [
        (mkt.gather_dot, (t(hidden, True), t(table, True), t(indices), t(c))),
        (mkt.gather_dot, (t(hidden, True), t(table, True), t(np.maximum(indices, 0)), None)),
        # mkt.power_sums is a Python function checking `orders` before this operator
        (torch.ops.manaka.power_sums.default, (t(rng.standard_normal((6, 4), dtype=np.float32), True), tok, 3)),
        (mkt.pair_sums, (t(rng.standard_normal((21, 2), dtype=np.float32), True), tok)),
    ]
    for op, args in cases:
        torch.library.opcheck(op, args)


def test_fake_tensors_propagate_shapes():
    meta = dict(device="meta")
    logits = mkt.gather_dot(torch.empty(3, 4, **meta), torch.empty(9, 4, **meta),
                            torch.empty(3, 7, dtype=torch.long, **meta))
    assert logits.shape == (3, 7) and logits.device.type == "meta"
    tok = torch.empty(2, 2, 5, dtype=torch.long, **meta)
    assert mkt.power_sums(torch.empty(6, 4, **meta), tok, 3).shape == (2, 2, 3, 4)
    assert mkt.pair_sums(torch.empty(21, 5, **meta), tok).shape == (2, 2, 5)


# ---------------------------------------------------------------- errors: those of manaka.ops

def same_error(torch_call, numpy_call):
    with pytest.raises(Exception) as want:
        numpy_call()
    with pytest.raises(want.type) as got:
        torch_call()
    assert str(got.value) == str(want.value)
    return str(got.value)


def test_errors_are_manaka_ops_errors(rng):
    hidden, table, indices, c = gather_inputs(rng, 4, 6, 3, 5, None)
    bad_index = np.where(indices >= 0, 5, -1)
    bad_counts = np.full(4, 7)
    assert "out of range" in same_error(lambda: mkt.gather_dot(t(hidden), t(table), t(bad_index), t(c)),
                                        lambda: mk.ops.gather_dot(hidden, table, bad_index, c))
    assert "counts[0] = 7" in same_error(lambda: mkt.gather_dot(t(hidden), t(table), t(indices), t(bad_counts)),
                                         lambda: mk.ops.gather_dot(hidden, table, indices, bad_counts))
    h64 = hidden.astype(np.float64)
    assert "float32" in same_error(lambda: mkt.gather_dot(t(h64), t(table), t(indices), t(c)),
                                   lambda: mk.ops.gather_dot(h64, table, indices, c))
    assert "table.shape[1]" in same_error(lambda: mkt.gather_dot(t(hidden), t(table[:, :2]), t(indices), t(c)),
                                          lambda: mk.ops.gather_dot(hidden, table[:, :2], indices, c))
    tok = make_tokens(rng, 2, 2, 4, 6)
    tok[1, 0, 3] = 6
    emb, pair_table = rng.standard_normal((6, 3), dtype=np.float32), rng.standard_normal((21, 2), dtype=np.float32)
    same_error(lambda: mkt.power_sums(t(emb), t(tok), 2), lambda: mk.ops.power_sums(emb, tok, 2))
    same_error(lambda: mkt.pair_sums(t(pair_table), t(tok)), lambda: mk.ops.pair_sums(pair_table, tok))
    tok[1, 0, 3] = 0
    same_error(lambda: mkt.power_sums(t(emb), t(tok), 0), lambda: mk.ops.power_sums(emb, tok, 0))
    same_error(lambda: mkt.pair_sums(t(pair_table[:20]), t(tok)), lambda: mk.ops.pair_sums(pair_table[:20], tok))
    same_error(lambda: mkt.power_sums(t(emb), t(tok.astype(np.float32)), 2),
               lambda: mk.ops.power_sums(emb, tok.astype(np.float32), 2))


def test_orders_must_be_an_int_not_a_bool(rng):
    emb, tok = t(rng.standard_normal((6, 3), dtype=np.float32)), t(make_tokens(rng, 2, 2, 4, 6))
    for orders in (True, False, np.bool_(True), 2.0):
        with pytest.raises(TypeError, match="power_sums: orders must be an int"):
            mkt.power_sums(emb, tok, orders)
    assert mkt.power_sums(emb, tok, np.int64(2)).shape == (2, 2, 2, 3)
    grad = t(rng.standard_normal((2, 2, 3), dtype=np.float32))
    with pytest.raises(TypeError, match="pair_sums_backward: num_pairs must be an int"):
        mkt.ops.pair_sums_backward(grad, tok, True)
    # the check is traced, not a graph break
    compiled = torch.compile(lambda e, k: mkt.power_sums(e, k, 2), fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(emb, tok), mkt.power_sums(emb, tok, 2))


def test_manaka_ops_on_a_tensor_that_requires_grad_says_detach(rng):
    hidden, table, indices, c = gather_inputs(rng, 4, 6, 3, 5, None)
    for args, name in (((t(hidden, True), t(table), t(indices), t(c)), "hidden"),
                       ((t(hidden), t(table, True), t(indices), t(c)), "table")):
        with pytest.raises(TypeError, match=rf"gather_dot: {name} is a tensor that requires grad.*"
                                            rf"pass {name}\.detach\(\).*manaka\.torch\.gather_dot"):
            mk.ops.gather_dot(*args)
    emb = t(rng.standard_normal((6, 3), dtype=np.float32), True)
    with pytest.raises(TypeError, match=r"power_sums: emb is a tensor that requires grad"):
        mk.ops.power_sums(emb, t(make_tokens(rng, 2, 2, 4, 6)), 2)
    # detached, the same call is fine and equals the NumPy one
    got = mk.ops.gather_dot(t(hidden, True).detach(), t(table), t(indices), t(c))
    np.testing.assert_array_equal(got, mk.ops.gather_dot(hidden, table, indices, c))


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch: CSR is beta, quantized tensors deprecated
def test_a_sparse_or_quantized_tensor_is_refused_by_name(rng):
    hidden, table, indices, c = gather_inputs(rng, 4, 6, 3, 5, None)
    h, tb, ix, cn = t(hidden), t(table), t(indices), t(c)
    for args, name, kind in (((h, tb.to_sparse(), ix, cn), "table", "sparse_coo"),
                             ((h.to_sparse_csr(), tb, ix, cn), "hidden", "sparse_csr"),
                             ((torch.quantize_per_tensor(h, 0.1, 0, torch.qint8), tb, ix, cn), "hidden", "quantized"),
                             ((h, tb, ix.to_sparse(), cn), "indices", "sparse_coo")):
        with pytest.raises(TypeError, match=rf"gather_dot: {name} is a {kind} tensor; pass a dense one"):
            mkt.gather_dot(*args)
    emb, tok = rng.standard_normal((6, 3), dtype=np.float32), make_tokens(rng, 2, 2, 4, 6)
    with pytest.raises(TypeError, match="power_sums: emb is a sparse_coo tensor"):
        mkt.power_sums(t(emb).to_sparse(), t(tok), 2)
    with pytest.raises(TypeError, match="pair_sums: tokens is a sparse_coo tensor"):
        mkt.pair_sums(t(rng.standard_normal((21, 2), dtype=np.float32)), t(tok).to_sparse())
