"""One process: the seed training step with several pair-table updates, timed interleaved
on the CPU (process CPU time, which other processes on shared cores inflate far less than
wall time), cycling through distinct batches so the sparse modes pay their catch-up; then a
few profiled steps per variant for the C trainer's phases (wall). Prints one line per
variant: median CPU (and wall) ms per step, and the phases' ms per step. Used for A/Bs of pair-table
kernels across trees (run it from each tree, alternating):

    PYTHONPATH=TREE python tools/pair_update_cpu_time.py THREADS RUNS VARIANTS [RECORDS]

VARIANTS: comma-separated mode:dtype, e.g. dense:float32,dense:bf16,sparse:float32.
RECORDS: shogi records for real positions (default: the uniform seed batch)."""
import os
import statistics
import sys
import time

import manaka as mk
from manaka.bench.step import SEED, seed_batch

threads, runs = int(sys.argv[1]), int(sys.argv[2])
variants = [v.split(":") for v in sys.argv[3].split(",")]
mk.set_num_threads(threads)
cfg = mk.ModelConfig(**SEED)
if len(sys.argv) > 4:
    from manaka.bench.pair_update import record_batches
    batches = record_batches(sys.argv[4], 1024, 8)
else:
    batches = [seed_batch(cfg, 1024, 600, seed=s) for s in range(8)]
trainers = [mk.Trainer(mk.Model(cfg, seed=0), lr=1e-3, pair_update=m, pair_state_dtype=d)
            for m, d in variants]
cpu = [[] for _ in variants]
wall = [[] for _ in variants]
for r in range(2 + runs):
    batch = batches[r % len(batches)]
    for k in list(range(r % len(variants), len(variants))) + list(range(r % len(variants))):
        c0, w0 = time.process_time(), time.perf_counter()
        trainers[k].step(batch).loss
        if r >= 2:
            cpu[k].append((time.process_time() - c0) * 1e3)
            wall[k].append((time.perf_counter() - w0) * 1e3)
for k, (m, d) in enumerate(variants):
    t = trainers[k]
    t.profile(True)
    for r in range(4):
        t.step(batches[(runs + 2 + r) % len(batches)]).loss
    ph = t.phase_times()
    n = ph.get("steps", 4) or 4
    phases = " ".join(f"{name} {1e3 * v / n:.1f}" for name, v in ph.items() if name != "steps")
    t.profile(False)
    print(f"{m}:{d} cpu {statistics.median(cpu[k]):.1f} wall {statistics.median(wall[k]):.1f} | {phases} | load {os.getloadavg()[0]:.2f}")
