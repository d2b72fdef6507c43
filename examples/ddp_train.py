"""Data-parallel training on shogi records with torch.distributed, two ways.

    torchrun --standalone --nproc-per-node 2 examples/ddp_train.py games.hcpe --steps 100
    torchrun --standalone --nproc-per-node 2 examples/ddp_train.py games.hcpe --steps 100 --trainer torch

Each process reads its own share of every epoch (mk.Loader(rank=, world_size=)).

--trainer native (default): the C trainer, mk.Trainer(model, process_group=...), run by
mk.fit on every process. A step computes each process's gradients in C, all-reduces the
dense ones (11 MB at the seed shapes), all-gathers the pair-table rows the batches name
and sums them in rank order, then applies the same AdamW everywhere: every process holds
the same bits after each step. Rank 0 logs, checkpoints (--checkpoint) and writes the
model. `python -m manaka.train --nproc 2` does the same without torchrun.

--trainer torch: manaka.torch.Network under DistributedDataParallel for the dense
parameters, the pair table's touched rows exchanged by manaka.torch.distributed and
trained with SparseAdam.

gloo on CPUs (the default here), NCCL with --backend nccl on GPUs (one per process; the
native trainer's NCCL path has not run on a GPU yet: docs/design.md §8). Rank 0 writes the
model at the end (--out)."""
from __future__ import annotations

import argparse
import datetime
import os

import torch
import torch.distributed as dist

import manaka as mk
import manaka.torch as mkt
from manaka import shogi
from manaka.torch import distributed as mktd


def native(args, rank: int, world: int) -> None:
    """mk.fit with a data-parallel mk.Trainer on this process's shard."""
    data = shogi.open_psv(args.records) if args.psv else shogi.open_hcpe(args.records)
    cfg = mk.ModelConfig(num_tokens=data.num_tokens, num_moves=data.num_moves)
    model = mk.Model(cfg, seed=args.seed, device="cuda" if args.backend == "nccl" else "cpu")
    trainer = mk.Trainer(model, lr=args.lr, weight_decay=0.01, pair_update=args.pair_update,
                         total_steps=args.steps, process_group=dist.group.WORLD)
    loader = mk.Loader(data, batch_size=args.batch_size, seed=args.seed, drop_last=True, rank=rank, world_size=world)
    mk.fit(model, loader, steps=args.steps, trainer=trainer, log_every=10, checkpoint=args.checkpoint,
           resume=args.resume)  # rank 0 logs and checkpoints
    loader.close()
    if rank == 0:
        model.save(args.out)
        print(f"wrote {args.out}")


def main():
    p = argparse.ArgumentParser(description="data-parallel training on shogi records (run under torchrun): the C "
                                "trainer (--trainer native, the default) or manaka.torch.Network (--trainer torch)")
    p.add_argument("records", help="an HCPE file (or .psv with --psv)")
    p.add_argument("--psv", action="store_true")
    p.add_argument("--batch-size", type=int, default=1024, help="positions per rank per step")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", default="gloo")
    p.add_argument("--timeout", type=float, default=120, help="seconds a collective may wait for a dead rank")
    p.add_argument("--out", default="ddp_model.mk")
    p.add_argument("--trainer", choices=["native", "torch"], default="native",
                   help="native: mk.Trainer with a process group; torch: manaka.torch.Network under DDP (default native)")
    p.add_argument("--pair-update", choices=["dense", "sparse", "lazy"], default="dense",
                   help="native trainer: which pair-table rows a step updates")
    p.add_argument("--checkpoint", help="native trainer: mk.fit's checkpoint (rank 0 writes it; --resume continues)")
    p.add_argument("--resume", action="store_true")
    args = p.parse_args()

    if args.backend == "nccl":  # one GPU per process, before CUDA starts (manaka uses the current device)
        os.environ["CUDA_VISIBLE_DEVICES"] = os.environ.get("LOCAL_RANK", "0")
    dist.init_process_group(args.backend, timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.trainer == "native":
        native(args, rank, world)
        dist.destroy_process_group()
        return
    device = torch.device("cuda", 0) if args.backend == "nccl" else None
    if device is not None:
        torch.cuda.set_device(device)
    data = shogi.open_psv(args.records) if args.psv else shogi.open_hcpe(args.records)
    cfg = mk.ModelConfig(num_tokens=data.num_tokens, num_moves=data.num_moves)
    net = mkt.Network(cfg, seed=args.seed, sparse_pair_grad=True).to(device)
    model = mktd.data_parallel(net, check=False)  # the loader's producers checked each batch
    sparse_opt = torch.optim.SparseAdam([net.pair_table], lr=args.lr)
    dense_opt = torch.optim.AdamW(mktd.dense_parameters(net), lr=args.lr, weight_decay=0.01)
    loader = mk.Loader(data, batch_size=args.batch_size, seed=args.seed, drop_last=True, rank=rank, world_size=world)
    step = 0
    while step < args.steps:
        for batch in loader:
            loss = model(**mkt.batch_tensors(batch, device=device))
            sparse_opt.zero_grad(set_to_none=True)
            dense_opt.zero_grad(set_to_none=True)
            loss.backward()
            mktd.all_reduce_pair_grad(net)
            sparse_opt.step()
            dense_opt.step()
            step += 1
            if rank == 0 and step % 10 == 0:
                print(f"step {step} epoch {loader.epoch_fraction:.2f} loss {loss.item():.4f} (rank 0's batch)", flush=True)
            if step == args.steps:
                break
    loader.close()
    if rank == 0:
        net.to_model().save(args.out)
        print(f"wrote {args.out}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
