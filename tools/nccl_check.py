"""The data-parallel native trainer on NCCL (tools/gpu_check.sh's nccl-ddp row): two
processes, one GPU each, Trainer(model on cuda, process_group=NCCL group); the dense
gradients and the pair rows go to torch as CUDA tensors through __cuda_array_interface__
(zero-copy) and back by pointer. After a few steps both ranks must hold the same bits,
within the tolerance of reordered float sums of one process on the concatenated batches
(dense and sparse pair updates).

    python tools/nccl_check.py --out DIR [--dry-run]

With one GPU, the same path with a group of one process (the CUDA buffers, the exchange on
CUDA tensors, apply by pointer; no second rank), against the plain step on that GPU. With
none it says so and exits 0 (skipped). Writes DIR/nccl-ddp.json."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "helpers"))

STEPS, B, LR = 3, 64, 0.02


def _config():
    import manaka as mk

    return mk.ModelConfig(num_tokens=300, num_moves=400, tokens_per_side=16, embed_dim=16, orders=3, pair_dim=8,
                          hidden=(64,), head_width=32)


def _batch(step: int, world: int):
    import model_cases as cases

    return cases.batch(_config(), B=world * B, L=24, seed=100 + step, empty_fraction=0.2)


def _rank(rank: int, world: int, rendezvous: str, out: str, update: str) -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = str(rank)
    import numpy as np
    import torch.distributed as dist

    import manaka as mk
    import trainer_ddp_workers as workers

    dist.init_process_group("nccl", init_method=f"file://{rendezvous}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    model = mk.Model(_config(), seed=3, device="cuda")
    trainer = mk.Trainer(model, lr=LR, pair_update=update, process_group=dist.group.WORLD)
    losses = []
    for k in range(STEPS):
        batch = _batch(k, world)
        losses.append(trainer.step(workers.shard_rows(batch, rank, B)).loss)
    np.savez(os.path.join(out, f"{update}-{rank}.npz"), losses=np.array(losses), **model.state_dict())
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--dry-run", action="store_true", help="parse the arguments and exit")
    args = p.parse_args()
    if args.dry_run:
        return 0
    os.makedirs(args.out, exist_ok=True)
    report = {"check": "nccl-ddp"}
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        report["status"] = "skipped: no PyTorch"
    else:
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpus < 1 or not dist.is_nccl_available():
            report["status"] = f"skipped: the NCCL data-parallel check needs a GPU and NCCL; this machine has {gpus} GPU(s)"
        elif gpus < 2:
            report["note"] = "one GPU: a group of one process (two ranks need two GPUs)"
            print(report["note"], flush=True)
    if "status" in report:
        print(report["status"])
        json.dump(report, open(os.path.join(args.out, "nccl-ddp.json"), "w"), indent=1)
        return 0
    import multiprocessing

    import numpy as np

    import manaka as mk

    ctx = multiprocessing.get_context("spawn")
    world = min(gpus, 2)
    report["world"] = world
    ok = True
    for update in ("dense", "sparse"):
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            procs = [ctx.Process(target=_rank, args=(r, world, os.path.join(tmp, "rv"), tmp, update))
                     for r in range(world)]
            for q in procs:
                q.start()
            for q in procs:
                q.join(240)
            codes = [q.exitcode for q in procs]
            entry = {"exit_codes": codes, "seconds": time.perf_counter() - t}
            if codes == [0] * world:
                ranks = [dict(np.load(os.path.join(tmp, f"{update}-{r}.npz"))) for r in range(world)]
                entry["ranks_bitwise_equal"] = all(np.array_equal(ranks[0][n], ranks[-1][n]) for n in ranks[0])
                model = mk.Model(_config(), seed=3, device="cuda")
                trainer = mk.Trainer(model, lr=LR, pair_update=update)
                for k in range(STEPS):
                    trainer.step(_batch(k, world))
                want = model.state_dict()
                entry["max_abs_diff_to_one_process"] = max(float(np.abs(ranks[0][n] - w).max()) for n, w in want.items())
                entry["bitwise_equal_to_one_process"] = all(np.array_equal(ranks[0][n], w) for n, w in want.items())
                entry["ok"] = entry["ranks_bitwise_equal"] and entry["max_abs_diff_to_one_process"] < 1e-5
            else:
                entry["ok"] = False
            ok = ok and entry["ok"]
            report[update] = entry
            print(update, entry, flush=True)
    report["status"] = "passed" if ok else "FAILED"
    json.dump(report, open(os.path.join(args.out, "nccl-ddp.json"), "w"), indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
