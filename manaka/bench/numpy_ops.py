"""The ops written the ordinary NumPy way, materialising the gathers the fused kernels
avoid. These are what a researcher would write first; the benchmark runs them beside the
fused ops (they are not test oracles: tests/helpers/reference.py is)."""
import numpy as np


def gather_dot(hidden, table, indices, counts):
    mask = np.arange(indices.shape[1])[None] < counts[:, None]
    rows = table[np.where(mask, indices, 0)]                     # [B, L, W]: 0.74 GB at the seed
    return np.where(mask, np.matmul(rows, hidden[:, :, None])[..., 0], 0.0)


def gather_dot_backward(grad, hidden, table, indices, counts):
    mask = np.arange(indices.shape[1])[None] < counts[:, None]
    g = np.where(mask, grad, 0.0).astype(np.float32)
    rows = table[np.where(mask, indices, 0)]                     # [B, L, W]
    grad_hidden = np.matmul(g[:, None, :], rows)[:, 0]
    b, l = np.nonzero(mask)
    grad_table = np.zeros_like(table)
    np.add.at(grad_table, indices[b, l], g[b, l, None] * hidden[b])   # [N, W] contributions
    return grad_hidden, grad_table


def _gathered(emb, tokens):
    present = tokens >= 0
    return np.where(present[..., None], emb[np.where(present, tokens, 0)], 0.0)  # [B, S, T, D]


def power_sums(emb, tokens, orders):
    x = _gathered(emb, tokens)
    sums, power = [], x
    for _ in range(orders):  # repeated products: much faster than x ** k in NumPy
        sums.append(power.sum(axis=2))
        power = power * x
    return np.stack(sums, axis=2)


def power_sums_backward(grad, emb, tokens):
    x = _gathered(emb, tokens)                                   # [B, S, T, D]
    contrib, power = 0.0, np.ones_like(x)
    for k in range(grad.shape[2]):
        contrib = contrib + grad[:, :, k, None, :] * (k + 1) * power
        power = power * x
    present = tokens >= 0
    grad_emb = np.zeros_like(emb)
    np.add.at(grad_emb, tokens[present], contrib[present])
    return grad_emb


def _pairs(tokens):
    i, j = np.triu_indices(tokens.shape[-1], k=1)
    a, b = tokens[..., i], tokens[..., j]                        # [B, S, T(T-1)/2]
    valid = (a >= 0) & (b >= 0)
    lo, hi = np.minimum(a, b).astype(np.int64), np.maximum(a, b).astype(np.int64)
    return np.where(valid, hi * (hi + 1) // 2 + lo, 0), valid


def pair_sums(pair_table, tokens):
    index, valid = _pairs(tokens)
    rows = pair_table[index]                                     # [B, S, 780, P]
    return np.where(valid[..., None], rows, 0.0).sum(axis=2)


def pair_sums_backward(grad, tokens, num_pairs):
    index, valid = _pairs(tokens)
    out = np.zeros((num_pairs, grad.shape[-1]), np.float32)
    b, s, _ = np.nonzero(valid)
    np.add.at(out, index[valid], grad[b, s])                     # [N, P] contributions
    return out
