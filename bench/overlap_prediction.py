"""Would overlapping the pair-table update with layer 0's weight-gradient GEMM pay on 2 cores?

The idea: on a 2-core machine, run the bandwidth-bound pair-table update on one core while
the compute-bound dW0 GEMM (trunk.0.weight's gradient, which the pair update does not need)
runs on the other, instead of one after the other with both cores on each. This measures the
four times that decide it, in one process, and prints the best-case gain:

  G1, G2  dW0 = dY0^T x0 at the seed shapes ([512, 1024] x [1024, 2080]) by manaka's CPU
          gemm (manaka._testing.backend_gemm, copies of ~11 MB included) on 1 and 2 threads;
  U1, U2  the step's pair-table phase (optimizer_pair_table of Trainer.phase_times: the
          pair gradient's bucket sums and the update) on 1 and 2 threads, real batches.

Today (one after the other): G2 + U2. Overlapped, at best (no interference between the two,
the first to finish joins the other at the 2-thread rate):
  G1 <= U1:  G1 + (1 - G1 / U1) U2        U1 < G1:  U1 + (1 - U1 / G1) G2

    python bench/overlap_prediction.py --records /work/exp/t-now.hcpe [--runs 12]
"""
import argparse
import statistics
import time

import numpy as np

import manaka as mk
import manaka._testing as testing
from manaka.bench.pair_update import record_batches
from manaka.bench.step import SEED


def gemm_ms(runs: int) -> float:
    r = np.random.default_rng(0)
    dy = r.standard_normal((1024, 512), dtype=np.float32)
    x0 = r.standard_normal((1024, 2080), dtype=np.float32)
    testing.backend_gemm("cpu", dy, x0, trans_a=True)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        testing.backend_gemm("cpu", dy, x0, trans_a=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def pair_phase_ms(mode: str, batches, runs: int) -> float:
    trainer = mk.Trainer(mk.Model(mk.ModelConfig(**SEED), seed=0), lr=1e-3, pair_update=mode)
    for b in batches[:2]:
        trainer.step(b).loss
    trainer.profile(True)
    for r in range(runs):
        trainer.step(batches[r % len(batches)]).loss
    ph = trainer.phase_times()
    return 1e3 * ph["optimizer_pair_table"] / (ph.get("steps") or runs)


def overlapped(g1: float, g2: float, u1: float, u2: float) -> float:
    if g1 <= u1:
        return g1 + (1 - g1 / u1) * u2
    return u1 + (1 - u1 / g1) * g2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", required=True, help="shogi records for real batches")
    ap.add_argument("--runs", type=int, default=12)
    args = ap.parse_args()
    batches = record_batches(args.records, 1024, 8)
    t = {}
    for threads in (1, 2):
        mk.set_num_threads(threads)
        t["G", threads] = gemm_ms(args.runs)
        for mode in ("dense", "sparse"):
            t[mode, threads] = pair_phase_ms(mode, batches, args.runs)
    print(f"dW0 GEMM: G1 {t['G', 1]:.1f} ms, G2 {t['G', 2]:.1f} ms")
    for mode in ("dense", "sparse"):
        u1, u2 = t[mode, 1], t[mode, 2]
        now, best = t["G", 2] + u2, overlapped(t["G", 1], t["G", 2], u1, u2)
        print(f"{mode}: pair phase U1 {u1:.1f} ms, U2 {u2:.1f} ms | one after the other {now:.1f} ms, "
              f"overlapped at best {best:.1f} ms: saves {now - best:.1f} ms a step")


if __name__ == "__main__":
    main()
