"""PairSums with a row-sparse gradient for the pair table (``Network(sparse_pair_grad=True)``).

A batch of 1,024 positions touches a few percent of the pair table's rows; a sparse
gradient holding only those rows lets ``torch.optim.SparseAdam`` update them alone and lets
a data-parallel run exchange them alone (:mod:`manaka.torch.distributed`), as
``nn.Embedding(sparse=True)`` does for an embedding.

The gradient is a coalesced ``torch.sparse_coo_tensor`` of shape ``[num_pairs, P]`` whose
indices are exactly the rows the batch touches (every pair of present tokens of a
perspective), sorted ascending, and whose values are those rows of manaka's deterministic
dense backward: ``grad.to_dense()`` equals the dense gradient bitwise, run to run and
thread count to thread count. It leaves the backward marked coalesced, but torch's
gradient accumulation (``AccumulateGrad``) drops that flag on ``param.grad``, as it does for
``nn.Embedding(sparse=True)``: the indices are still unique and sorted, and
``grad.coalesce()`` returns the same indices and values. A touched row whose gradient sums to 0 is kept (it was
touched: SparseAdam decays its moments). The rows are found with a bitmap over the table
(one byte per row), so they come out sorted without a sort.

Cost: the values are gathered from the dense backward, so the backward still writes a
scratch [num_pairs, P] gradient (the optimizer and the exchange are what become sparse).
"""
from __future__ import annotations

import torch
from torch import Tensor

from . import ops

__all__ = ["pair_sums_sparse_grad", "touched_pair_rows"]


def touched_pair_rows(tokens: Tensor, num_pairs: int) -> Tensor:
    """The sorted int64 rows of a [num_pairs, P] pair table that ``pair_sums(table, tokens)``
    reads: ``pair_index(tok_i, tok_j)`` for every pair of slots i < j with both tokens >= 0
    (docs/design.md §1, PairSums)."""
    t = tokens.detach().to(torch.int64)
    T = t.shape[-1]
    i, j = torch.triu_indices(T, T, offset=1, device=t.device)
    a, b = t[..., i], t[..., j]
    lo, hi = torch.minimum(a, b), torch.maximum(a, b)
    present = (a >= 0) & (b >= 0)
    index = (hi * (hi + 1) // 2 + lo)[present]
    mark = torch.zeros(num_pairs, dtype=torch.bool, device=t.device)
    mark[index] = True
    return mark.nonzero().reshape(-1)


class _PairSumsSparseGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, pair_table: Tensor, tokens: Tensor) -> Tensor:
        ctx.save_for_backward(tokens)
        ctx.shape = tuple(pair_table.shape)
        return ops.pair_sums(pair_table.detach(), tokens)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (tokens,) = ctx.saved_tensors
        num_pairs, width = ctx.shape
        dense = ops.pair_sums_backward(grad.contiguous(), tokens, num_pairs)
        rows = touched_pair_rows(tokens, num_pairs)
        values = dense.index_select(0, rows)
        sparse = torch.sparse_coo_tensor(rows.unsqueeze(0), values, (num_pairs, width), is_coalesced=True,
                                         check_invariants=False)  # unique and sorted by construction
        return sparse, None


def pair_sums_sparse_grad(pair_table: Tensor, tokens: Tensor) -> Tensor:
    """:func:`manaka.torch.pair_sums` (same forward, same bits) whose gradient for
    `pair_table` is the coalesced sparse tensor of the rows `tokens` touch (module doc)."""
    return _PairSumsSparseGrad.apply(pair_table, tokens)
