"""Data-parallel mk.Trainer (Trainer(process_group=...)) on gloo (CPU): bytes exchanged per
rank per step and step time, 1 vs W processes, at the seed shapes (the shogi vocabulary,
ModelConfig's default widths), B positions per rank per step.

    python bench/ddp_trainer_cpu.py --data /work/data/s21.hcpe --world 2 --steps 4 --pair-update dense

Reads only whole games (the `.games` file beside the records), copied to a temporary
file. --world 1 runs the plain Trainer (no process group) as the baseline. Bytes: what one
rank sends per step (Trainer.last_exchange: the stats message, the dense gradients'
all-reduce at 2 (W-1)/W of its 11 MB payload, the padded pair rows' all-gather; each rank
receives the other W - 1 ranks' rows) beside what a dense exchange of the whole gradient
would send (the DDP way: 2 (W-1)/W x all parameters), whose one all-reduce is also timed
here. One OpenMP and one torch thread per process. Prints one JSON line per rank."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time

import numpy as np

import manaka as mk
from manaka import shogi

from hcpe_games import whole_games  # noqa: E402  (this folder, on sys.path as the script's)


def worker(rank, world, args, records, rendezvous):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    mk.set_num_threads(1)
    group = None
    if world > 1:
        dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=900))
        group = dist.group.WORLD
    data = shogi.open_hcpe(records)
    cfg = mk.ModelConfig(num_tokens=data.num_tokens, num_moves=data.num_moves)
    model = mk.Model(cfg, seed=0)
    trainer = mk.Trainer(model, lr=1e-3, pair_update=args.pair_update, process_group=group)
    loader = mk.Loader(data, batch_size=args.batch, seed=0, producers=1, drop_last=True, rank=rank, world_size=world)
    times, exchanges = [], []
    batches = iter(loader)
    for k in range(args.steps + 1):  # the first step sizes the arenas: not timed
        batch = next(batches)
        t = time.perf_counter()
        trainer.step(batch).loss
        if k:
            times.append(time.perf_counter() - t)
            exchanges.append(trainer.last_exchange)
    dense_allreduce_s = None
    if world > 1:  # the dense alternative: one all-reduce of every parameter's gradient
        full = torch.zeros(model.num_parameters(), dtype=torch.float32)
        dist.barrier()
        t = time.perf_counter()
        dist.all_reduce(full)
        dense_allreduce_s = time.perf_counter() - t
    loader.close()
    n_params = model.num_parameters()
    out = {"rank": rank, "world": world, "pair_update": args.pair_update, "batch": args.batch,
           "parameters": n_params, "pair_rows": int(model.shapes["pair_table"][0]),
           "step_s": times, "median_step_s": float(np.median(times)),
           "positions_per_s": world * args.batch / float(np.median(times)),
           "exchanges": exchanges,
           "dense_exchange_bytes": 4 * n_params * 2 * (world - 1) // world if world > 1 else 0,
           "dense_allreduce_s": dense_allreduce_s}
    print(json.dumps(out), flush=True)
    if world > 1:
        dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)  # see manaka/train.py (_rank): the interpreter's teardown after gloo can abort


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="an HCPE file with its .games file beside it")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--batch", type=int, default=1024, help="positions per rank per step")
    p.add_argument("--pair-update", choices=["dense", "sparse", "lazy"], default="dense")
    args = p.parse_args()
    import multiprocessing

    with tempfile.TemporaryDirectory() as tmp:
        records = os.path.join(tmp, "games.hcpe")
        n = whole_games(args.data, records)
        print(f"# {n} positions (whole games) of {args.data}", flush=True)
        ctx = multiprocessing.get_context("spawn")
        procs = [ctx.Process(target=worker, args=(r, args.world, args, records, os.path.join(tmp, "rv")))
                 for r in range(args.world)]
        for q in procs:
            q.start()
        for q in procs:
            q.join()
        if any(q.exitcode for q in procs):
            raise SystemExit(f"a worker failed: {[q.exitcode for q in procs]}")


if __name__ == "__main__":
    main()
