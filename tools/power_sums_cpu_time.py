"""One process: PowerSums forward and backward at the seed shapes (manaka.bench.seed) on
the CPU, each timed in RUNS calls after three warm-up calls, in three alternating blocks;
prints the median process CPU ms of each (CPU time is less sensitive than wall time to
other processes on shared cores) and the load average. With --floor it prints instead the
ops' floors (manaka.bench.floors, of the tree on PYTHONPATH). Used by
tools/power_sums_ab.sh; run from a built tree:

    PYTHONPATH=TREE python tools/power_sums_cpu_time.py THREADS RUNS [--floor]"""
import os
import statistics
import sys
import time

import manaka as mk
from manaka.bench.seed import SeedShapes, op_inputs

threads, runs = int(sys.argv[1]), int(sys.argv[2])
mk.set_num_threads(threads)
s = SeedShapes()
x = op_inputs(s)
ops = {"forward": lambda: mk.ops.power_sums(x["emb"], x["tokens"], s.K),
       "backward": lambda: mk.ops.power_sums_backward(x["grad_power"], x["emb"], x["tokens"])}
if "--floor" in sys.argv:
    from manaka.bench.floors import cpu_rates, floor_ms, floors
    rates = cpu_rates(mk.get_num_threads())
    need, gbs, gflops = floors(x, s), rates["copy_gbs"], rates["gemm_gflops"]
    print(f"copy {gbs:.1f} GB/s gemm {gflops:.1f} GFLOP/s floor_ms " + " ".join(
        f"{name} {floor_ms(need[f'power_sums {name}'], gbs, gflops):.3f}" for name in ops)
        + f" load {os.getloadavg()[0]:.2f}")
    sys.exit(0)
cpu = {name: [] for name in ops}
for block in range(3):
    for name in (list(ops) if block % 2 == 0 else list(ops)[::-1]):
        for _ in range(3):
            ops[name]()
        for _ in range(runs):
            c0 = time.process_time()
            ops[name]()
            cpu[name].append((time.process_time() - c0) * 1e3)
print("cpu_ms " + " ".join(f"{name} {statistics.median(t):.3f}" for name, t in cpu.items())
      + f" load {os.getloadavg()[0]:.2f}")
