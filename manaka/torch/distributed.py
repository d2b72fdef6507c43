"""Data-parallel training of :class:`manaka.torch.Network` over ``torch.distributed``
(gloo on CPUs, NCCL on GPUs), exchanging only the pair-table rows a batch touches.

    import torch.distributed as dist, manaka.torch as mkt
    from manaka.torch import distributed as mktd
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))   # torchrun sets the rest
    net = mkt.Network(cfg, seed=0, sparse_pair_grad=True)
    model = mktd.data_parallel(net)             # DDP over the dense parameters
    sparse_opt = torch.optim.SparseAdam([net.pair_table], lr=1e-3)
    dense_opt = torch.optim.AdamW(mktd.dense_parameters(net), lr=1e-3)
    loader = mk.Loader(data, batch_size=1024, rank=dist.get_rank(), world_size=dist.get_world_size())
    for batch in loader:
        loss = model(**mkt.batch_tensors(batch))    # the forward returns the loss
        sparse_opt.zero_grad(); dense_opt.zero_grad()
        loss.backward()                             # DDP all-reduces the dense gradients
        mktd.all_reduce_pair_grad(net)              # the touched pair rows, summed in rank order
        sparse_opt.step(); dense_opt.step()

What moves and how (docs/torch.md, "Data-parallel training"):

* The dense parameters (the embedding, trunk, heads: ~11 MB at the seed shapes) go through
  ``DistributedDataParallel``'s buckets: averaged over the ranks, overlapped with backward.
* With ``sparse_pair_grad=True`` the pair table is left out of DDP (its dense all-reduce
  would be ~176 MB at the seed shapes). After backward, :func:`all_reduce_pair_grad`
  all-gathers every rank's touched row ids and rows (padded to the largest count), and
  every rank sums them **in rank order** into the union of the rows, then divides by the
  world size (DDP's mean). Every rank runs the same float operations on the same data in
  the same order, so every rank holds the same bits, whatever the timing.
* Without ``sparse_pair_grad`` the pair table goes through DDP like the rest (dense).

With equal batches on every rank (``mk.Loader(rank=, world_size=)`` without a short last
step), W ranks of B positions compute the gradient of one process on the W * B positions
(the mean of the ranks' mean losses), up to the order of the float sums.

A rank that dies mid-step makes the others' next collective fail after the process group's
``timeout`` (or at once, when gloo sees the connection close) with a RuntimeError: pass a
``timeout`` to ``init_process_group``; the default is long (30 minutes for gloo).
"""
from __future__ import annotations

from typing import Dict, List, Optional

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from .network import Network

__all__ = ["LossModule", "data_parallel", "dense_parameters", "all_reduce_pair_grad", "PAIR_TABLE"]

PAIR_TABLE = "pair_table"
RELATIVE_INDEX_BUFFERS = ("relative_token_part", "relative_class_part")


class LossModule(nn.Module):
    """Wraps a :class:`Network` so that ``forward`` returns its training loss (what
    ``DistributedDataParallel`` needs: it hooks ``forward``, not ``Network.loss``).
    ``forward(tokens, legal, counts, target, value, policy_target=None)`` takes the fields
    of :func:`manaka.torch.batch_tensors`; `value_weight` and `check` as ``Network.loss``."""

    def __init__(self, net: Network, value_weight: float = 1.0, check: bool = True):
        super().__init__()
        if not isinstance(net, Network):
            raise TypeError(f"LossModule: net must be a manaka.torch.Network, got {type(net).__name__}")
        from ..evaluate.metrics import check_value_weight

        # refused here, not at the first forward of every rank (Network.loss's rule)
        self.net, self.value_weight, self.check = net, check_value_weight("LossModule", value_weight), bool(check)

    def forward(self, tokens: Tensor, legal: Tensor, counts: Tensor, target: Tensor, value: Tensor,
                policy_target: Optional[Tensor] = None) -> Tensor:
        return self.net.loss(tokens, legal, counts, target, value, policy_target, self.value_weight, self.check)


def dense_parameters(net: Network) -> List[nn.Parameter]:
    """Every parameter of `net` but the pair table (for the dense optimizer)."""
    return [p for name, p in net.named_parameters() if name != PAIR_TABLE]


