"""``python -m manaka.bench pipeline``: positions/s the C batch producers deliver, and the
share of a training step spent waiting for data.

1. Delivery: a synthetic dataset at the seed shapes (T = 40, V = 2344, M = 2187, legal
   counts ~ lognormal(ln 90, 0.6)) is saved and memory-mapped back (as training reads it),
   then iterated by a consumer that does nothing else, with 1, 2, 4 and 8 producers. One
   run = one epoch; the time is the median over runs after a warm-up epoch. The consumer's
   wrapping of each batch into mk.Batch is included (it is part of what a trainer waits for).
   Goal: one producer >= 500,000 positions/s.
2. Data wait: mk.fit on the seed configuration on the CPU, reporting the share of wall time
   the loop waited for batches (goal: below 1%). Skipped, and said so, when mk.Model is
   not available in this build.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

import manaka as mk

from .seed import SeedShapes
from .timing import HEADER, measure, write_results


def delivery(ds, producers: int, batch_size: int, runs: int):
    loader = mk.Loader(ds, batch_size=batch_size, producers=producers, prefetch=8, seed=0)

    def one_epoch():
        n = 0
        for batch in loader:
            n += len(batch)
        assert n == len(ds), f"an epoch delivered {n} of {len(ds)} positions"  # a short run is an error

    t = measure(f"{producers} producer{'s' if producers > 1 else ''}, batch {batch_size}", one_epoch,
                runs=runs, warmup=1)
    loader.close()
    t.extra["positions_per_s"] = round(len(ds) / (t.median_ms / 1e3))
    t.extra["consumer_wait_s"] = round(loader.stats["wait_seconds"], 3)
    return t


def data_wait(ds, batch_size: int, steps: int, producers: int):
    """mk.fit at the seed configuration on the CPU: mean wait share over logged intervals."""
    if not hasattr(mk, "Model"):
        return None
    s = SeedShapes()
    cfg = mk.ModelConfig(num_tokens=s.V, num_moves=s.M, tokens_per_side=s.T, embed_dim=s.D, orders=s.K,
                         pair_dim=s.P, hidden=(512, 512), head_width=s.W)
    model = mk.Model(cfg, device="cpu", seed=0)
    loader = mk.Loader(ds, batch_size=batch_size, producers=producers, prefetch=8, seed=0)
    log_every = max(1, steps // 4)
    history = mk.fit(model, loader, steps=steps + log_every, log_every=log_every, progress=False,
                     log=lambda line: print("   ", line, flush=True))
    later = history.records[1:]  # the first interval includes start-up and the first fill
    wait = sum(r["wait_share"] for r in later) / len(later)
    rate = sum(r["positions_per_s"] for r in later) / len(later)
    return {"steps": steps, "batch_size": batch_size, "producers": producers, "wait_share": wait,
            "positions_per_s": rate, "step_ms": 1e3 * batch_size / rate}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m manaka.bench pipeline", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--positions", type=int, default=200_000, help="dataset size (default 200000)")
    parser.add_argument("--batch-size", type=int, default=SeedShapes.B, help="batch size (default 1024)")
    parser.add_argument("--producers", default="1,2,4,8", help="producer counts to measure (default 1,2,4,8)")
    parser.add_argument("--runs", type=int, default=5, help="timed epochs per producer count (default 5)")
    parser.add_argument("--train-steps", type=int, default=20,
                        help="seed-configuration training steps for the data-wait measurement (0 skips it)")
    parser.add_argument("--out", default=None, help="results folder (default bench/results)")
    args = parser.parse_args(argv)
    counts = [int(p) for p in args.producers.split(",")]

    print(f"manaka.bench pipeline: {args.positions} synthetic positions at the seed shapes\n{mk.build_info()}",
          flush=True)
    lines, results = [HEADER], []
    with tempfile.TemporaryDirectory() as tmp:
        mk.Dataset.synthetic(args.positions, None, seed=0).save(os.path.join(tmp, "data"))
        ds = mk.Dataset.open(os.path.join(tmp, "data"))  # memory-mapped, as in training
        print(ds, flush=True)
        for p in counts:
            t = delivery(ds, p, args.batch_size, args.runs)
            results.append(t)
            lines.append(t.row())
            print(lines[-1], flush=True)
        wait = None
        if args.train_steps > 0:
            wait = data_wait(ds, args.batch_size, args.train_steps, producers=4)
            if wait is None:
                lines.append("data wait during training: SKIPPED (mk.Model is not in this build)")
            else:
                lines.append(f"data wait during a seed-configuration CPU run: {100 * wait['wait_share']:.2f}% of wall "
                             f"time ({wait['step_ms']:.0f} ms/step, {wait['positions_per_s']:.0f} pos/s, "
                             f"{wait['producers']} producers)")
            print(lines[-1], flush=True)
    path = write_results("pipeline", "cpu", {
        "positions": args.positions, "batch_size": args.batch_size, "dataset": repr(ds),
        "delivery": results, "training_data_wait": wait}, lines, args.out)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
