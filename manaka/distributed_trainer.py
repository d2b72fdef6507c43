"""Data-parallel training with the native trainer: ``mk.Trainer(model, process_group=pg)``.

Each process (rank) trains the same model on its own share of every global batch
(``mk.Loader(rank=, world_size=)``). A step runs in two halves in C with the exchange
between them, over ``torch.distributed`` (gloo on CPUs, NCCL on GPUs):

1. ``backward`` (csrc/core/trainer.c, mk_trainer_backward): forward, loss and backward of
   the rank's batch. The dense gradients (every tensor but the pair table: 2.74 M floats,
   11 MB at the seed shapes) are left in the model's gradient buffer; the pair table's are
   the rows the batch names (ids ascending, and their gradient rows), never its 176 MB.
   On the wire a row is its id (int32 while the table has fewer than 2**31 rows) and its
   `pair_dim` floats.
2. The exchange, here. The ranks' stats and row counts are all-gathered (one small
   message). If any rank's loss is not finite, every rank raises FloatingPointError and
   nobody updates. Otherwise the dense gradients are all-reduced (summed) in place and the
   row ids and rows all-gathered (padded to the largest count); every rank sums the rows
   **in rank order** into the sorted union of the ids, and divides both by the world size.
3. ``apply`` (mk_trainer_apply): AdamW from the exchanged gradients: pair_update "dense"
   scatters the rows into a zero gradient and updates every row; "sparse" / "lazy" update
   the union's rows only (catching up the ones this rank's batch did not name).

Every rank runs the same float operations on the same data in the same order (a gloo or
NCCL all-reduce hands every rank the same reduced bits), so the ranks hold the same
parameters bit for bit after every step; W ranks of B positions compute the step of one
process on the W * B positions (the mean of the ranks' mean losses) up to the order of
the float sums. The loss, accuracy and the other stats a step returns are the ranks' mean.

A rank that dies or stalls makes the others' next collective fail: gloo raises at once when
it sees the connection close, and otherwise after the process group's ``timeout``
(``init_process_group(timeout=...)``; ``python -m manaka.train --dist-timeout``). The step
then raises RuntimeError saying so, with nothing applied on that rank.

torch is imported only when a process group is given: a single-process Trainer does not
need it.
"""
from __future__ import annotations

import hashlib
import time
from typing import Dict, Optional

import numpy as np

from . import _core

__all__ = ["Exchange", "ExchangeFailed", "exchange_bytes"]

_STATS = _core.STATS
_FIELDS = ("loss", "policy_loss", "value_loss", "accuracy")


class ExchangeFailed(RuntimeError):
    """A collective of the step failed: another rank died, or did not answer within the
    process group's timeout. The message says what was exchanged, at which step."""


class _CudaBuffer:
    """A device buffer described by the core (a __cuda_array_interface__ dict)."""

    def __init__(self, interface: dict, owner):
        self.__cuda_array_interface__ = interface
        self._owner = owner  # keeps the trainer (and its buffers) alive


def _torch():
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        raise ImportError("Trainer: process_group needs PyTorch (pip install torch; torch.distributed)") from None
    return torch, dist


def exchange_bytes(dense_floats: int, rows_per_rank, pair_dim: int, world: int, id_bytes: int = 4) -> Dict[str, int]:
    """What one rank sends in one step's exchange, by part, in bytes: the stats message
    (9 float64), the dense all-reduce (a ring all-reduce sends 2 (W - 1) / W of its
    payload), and the rows all-gather (its row count padded to the largest rank's: an id of
    `id_bytes` and `pair_dim` floats per row). ``received_rows``: the other ranks' padded
    rows."""
    most = max(rows_per_rank) if len(rows_per_rank) else 0
    dense = 4 * dense_floats * 2 * (world - 1) // world
    rows = most * (id_bytes + 4 * pair_dim)
    return {"stats": 8 * 9, "dense": dense, "rows": rows, "sent": 72 + dense + rows,
            "received_rows": rows * (world - 1)}


