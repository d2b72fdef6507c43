"""``python -m manaka.bench gemm``: the CPU GEMMs of one training step at the seed shapes.

Each GEMM the model runs forward and backward (csrc/core/model.c: out = x W^T; dW = dout^T x;
dx = dout W, per block of a layer's input) is timed through the test hook
``manaka._testing.backend_gemm`` on the CPU backend, with the thread count of ``--threads``.
The hook copies its operands and result (a memcpy each way), so the times include that overhead;
it is the same for any GEMM implementation, which is what the suite is for: comparing
builds of csrc/cpu/gemm.c (e.g. its fixed tiles against per-thread splits).
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import List, Tuple

import numpy as np

import manaka as mk
from manaka import _core
from manaka.bench import testing_hooks
from manaka.bench.seed import SeedShapes
from manaka.bench.timing import HEADER, measure, write_results, use_threads


def step_gemms(cfg, B: int) -> List[Tuple[str, int, int, int, bool, bool]]:
    """(name, M, N, K, trans_a, trans_b) of every GEMM of one step: each trunk layer, then
    the policy head (head_width outputs) and the value head (1 output) on the last hidden
    layer. The first layer's input is 2 sides of [power sums (orders x embed_dim), pair
    sums (pair_dim)] blocks, one GEMM per block."""
    first = [cfg["orders"] * cfg["embed_dim"], cfg["pair_dim"]] * 2
    hidden = list(cfg["hidden"])
    layers = [(f"L{i}", [first] if i == 0 else [[hidden[i - 1]]], h) for i, h in enumerate(hidden)]
    layers = [(name, blocks[0], n) for name, blocks, n in layers]
    last = [hidden[-1]] if hidden else first
    layers += [("policy", last, cfg["head_width"]), ("value", last, 1)]
    out = []
    for name, blocks, N in layers:
        for cols in sorted(set(blocks)):
            n = blocks.count(cols)
            tag = f"{name} in={cols}" + (f" (x{n})" if n > 1 else "")
            out.append((f"fwd {tag}", B, N, cols, False, True))
            out.append((f"dW  {tag}", N, cols, B, True, False))
            out.append((f"dx  {tag}", B, cols, N, False, False))
    return out


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m manaka.bench gemm", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=1024, help="B (default 1024)")
    ap.add_argument("--runs", type=int, default=10, help="timed calls per GEMM (median of N)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0, help="threads (0: default)")
    ap.add_argument("--tag", default="cpu", help="results file tag: <out>/gemm-<tag>.*")
    ap.add_argument("--out", default=None, help="results folder (default ./bench_results)")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args(argv)
    hooks = testing_hooks("python -m manaka.bench gemm")
    use_threads("gemm", args.threads)
    cfg = SeedShapes().model_config()
    rng = np.random.default_rng(0)
    lines = [f"CPU GEMMs of one step at the seed shapes, B = {args.batch}, "
             f"threads = {_core.build_info()['num_threads']}", HEADER]
    timings, total, total_cpu = [], 0.0, 0.0
    for name, M, N, K, ta, tb in step_gemms(cfg, args.batch):
        a = rng.standard_normal((K, M) if ta else (M, K)).astype(np.float32)
        b = rng.standard_normal((N, K) if tb else (K, N)).astype(np.float32)
        t = measure(f"{name} {M}x{N}x{K}", lambda: hooks.backend_gemm("cpu", a, b, trans_a=ta,
                                                                       trans_b=tb),
                    runs=args.runs, warmup=args.warmup)
        n = int(name.split("(x")[1][0]) if "(x" in name else 1
        total += n * t.median_ms
        cpu = []  # CPU time of the process: less sensitive than wall time to other load
        for _ in range(args.runs):
            start = time.process_time()
            hooks.backend_gemm("cpu", a, b, trans_a=ta, trans_b=tb)
            cpu.append((time.process_time() - start) * 1e3)
        t.extra["cpu_ms"] = f"{statistics.median(cpu):.3f}"
        total_cpu += n * statistics.median(cpu)
        timings.append(t)
        lines.append(t.row())
    lines.append(f"{'total cpu (one step, blocks counted)':<44} {total_cpu:10.3f}")
    lines.append(f"{'total (one step, blocks counted)':<44} {total:10.3f}")
    print("\n".join(lines))
    if not args.no_write:
        print("wrote", write_results("gemm", args.tag, {"timings": timings, "total_ms": total,
                                                          "total_cpu_ms": total_cpu},
                                     lines, args.out))
    return 0
