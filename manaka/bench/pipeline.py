"""``python -m manaka.bench pipeline``: positions/s the C batch producers deliver, and the
share of a training step spent waiting for data.

1. Delivery: a synthetic dataset at the seed shapes (T = 40, V = 2344, M = 2187, legal
   counts ~ lognormal(ln 90, 0.6)) is saved and memory-mapped back (as training reads it),
   then iterated by a consumer that does nothing else, with 1, 2, 4 and 8 producers. One
   run = one epoch; the time is the median over runs after a warm-up epoch. The consumer's
   wrapping of each batch into mk.Batch is included (it is part of what a trainer waits for).
   Goal: one producer >= 500,000 positions/s.
2. Data wait: mk.fit on the CPU at the seed configuration (and at the much faster small
   preset of ``python -m manaka.train``), reporting the share of wall time the loop spent in
   next() (goal: below 1%) and, within it, blocked on the producers. Skipped, and said so,
   when mk.Model is not available in this build.
3. ``--hcpe``: the same two measurements on dlshogi HCPE records (38 bytes per position),
   which the producers decode, generate the legal moves of and encode themselves
   (csrc/shogi/). ``--hcpe FILES`` reads your files (a glob or folder); ``--hcpe`` alone
   writes ``--hcpe-distinct`` positions from random cshogi games (cshogi needed), repeated
   to ``--positions`` records. Goal: one producer >= 1,000,000 positions/s.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import manaka as mk

from .seed import SeedShapes
from .timing import HEADER, measure, write_results, OUT_HELP

SEED_DIMS = dict(embed_dim=256, orders=4, pair_dim=16, hidden=(512, 512), head_width=300)
SMALL_DIMS = dict(embed_dim=32, orders=4, pair_dim=4, hidden=(128,), head_width=64)


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


def data_wait(ds, batch_size: int, steps: int, producers: int, dims: dict, name: str):
    """mk.fit on the CPU: the share of wall time the loop spent blocked on the producers (C
    wait) and in next() altogether (C wait plus wrapping the batch), after a warm-up."""
    if not hasattr(mk, "Model"):
        return None
    cfg = mk.ModelConfig(num_tokens=ds.num_tokens, num_moves=ds.num_moves, tokens_per_side=ds.tokens_per_side, **dims)
    model = mk.Model(cfg, device="cpu", seed=0)
    trainer = mk.Trainer(model, lr=1e-3)
    loader = mk.Loader(ds, batch_size=batch_size, producers=producers, prefetch=8, seed=0)
    quiet = dict(trainer=trainer, progress=False, log=lambda line: None)
    mk.fit(model, loader, steps=3, log_every=3, **quiet)  # warm-up: first fill, first-touch of buffers
    before, start = loader.stats, time.perf_counter()
    history = mk.fit(model, loader, steps=steps, log_every=steps, **quiet)
    wall, after = time.perf_counter() - start, loader.stats
    blocked = (after["wait_seconds"] - before["wait_seconds"]) / wall
    in_next = (after["consumer_seconds"] - before["consumer_seconds"]) / wall
    return {"config": name, "steps": steps, "batch_size": batch_size, "producers": producers,
            "step_ms": 1e3 * wall / steps, "positions_per_s": steps * batch_size / wall,
            "blocked_on_producers_share": blocked, "wait_share": in_next,
            "loss_at_end": history.last["loss"]}


def wait_line(what: str, wait: dict) -> str:
    """The report line of one data-wait measurement (the .npy and the HCPE runs alike)."""
    return (f"data wait, {what}: {100 * wait['wait_share']:.2f}% of wall time in next() "
            f"({100 * wait['blocked_on_producers_share']:.2f}% blocked on producers); "
            f"{wait['step_ms']:.0f} ms/step, {wait['positions_per_s']:.0f} pos/s")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m manaka.bench pipeline", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--positions", type=int, default=200_000, help="dataset size (default 200000)")
    parser.add_argument("--batch-size", type=int, default=SeedShapes.B, help="batch size (default 1024)")
    parser.add_argument("--producers", default="1,2,4,8", help="producer counts to measure (default 1,2,4,8)")
    parser.add_argument("--runs", type=int, default=5, help="timed epochs per producer count (default 5)")
    parser.add_argument("--train-steps", type=int, default=20,
                        help="seed-configuration training steps for the data-wait measurement (0 skips it)")
    parser.add_argument("--hcpe", nargs="?", const="", default=None, metavar="FILES",
                        help="measure HCPE records instead (FILES: a glob or folder; alone: generated with cshogi)")
    parser.add_argument("--hcpe-distinct", type=int, default=20_000,
                        help="distinct generated positions, repeated to --positions (default 20000)")
    parser.add_argument("--out", default=None, help=OUT_HELP)
    args = parser.parse_args(argv)
    if args.hcpe is not None:
        return main_hcpe(args)
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
        waits = []
        runs = [("seed configuration", SEED_DIMS, args.batch_size, args.train_steps),
                ("small preset of python -m manaka.train", SMALL_DIMS, 512, 4 * args.train_steps)]
        for name, dims, batch_size, steps in runs if args.train_steps > 0 else []:
            wait = data_wait(ds, batch_size, steps, 4, dims, name)
            if wait is None:
                lines.append("data wait during training: SKIPPED (mk.Model is not in this build)")
                print(lines[-1], flush=True)
                break
            waits.append(wait)
            lines.append(wait_line(f"{name} on the CPU, batch {batch_size}, 4 producers", wait))
            print(lines[-1], flush=True)
    path = write_results("pipeline", "cpu", {
        "positions": args.positions, "batch_size": args.batch_size, "dataset": repr(ds),
        "delivery": results, "training_data_wait": waits}, lines, args.out)
    print(f"wrote {path}")
    return 0


def random_hcpe(path: str, distinct: int, total: int, seed: int = 0) -> None:
    """`distinct` positions of random cshogi games (uniform legal moves, games of up to 200
    plies), each with a random legal move, repeated to `total` records."""
    import numpy as np
    try:
        import cshogi
    except ImportError:
        raise SystemExit("python -m manaka.bench pipeline --hcpe: generating records needs cshogi "
                         "(pip install cshogi), or pass --hcpe FILES")
    rng = np.random.default_rng(seed)
    out = np.zeros(distinct, cshogi.HuffmanCodedPosAndEval)
    board, n = cshogi.Board(), 0
    while n < distinct:
        moves = list(board.legal_moves)
        if not moves or board.move_number > 200:
            board.reset()
            continue
        move = moves[int(rng.integers(len(moves)))]
        board.to_hcp(out["hcp"][n])
        out["bestMove16"][n] = cshogi.move16(move)
        out["eval"][n] = int(rng.integers(-2000, 2000))
        out["gameResult"][n] = int(rng.integers(0, 3))
        n += 1
        board.push(move)
    np.resize(out, total).tofile(path)


def cpu_rate(ds) -> str:
    """Positions per CPU-second of the decode + legal moves + encode work alone, on one
    thread (process time, so that a machine shared with other jobs still gives the cost
    of the work itself; wall-clock rates are the delivery rows)."""
    import numpy as np
    from .. import _core
    records = np.asarray(ds._arrays[0][:100_000])
    best = 0.0
    for _ in range(3):
        start = time.process_time()
        _core.shogi_rows(ds.format, records, 0.0)
        best = max(best, len(records) / (time.process_time() - start))
    return (f"decode + legal moves + encode, one thread: {best:,.0f} positions per CPU-second "
            f"(best of 3 over {len(records):,} records)")


def main_hcpe(args) -> int:
    counts = [int(p) for p in args.producers.split(",")]
    print(f"manaka.bench pipeline --hcpe\n{mk.build_info()}", flush=True)
    lines, results, waits = [HEADER], [], []
    with tempfile.TemporaryDirectory() as tmp:
        source = args.hcpe
        if not source:
            source = os.path.join(tmp, "games.hcpe")
            random_hcpe(source, args.hcpe_distinct, args.positions)
        ds = mk.shogi.open_hcpe(source)
        print(ds, flush=True)
        lines.append(f"{ds!r}; {ds.meta['bytes_per_position']} bytes per position on disk")
        lines.append(cpu_rate(ds))
        print(lines[-1], flush=True)
        for p in counts:
            t = delivery(ds, p, args.batch_size, args.runs)
            results.append(t)
            lines.append(t.row())
            print(lines[-1], flush=True)
        if args.train_steps > 0:
            wait = data_wait(ds, args.batch_size, args.train_steps, 2, SEED_DIMS, "seed configuration")
            if wait is not None:
                waits.append(wait)
                lines.append(wait_line(f"seed configuration on the CPU, batch {args.batch_size}, 2 producers", wait))
                print(lines[-1], flush=True)
    path = write_results("pipeline", "hcpe-cpu", {
        "positions": len(ds), "batch_size": args.batch_size, "dataset": repr(ds),
        "delivery": results, "training_data_wait": waits}, lines, args.out)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
