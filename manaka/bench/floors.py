"""What each op must at least cost at the seed shapes, and the machine rates that turn it
into a time: the floor column of ``python -m manaka.bench ops`` (CPU, here) and of its
``--device cuda`` suite (manaka.bench.ops_cuda, with the GPU's own rates).

floor = max(bytes / copy rate, FLOPs / FP32 GEMM rate): an op moves at least its bytes
(every input read once, every output written once) and does at least its FLOPs, and at
best overlaps the two. On the CPU the copy rate is one NumPy copy of a large float32 array
(bytes read plus bytes written, one core) and the GEMM rate is NumPy's float32 matmul with
as many BLAS threads as manaka uses, measured in a child process so that the count holds;
each rate is the best of several runs (what the machine can do: on a shared machine the
other runs measure the load), timed in process CPU time where one thread does the work (the
copy; the GEMM at one thread), which leaves out the time other processes held the core."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Dict

import numpy as np

from .seed import SeedShapes


def floors(x: dict, s: SeedShapes) -> Dict[str, Dict[str, float]]:
    """Bytes each op must move to or from memory (device memory on the GPU) and FLOPs it
    must do, for these inputs: every input read once, every output written once, table rows
    counted once however often they are gathered (they stay in L2), and only the rows
    actually used."""
    f = 4  # bytes per float32 / int32
    n_legal = int(x["counts"].sum())
    tok = x["tokens"]
    n_tok = int((tok >= 0).sum())
    moves_used = len(np.unique(x["indices"][x["indices"] >= 0]))
    vocab_used = len(np.unique(tok[tok >= 0]))
    i, j = np.triu_indices(s.T, k=1)
    a, b = tok[..., i], tok[..., j]
    valid = (a >= 0) & (b >= 0)
    n_pairs = int(valid.sum())
    lo, hi = np.minimum(a, b).astype(np.int64), np.maximum(a, b).astype(np.int64)
    pairs_used = len(np.unique((hi * (hi + 1) // 2 + lo)[valid]))
    BL, rows = s.B * s.L, s.B * s.S
    return {
        "gather_dot forward": {"bytes": f * (s.B * s.W + moves_used * s.W + n_legal + s.B + BL),
                               "flops": 2 * n_legal * s.W},
        "gather_dot backward": {"bytes": f * (BL + 2 * s.B * s.W + 2 * s.M * s.W + n_legal + s.B),
                                "flops": 4 * n_legal * s.W},
        "power_sums forward": {"bytes": f * (tok.size + vocab_used * s.D + rows * s.K * s.D),
                               "flops": 2 * s.K * s.D * n_tok},
        "power_sums backward": {"bytes": f * (rows * s.K * s.D + tok.size + 2 * s.V * s.D),
                                "flops": 3 * s.K * s.D * n_tok},
        "pair_sums forward": {"bytes": f * (tok.size + pairs_used * s.P + rows * s.P),
                              "flops": n_pairs * s.P},
        "pair_sums backward": {"bytes": f * (rows * s.P + tok.size + s.num_pairs * s.P),
                               "flops": n_pairs * s.P},
    }


def floor_ms(need: Dict[str, float], copy_gbs: float, gemm_gflops: float) -> float:
    """The floor of one op (an entry of `floors`) in milliseconds."""
    return max(need["bytes"] / (copy_gbs * 1e9), need["flops"] / (gemm_gflops * 1e9)) * 1e3


def cpu_copy_gbs(mib: int = 256, runs: int = 7) -> float:
    """One core's copy rate in GB/s (bytes read plus bytes written), the best of `runs`."""
    src = np.ones((mib << 20) // 4, np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    times = []
    for _ in range(runs):
        start = time.process_time()
        np.copyto(dst, src)
        times.append(time.process_time() - start)
    return 2 * src.nbytes / min(times) / 1e9


_GEMM_PROBE = """
import sys, time
import numpy as np
n, clock = int(sys.argv[1]), time.process_time if sys.argv[2] == "1" else time.perf_counter
a, b = np.ones((n, n), np.float32), np.ones((n, n), np.float32)
a @ b
times = []
for _ in range(7):
    start = clock()
    a @ b
    times.append(clock() - start)
print(2 * n ** 3 / min(times) / 1e9)
"""


def cpu_gemm_gflops(threads: int, n: int = 1024) -> float:
    """NumPy's float32 n x n matmul rate in GFLOP/s with `threads` BLAS threads (a child
    process: the BLAS reads its thread count when it loads)."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, "-c", _GEMM_PROBE, str(n), str(threads)], capture_output=True,
                         text=True, env=env, timeout=300, check=True)
    return float(out.stdout.strip())
