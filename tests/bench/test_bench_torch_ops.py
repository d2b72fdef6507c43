"""The materialising PyTorch versions the GPU benchmark runs beside the fused kernels
(manaka/bench/torch_ops.py) compute the same thing as the references; checked here on
PyTorch's CPU device, so a wrong baseline never costs GPU time."""
import numpy as np
import pytest

import reference as ref

torch = pytest.importorskip("torch")
from manaka.bench import torch_ops  # noqa: E402


def close(got, want, tol=1e-5):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    err = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)
    assert err < tol, err


def t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def test_torch_ops_match_the_references():
    rng = np.random.default_rng(0)
    B, L, W, M, S, T, V, D, K, P = 4, 9, 6, 7, 2, 6, 8, 5, 3, 4
    hidden = rng.standard_normal((B, W)).astype(np.float32)
    table = rng.standard_normal((M, W)).astype(np.float32)
    counts = np.array([0, 9, 3, 5], np.int64)
    indices = rng.integers(0, M, (B, L)).astype(np.int64)
    indices[np.arange(L)[None] >= counts[:, None]] = -1
    grad = rng.standard_normal((B, L)).astype(np.float32)
    tokens = rng.integers(0, V, (B, S, T)).astype(np.int64)
    tokens[rng.random(tokens.shape) < 0.3] = -1
    emb = (rng.standard_normal((V, D)) * 0.5).astype(np.float32)
    pair_table = rng.standard_normal((V * (V + 1) // 2, P)).astype(np.float32)
    gpow = rng.standard_normal((B, S, K, D)).astype(np.float32)
    gpair = rng.standard_normal((B, S, P)).astype(np.float32)

    close(torch_ops.gather_dot(t(hidden), t(table), t(indices), t(counts)),
          ref.gather_dot(hidden, table, indices, counts))
    for got, want in zip(torch_ops.gather_dot_backward(t(grad), t(hidden), t(table), t(indices), t(counts)),
                         ref.gather_dot_backward(grad, hidden, table, indices, counts)):
        close(got, want)
    close(torch_ops.power_sums(t(emb), t(tokens), K), ref.power_sums(emb, tokens, K))
    close(torch_ops.power_sums_backward(t(gpow), t(emb), t(tokens)), ref.power_sums_backward(gpow, emb, tokens))
    close(torch_ops.pair_sums(t(pair_table), t(tokens)), ref.pair_sums(pair_table, tokens))
    close(torch_ops.pair_sums_backward(t(gpair), t(tokens), len(pair_table)),
          ref.pair_sums_backward(gpair, tokens, len(pair_table)))
