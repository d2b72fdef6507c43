"""The ops written the ordinary PyTorch way on the GPU, materialising the gathers the
fused kernels avoid (the GPU twin of numpy_ops.py): what the fused CUDA kernels are
measured against, eager and under torch.compile. Not test oracles (tests/helpers/reference.py is).

Inputs are torch CUDA tensors; index tensors are int64 (PyTorch's indexing type) with -1
padding, prepared once outside the timed region."""
import torch


def gather_dot(hidden, table, indices, counts):
    mask = torch.arange(indices.shape[1], device=indices.device)[None] < counts[:, None]
    rows = table[indices.clamp(min=0)]                               # [B, L, W]
    return torch.where(mask, torch.bmm(rows, hidden[:, :, None])[..., 0], 0.0)


def gather_dot_backward(grad, hidden, table, indices, counts):
    mask = torch.arange(indices.shape[1], device=indices.device)[None] < counts[:, None]
    g = torch.where(mask, grad, 0.0)
    safe = indices.clamp(min=0)
    rows = table[safe]                                               # [B, L, W]
    grad_hidden = torch.bmm(g[:, None, :], rows)[:, 0]
    contrib = (g[..., None] * hidden[:, None, :]).reshape(-1, hidden.shape[1])  # [B*L, W]
    grad_table = torch.zeros_like(table).index_add_(0, safe.reshape(-1), contrib)
    return grad_hidden, grad_table


def _gathered(emb, tokens):
    present = tokens >= 0
    return emb[tokens.clamp(min=0)] * present[..., None]             # [B, S, T, D]


def power_sums(emb, tokens, orders: int):
    x = _gathered(emb, tokens)
    sums, power = [], x
    for _ in range(orders):
        sums.append(power.sum(dim=2))
        power = power * x
    return torch.stack(sums, dim=2)


def power_sums_backward(grad, emb, tokens):
    x = _gathered(emb, tokens)
    contrib, power = torch.zeros_like(x), torch.ones_like(x)
    for k in range(grad.shape[2]):
        contrib = contrib + grad[:, :, k, None, :] * (k + 1) * power
        power = power * x
    present = (tokens >= 0)[..., None]
    contrib = (contrib * present).reshape(-1, emb.shape[1])
    return torch.zeros_like(emb).index_add_(0, tokens.clamp(min=0).reshape(-1), contrib)


def _pairs(tokens):
    i, j = torch.triu_indices(tokens.shape[-1], tokens.shape[-1], offset=1, device=tokens.device)
    a, b = tokens[..., i], tokens[..., j]                            # [B, S, T(T-1)/2]
    valid = (a >= 0) & (b >= 0)
    lo, hi = torch.minimum(a, b), torch.maximum(a, b)
    return torch.where(valid, hi * (hi + 1) // 2 + lo, 0), valid


def pair_sums(pair_table, tokens):
    index, valid = _pairs(tokens)
    return (pair_table[index] * valid[..., None]).sum(dim=2)         # [B, S, 780, P] first


def pair_sums_backward(grad, tokens, num_pairs: int):
    index, valid = _pairs(tokens)
    contrib = (grad[:, :, None, :] * valid[..., None]).reshape(-1, grad.shape[-1])
    out = torch.zeros((num_pairs, grad.shape[-1]), device=grad.device, dtype=grad.dtype)
    return out.index_add_(0, index.reshape(-1), contrib)
