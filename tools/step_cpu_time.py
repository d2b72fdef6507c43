"""One process: the seed training step (B = 1024, L = 600) on the CPU, timed RUNS times
after two warm-up steps; prints the median wall ms and the median process CPU ms per step
(CPU time is less sensitive than wall time to other processes on shared cores).
Used by tools/step_ab.sh; run from a built tree:

    PYTHONPATH=TREE python tools/step_cpu_time.py THREADS RUNS [dense|sparse|lazy]"""
import os
import statistics
import sys
import time

import manaka as mk
from manaka.bench.step import SEED, seed_batch

threads, runs = int(sys.argv[1]), int(sys.argv[2])
mode = sys.argv[3] if len(sys.argv) > 3 else "dense"
mk.set_num_threads(threads)
cfg = mk.ModelConfig(**SEED)
batch = seed_batch(cfg, 1024, 600)
trainer = mk.Trainer(mk.Model(cfg, seed=0), lr=1e-3, pair_update=mode)
for _ in range(2):
    trainer.step(batch).loss
wall, cpu = [], []
for _ in range(runs):
    t0, c0 = time.perf_counter(), time.process_time()
    trainer.step(batch).loss
    wall.append((time.perf_counter() - t0) * 1e3)
    cpu.append((time.process_time() - c0) * 1e3)
print(f"wall {statistics.median(wall):.1f} cpu {statistics.median(cpu):.1f} load {os.getloadavg()[0]:.2f}")