class Exchange:
    """The collective half of a data-parallel :class:`manaka.Trainer` (module doc).

    `process_group` must be a ``torch.distributed`` ProcessGroup (``dist.group.WORLD``
    after ``init_process_group``, or one from ``dist.new_group``). Creating it checks that
    every rank holds the same model configuration, parameters, step count and optimizer
    settings (a ValueError naming the first rank that differs, on every rank)."""

    def __init__(self, trainer, process_group):
        torch, dist = _torch()
        if not isinstance(process_group, dist.ProcessGroup):
            raise TypeError("Trainer: process_group must be a torch.distributed ProcessGroup (e.g. "
                            f"torch.distributed.group.WORLD after init_process_group), got {type(process_group).__name__}")
        self.torch, self.dist, self.group = torch, dist, process_group
        self.trainer = trainer
        self.rank = dist.get_rank(process_group)
        self.world = dist.get_world_size(process_group)
        self.device = trainer.model.device == "cuda"
        backend = str(dist.get_backend(process_group))
        if ("nccl" if self.device else "gloo") not in backend:
            raise ValueError(f"Trainer: process_group uses {backend}, but a {'CUDA' if self.device else 'CPU'} model "
                             f"exchanges its gradients over {'NCCL' if self.device else 'gloo'}: "
                             f"init_process_group(\"{'nccl' if self.device else 'gloo'}\")")
        self.pair_dim = trainer.model.config.pair_dim
        # row ids travel as int32 while the table's rows fit (2,748,340 at the seed shapes)
        self.id_dtype = torch.int32 if trainer.model.shapes["pair_table"][0] < 2**31 else torch.int64
        self.last_bytes: Dict[str, int] = {}
        self.last_rows = []
        self.last_seconds: Dict[str, float] = {}
        self._check_same_everywhere()

    # ------------------------------------------------------------ collectives
    def _run(self, what: str, fn, *args, **kwargs):
        """A collective; its failure (a rank gone or silent past the timeout) becomes a
        RuntimeError saying what was exchanged, at which step."""
        try:
            return fn(*args, group=self.group, **kwargs)
        except RuntimeError as e:  # gloo / NCCL errors (DistBackendError is one)
            raise ExchangeFailed(f"Trainer.step: the exchange of {what} with the other ranks failed at step "
                               f"{self.trainer.step_count + 1} on rank {self.rank} of {self.world}: a rank "
                               f"died or did not answer within the process group's timeout ({e})") from e

    def _tensor(self, array: np.ndarray):
        t = self.torch.from_numpy(array)
        return t.cuda() if self.device and self.dist.get_backend(self.group) == "nccl" else t

    def _check_same_everywhere(self) -> None:
        """Every rank must start from the same state: compared through a digest."""
        torch = self.torch
        t = self.trainer
        h = hashlib.blake2b(digest_size=8)
        for name, value in t.model.state_dict().items():  # a sparse trainer flushes first
            h.update(name.encode())
            h.update(np.ascontiguousarray(value).tobytes())
        params = int.from_bytes(h.digest(), "little", signed=True)
        setting = hashlib.blake2b(repr((t.model.config.to_dict(), t.hyperparameters, t.pair_update,
                                        t.pair_state_dtype)).encode(), digest_size=8)
        mine = np.array([params, int.from_bytes(setting.digest(), "little", signed=True), t.step_count],
                        dtype=np.int64)
        everyone = [torch.zeros(3, dtype=torch.int64) for _ in range(self.world)]
        if self.dist.get_backend(self.group) == "nccl":
            everyone = [e.cuda() for e in everyone]
        self._run("the model check", self.dist.all_gather, everyone, self._tensor(mine))
        for r, theirs in enumerate(everyone):
            theirs = theirs.cpu().numpy()
            for k, what in ((1, "model configuration or trainer settings (hyperparameters, pair_update, "
                                "pair_state_dtype)"),
                            (0, "parameters (build every rank's model with the same seed, or load the same "
                                "state on every rank)"),
                            (2, "step count")):
                if theirs[k] != everyone[0].cpu().numpy()[k]:
                    raise ValueError(f"Trainer: process_group: rank {r}'s {what} differ from rank 0's; "
                                     "every rank must start from the same model and trainer state")

    def any(self, flag: bool) -> bool:
        """Whether `flag` holds on any rank (a max all-reduce of one number)."""
        t = self._tensor(np.array([1 if flag else 0], dtype=np.int64))
        self._run("a flag", self.dist.all_reduce, t, op=self.dist.ReduceOp.MAX)
        return bool(int(t.cpu()[0]))

    # ------------------------------------------------------------ one step
    def step(self, batch):
        from .trainer import Stats

        torch, dist = self.torch, self.dist
        core, W = self.trainer._core, self.world
        if isinstance(batch, _core.Batch) and not isinstance(batch.tokens, np.ndarray):
            raise TypeError("Trainer.step: a data-parallel trainer takes batches in host memory (NumPy arrays, "
                            f"as mk.Loader yields them), got tokens of type {type(batch.tokens).__name__}")
        t0 = time.perf_counter()
        stats, rows = core.backward(batch)
        t1 = time.perf_counter()
        # 1. stats and row counts, every rank's, in rank order
        mine = np.zeros(9, dtype=np.float64)
        mine[:8], mine[8] = stats, rows
        gathered = [torch.zeros(9, dtype=torch.float64) for _ in range(W)]
        nccl = dist.get_backend(self.group) == "nccl"
        if nccl:
            gathered = [g.cuda() for g in gathered]
        self._run("the losses", dist.all_gather, gathered, self._tensor(mine))
        every = np.stack([g.cpu().numpy() for g in gathered])
        counts = every[:, 8].astype(np.int64)
        mean = stats.copy()
        for name in _FIELDS:
            total = 0.0
            for r in range(W):  # rank order: the same sum on every rank
                total += every[r, _STATS[name]]
            mean[_STATS[name]] = total / W
        finite = bool(np.all(every[:, _STATS["finite"]] != 0))
        mean[_STATS["finite"]] = 1.0 if finite else 0.0
        if not finite:
            bad = [r for r in range(W) if every[r, _STATS["finite"]] == 0]
            raise FloatingPointError(f"Trainer.step: the loss is not finite on rank(s) {bad} at step "
                                     f"{self.trainer.step_count}; no rank applied the update")
        # 2. dense gradients: summed in place, then the mean
        dense = core.dense_grads()
        g = torch.as_tensor(_CudaBuffer(dense, self), device="cuda") if self.device else torch.from_numpy(dense)
        if self.device:
            torch.cuda.synchronize()
        self._run("the dense gradients", dist.all_reduce, g)
        g.div_(W)
        # 3. pair-table rows: all-gathered, summed in rank order into the union
        if self.device and rows == 0:  # nothing named (an all-empty batch): no buffer to wrap
            ids = torch.zeros(0, dtype=torch.int64, device="cuda")
            grads = torch.zeros((0, self.pair_dim), dtype=torch.float32, device="cuda")
        elif self.device:
            ids, grads = core.pair_rows(rows)
            ids = torch.as_tensor(_CudaBuffer(ids, self), device="cuda")
            grads = torch.as_tensor(_CudaBuffer(grads, self), device="cuda")
        else:
            ids, grads = (torch.from_numpy(a) for a in core.pair_rows(rows))
        most = int(counts.max())
        padded_ids = torch.zeros(most, dtype=self.id_dtype, device=ids.device)
        padded = torch.zeros((most, self.pair_dim), dtype=torch.float32, device=ids.device)
        padded_ids[:rows], padded[:rows] = ids, grads
        all_ids = [torch.empty_like(padded_ids) for _ in range(W)]
        all_rows = [torch.empty_like(padded) for _ in range(W)]
        self._run("the pair-table row ids", dist.all_gather, all_ids, padded_ids)
        self._run("the pair-table rows", dist.all_gather, all_rows, padded)
        kept = [all_ids[r][:int(counts[r])].to(torch.int64) for r in range(W)]
        union = torch.unique(torch.cat(kept))  # sorted
        total = torch.zeros((union.numel(), self.pair_dim), dtype=torch.float32, device=ids.device)
        for r in range(W):  # rank order; each rank's ids are distinct, so each row is added once
            total.index_add_(0, torch.searchsorted(union, kept[r]), all_rows[r][:int(counts[r])])
        total.div_(W)
        self.last_rows = [int(c) for c in counts]
        self.last_bytes = exchange_bytes(int(g.numel()), self.last_rows, self.pair_dim, W,
                                         torch.empty(0, dtype=self.id_dtype).element_size())
        t2 = time.perf_counter()
        # 4. the update, the same on every rank
        if self.device:
            torch.cuda.synchronize()
            union, total = union.contiguous(), total.contiguous()
            out, step = core.apply(union.data_ptr(), total.data_ptr(), mean, int(union.numel()))
        else:
            out, step = core.apply(union.numpy(), total.numpy(), mean)
        self.last_seconds = {"backward": t1 - t0, "exchange": t2 - t1, "apply": time.perf_counter() - t2}
        return Stats(out, step)
