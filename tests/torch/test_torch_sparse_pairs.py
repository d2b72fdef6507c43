"""Network(sparse_pair_grad=True): the pair table's gradient is a coalesced sparse tensor of
exactly the touched rows, equal to the dense gradient bitwise; SparseAdam on it steps as a
NumPy reference of SparseAdam's rule; the other parameters' gradients are unchanged."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed: pip install torch (manaka[torch])")

import manaka.torch as mkt  # noqa: E402
import model_cases as cases  # noqa: E402
from manaka.torch.sparse_pairs import touched_pair_rows  # noqa: E402


def fresh(seed=None):
    seed = int(np.random.default_rng(seed).integers(1 << 30))
    cfg = cases.config(hidden=(9,), num_tokens=23, T=7, pair_dim=3)
    return cfg, seed


def reference_rows(tokens, num_pairs):
    """Touched rows by plain Python loops over the slots."""
    rows = set()
    for side in tokens.reshape(-1, tokens.shape[-1]):
        for i in range(len(side)):
            for j in range(i + 1, len(side)):
                a, b = int(side[i]), int(side[j])
                if a >= 0 and b >= 0:
                    lo, hi = min(a, b), max(a, b)
                    rows.add(hi * (hi + 1) // 2 + lo)
    return np.array(sorted(rows), np.int64)


def grads(net, b):
    net.zero_grad(set_to_none=True)
    net.loss(**mkt.batch_tensors(b)).backward()
    return {n: p.grad for n, p in net.named_parameters()}


def test_sparse_gradient_is_the_dense_one_on_the_touched_rows():
    cfg, seed = fresh()
    b = cases.batch(cfg, B=9, L=8, seed=seed % 1000)
    dense_net = mkt.Network(cfg, seed=seed % 1000)
    sparse_net = mkt.Network(cfg, seed=seed % 1000, sparse_pair_grad=True)
    dense, sparse = grads(dense_net, b), grads(sparse_net, b)
    g = sparse["pair_table"]
    assert g.is_sparse and g.shape == dense_net.pair_table.shape
    # coalesced in content (torch's AccumulateGrad drops the flag, as for nn.Embedding)
    c = g.coalesce()
    assert torch.equal(c.indices(), g._indices()) and torch.equal(c.values(), g._values())
    g = c
    rows = g.indices()[0].numpy()
    want_rows = reference_rows(b.tokens, cfg.num_pairs)
    np.testing.assert_array_equal(rows, want_rows)  # sorted, exactly the touched rows
    assert len(rows) < cfg.num_pairs  # the case does leave rows untouched
    assert torch.equal(g.to_dense(), dense["pair_table"])  # bitwise
    untouched = np.setdiff1d(np.arange(cfg.num_pairs), rows)
    assert (dense["pair_table"][untouched] == 0).all()
    for name in dense:
        if name != "pair_table":
            assert torch.equal(sparse[name], dense[name]), name
    # deterministic: a second backward gives the same bits
    again = grads(sparse_net, b)["pair_table"].coalesce()
    assert torch.equal(again.indices(), g.indices()) and torch.equal(again.values(), g.values())
    np.testing.assert_array_equal(touched_pair_rows(torch.as_tensor(b.tokens), cfg.num_pairs).numpy(), want_rows)


def sparse_adam_reference(p, steps, lr, betas, eps):
    """torch.optim.SparseAdam's documented rule in float64 NumPy: for the rows of each
    step's gradient only, m and v move as Adam's, and the row takes
    lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps), t the optimizer's step count."""
    p = p.astype(np.float64)
    m, v = np.zeros_like(p), np.zeros_like(p)
    b1, b2 = betas
    for t, (rows, values) in enumerate(steps, 1):
        g = values.astype(np.float64)
        m[rows] = b1 * m[rows] + (1 - b1) * g
        v[rows] = b2 * v[rows] + (1 - b2) * g * g
        step = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        p[rows] -= step * m[rows] / (np.sqrt(v[rows]) + eps)
    return p


def test_sparse_adam_steps_as_its_reference_and_adamw_trains_the_rest():
    cfg, seed = fresh()
    net = mkt.Network(cfg, seed=seed % 1000, sparse_pair_grad=True)
    start = net.pair_table.detach().numpy().copy()
    sparse_opt = torch.optim.SparseAdam([net.pair_table], lr=0.01, betas=(0.8, 0.95), eps=1e-6)
    others = [p for n, p in net.named_parameters() if n != "pair_table"]
    dense_opt = torch.optim.AdamW(others, lr=0.01)
    before = [p.detach().clone() for p in others]
    steps = []
    for k in range(5):
        b = cases.batch(cfg, B=4, L=8, seed=seed % 997 + k, empty_fraction=0.5)
        sparse_opt.zero_grad(set_to_none=True)
        dense_opt.zero_grad(set_to_none=True)
        net.loss(**mkt.batch_tensors(b)).backward()
        g = net.pair_table.grad.coalesce()
        steps.append((g.indices()[0].numpy().copy(), g.values().numpy().copy()))
        sparse_opt.step()
        dense_opt.step()
    want = sparse_adam_reference(start, steps, 0.01, (0.8, 0.95), 1e-6)
    got = net.pair_table.detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    never = np.setdiff1d(np.arange(cfg.num_pairs), np.concatenate([r for r, _ in steps]))
    assert len(never) > 0 and np.array_equal(got[never], start[never])  # untouched rows never move
    assert all(not torch.equal(a, p) for a, p in zip(before, others))


def test_bad_option():
    cfg, _ = fresh()
    with pytest.raises(TypeError, match="sparse_pair_grad"):
        mkt.Network(cfg, sparse_pair_grad=1)


def test_torch_compile_with_a_sparse_pair_gradient():
    """torch.compile of the loss traces the custom autograd.Function: the same rows, and
    values to rounding (inductor reorders the dense layers' float sums upstream)."""
    cfg, seed = fresh()
    b = cases.batch(cfg, B=5, L=8, seed=seed % 1000)
    eager = mkt.Network(cfg, seed=3, sparse_pair_grad=True)
    compiled_net = mkt.Network(cfg, seed=3, sparse_pair_grad=True)
    want = grads(eager, b)["pair_table"].coalesce()
    loss = torch.compile(compiled_net.loss)
    loss(**mkt.batch_tensors(b)).backward()
    got = compiled_net.pair_table.grad.coalesce()
    assert torch.equal(got.indices(), want.indices())
    torch.testing.assert_close(got.values(), want.values(), rtol=1e-5, atol=1e-7)