def data_parallel(net: Network, process_group=None, value_weight: float = 1.0, check: bool = True,
                  **ddp_kwargs) -> DistributedDataParallel:
    """``DistributedDataParallel(LossModule(net))``: calling it returns the loss.

    With ``net.sparse_pair_grad`` the pair table is left out of DDP (call
    :func:`all_reduce_pair_grad` after each backward) and broadcast from rank 0 here, as DDP
    broadcasts the parameters it owns. The index buffers of the move-pair table's relative
    part (constants of the config) are left out of DDP's buffer broadcast; its table and
    MoveHidden's three parameters are dense parameters like the rest. `ddp_kwargs` go to
    ``DistributedDataParallel``. Needs an initialised default process group (or `process_group`)."""
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("data_parallel: torch.distributed is not initialised: call "
                           "torch.distributed.init_process_group first (torchrun sets its environment)")
    module = LossModule(net, value_weight, check)
    # the relative part's index buffers are constants of the config, the same on every
    # rank: DDP would broadcast them before every forward
    ignore = [f"net.{name}" for name, _ in net.named_buffers() if name in RELATIVE_INDEX_BUFFERS]
    if net.sparse_pair_grad:
        ignore.append(f"net.{PAIR_TABLE}")
    if ignore:
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(module, ignore)
    if net.sparse_pair_grad:
        with torch.no_grad():
            dist.broadcast(net.pair_table.data, src=_global_rank(0, process_group), group=process_group)
    return DistributedDataParallel(module, process_group=process_group, **ddp_kwargs)


def _global_rank(rank: int, group) -> int:
    return rank if group is None else dist.get_global_rank(group, rank)


def all_reduce_pair_grad(net: Network, process_group=None, stats: Optional[Dict[str, int]] = None) -> None:
    """Replaces ``net.pair_table.grad`` (a sparse gradient: ``sparse_pair_grad=True``) on
    every rank by the mean over the ranks, as a sparse tensor of the union of their rows,
    sorted. The rows are all-gathered and summed in rank order (module doc): every rank
    ends with the same bits. A rank without a gradient (no backward) is an error.

    `stats`, when given, receives ``rows`` (this rank's touched rows), ``union`` (rows after
    the sum), ``bytes_sent`` (this rank's payload in the all-gathers: its count, its padded
    row ids and rows) and ``bytes_received`` (the other ranks' payloads)."""
    if not net.sparse_pair_grad:
        raise ValueError("all_reduce_pair_grad: the network was built with sparse_pair_grad=False; "
                         "its pair table is reduced by DistributedDataParallel")
    grad = net.pair_table.grad
    if grad is None or not grad.is_sparse:
        raise RuntimeError("all_reduce_pair_grad: the pair table has no sparse gradient on this rank: "
                           "call it after loss.backward()")
    world = dist.get_world_size(process_group)
    grad = grad.coalesce()
    rows, values = grad.indices()[0], grad.values()
    num_pairs, width = grad.shape
    count = torch.tensor([rows.numel()], dtype=torch.int64, device=rows.device)
    counts = [torch.empty_like(count) for _ in range(world)]
    dist.all_gather(counts, count, group=process_group)
    most = int(max(int(c) for c in counts))
    padded_rows = torch.zeros(most, dtype=torch.int64, device=rows.device)
    padded_values = torch.zeros((most, width), dtype=values.dtype, device=values.device)
    padded_rows[:rows.numel()] = rows
    padded_values[:rows.numel()] = values
    all_rows = [torch.empty_like(padded_rows) for _ in range(world)]
    all_values = [torch.empty_like(padded_values) for _ in range(world)]
    dist.all_gather(all_rows, padded_rows, group=process_group)
    dist.all_gather(all_values, padded_values, group=process_group)
    kept = [r[:int(c)] for r, c in zip(all_rows, counts)]
    union = torch.unique(torch.cat(kept))  # sorted
    total = torch.zeros((union.numel(), width), dtype=values.dtype, device=values.device)
    for r in range(world):  # rank order: the same additions in the same order on every rank
        # each rank's rows are unique, so one index_add_ adds each row once
        total.index_add_(0, torch.searchsorted(union, kept[r]), all_values[r][:int(counts[r])])
    total /= world
    net.pair_table.grad = torch.sparse_coo_tensor(union.unsqueeze(0), total, (num_pairs, width),
                                                  is_coalesced=True, check_invariants=False)
    if stats is not None:
        per_rank = 8 + most * (8 + width * values.element_size())
        stats.update(rows=int(rows.numel()), union=int(union.numel()), bytes_sent=per_rank,
                     bytes_received=per_rank * (world - 1))
