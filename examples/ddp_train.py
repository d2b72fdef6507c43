"""Data-parallel training of manaka.torch.Network on shogi records with torch.distributed.

    torchrun --standalone --nproc-per-node 2 examples/ddp_train.py games.hcpe --steps 100

Each process reads its own share of every epoch (mk.Loader(rank=, world_size=)), the dense
parameters are averaged by DistributedDataParallel, and the pair table's touched rows are
exchanged and summed in rank order (manaka.torch.distributed), so every rank holds the
same bits after each step. gloo on CPUs (the default here), NCCL with --backend nccl on
GPUs. Rank 0 writes the model at the end (--out)."""
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


def main():
    p = argparse.ArgumentParser(description="data-parallel manaka.torch training (run under torchrun)")
    p.add_argument("records", help="an HCPE file (or .psv with --psv)")
    p.add_argument("--psv", action="store_true")
    p.add_argument("--batch-size", type=int, default=1024, help="positions per rank per step")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", default="gloo")
    p.add_argument("--timeout", type=float, default=120, help="seconds a collective may wait for a dead rank")
    p.add_argument("--out", default="ddp_model.mk")
    args = p.parse_args()

    dist.init_process_group(args.backend, timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if args.backend == "nccl" else None
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
