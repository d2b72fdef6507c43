"""Data-parallel manaka.torch on gloo (CPU): bytes exchanged per step and step time, 1 vs
W processes, at the seed shapes (the shogi vocabulary, ModelConfig's default widths).

    python bench/ddp_cpu.py --data /work/data/fsf5000-s11.hcpe --world 2 --steps 4

Reads only whole games (the counts of the `.games` file beside the records, as the
self-play generator appends them), copied to a temporary file. Each process trains
B positions per step from mk.Loader(rank=, world_size=); the pair table sparse (rows
all-gathered, manaka.torch.distributed) or dense (through DDP). Bytes: payload bytes of
one rank's collectives per step (all-gathers: what each rank sends, its count + padded row
ids + padded rows, and receives W - 1 times as much; DDP: the dense gradient bytes it all-reduces, which a ring all-reduce
sends ~2 (W-1)/W times)."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import manaka as mk
import manaka.torch as mkt
from manaka import shogi
from manaka.torch import distributed as mktd

from hcpe_games import whole_games  # noqa: E402  (this folder, on sys.path as the script's)


def worker(rank, world, args, records, rendezvous, results):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=600))
    data = shogi.open_hcpe(records)
    cfg = mk.ModelConfig(num_tokens=data.num_tokens, num_moves=data.num_moves)
    sparse = args.mode == "sparse"
    net = mkt.Network(cfg, seed=0, sparse_pair_grad=sparse)
    model = mktd.data_parallel(net, check=False)
    opts = ([torch.optim.SparseAdam([net.pair_table], lr=1e-3), torch.optim.AdamW(mktd.dense_parameters(net), lr=1e-3)]
            if sparse else [torch.optim.AdamW(mkt.param_groups(net), lr=1e-3)])
    loader = mk.Loader(data, batch_size=args.batch, producers=1, seed=1, drop_last=True, rank=rank, world_size=world)
    times, rows, sent = [], [], []
    it = iter(loader)
    for k in range(args.warmup + args.steps):
        tensors = mkt.batch_tensors(next(it))
        dist.barrier()
        start = time.perf_counter()
        loss = model(**tensors)
        for o in opts:
            o.zero_grad(set_to_none=True)
        loss.backward()
        stats = {}
        if sparse:
            mktd.all_reduce_pair_grad(net, stats=stats)
        for o in opts:
            o.step()
        if k >= args.warmup:
            times.append(time.perf_counter() - start)
            rows.append(stats.get("rows", cfg.num_pairs))
            sent.append(stats.get("bytes_sent", 0))
    dense_bytes = sum(p.numel() * 4 for p in (mktd.dense_parameters(net) if sparse else net.parameters()))
    loader.close()
    results[rank] = dict(times=times, rows=rows, pair_bytes=sent, ddp_bytes=dense_bytes, num_pairs=cfg.num_pairs)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--mode", choices=["sparse", "dense"], default="sparse")
    args = p.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    tmp = tempfile.mkdtemp()
    try:
        records = os.path.join(tmp, "games.hcpe")
        n = whole_games(args.data, records)
        out = {}
        for world in (1, args.world):
            manager = mp.Manager()
            results = manager.dict()
            rendezvous = os.path.join(tmp, f"rdv{world}")
            mp.spawn(worker, args=(world, args, records, rendezvous, results), nprocs=world)
            out[world] = dict(results)
        print(json.dumps({"positions": n, "args": vars(args), "load": os.getloadavg(), "results": out}))
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    sys.exit(main())
