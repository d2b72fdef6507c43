"""``python -m manaka.bench ops``: each fused op, forward and backward, at the seed
configuration, beside its materialising NumPy version (the A/B that proved the idea).

Times are medians of N runs after warm-up, with min and max; peak memory is the largest
amount of memory one call allocated (tracemalloc, which sees NumPy's and manaka's arrays).
Every pair of results is checked to agree before any time is reported. Each fused row
also gives the op's floor on this machine and its time over it (floor_ms, over_floor:
manaka.bench.floors, max(bytes at the copy rate, FLOPs at the GEMM rate), the rates measured
in the same run by floors.cpu_rates; one core's copy rate, so run --threads 1 for a fair
ratio).
``--device cuda`` runs the GPU suite (manaka.bench.ops_cuda) instead.
"""
from __future__ import annotations

import argparse
import sys
import time
import tracemalloc

import numpy as np

import manaka as mk

from . import numpy_ops
from .floors import cpu_rates, floor_ms, floors
from .seed import SeedShapes, op_inputs
from .timing import HEADER, OUT_HELP, measure, use_threads, write_results


def peak_alloc_mb(fn) -> float:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def cases(x: dict, s: SeedShapes):
    """(name, fused, materialising) for every op at the seed shapes."""
    return [
        ("gather_dot forward",
         lambda: mk.ops.gather_dot(x["hidden"], x["table"], x["indices"], x["counts"]),
         lambda: numpy_ops.gather_dot(x["hidden"], x["table"], x["indices"], x["counts"])),
        ("gather_dot backward",
         lambda: mk.ops.gather_dot_backward(x["grad_logits"], x["hidden"], x["table"], x["indices"], x["counts"]),
         lambda: numpy_ops.gather_dot_backward(x["grad_logits"], x["hidden"], x["table"], x["indices"], x["counts"])),
        ("power_sums forward",
         lambda: mk.ops.power_sums(x["emb"], x["tokens"], s.K),
         lambda: numpy_ops.power_sums(x["emb"], x["tokens"], s.K)),
        ("power_sums backward",
         lambda: mk.ops.power_sums_backward(x["grad_power"], x["emb"], x["tokens"]),
         lambda: numpy_ops.power_sums_backward(x["grad_power"], x["emb"], x["tokens"])),
        ("pair_sums forward",
         lambda: mk.ops.pair_sums(x["pair_table"], x["tokens"]),
         lambda: numpy_ops.pair_sums(x["pair_table"], x["tokens"])),
        ("pair_sums backward",
         lambda: mk.ops.pair_sums_backward(x["grad_pair"], x["tokens"], s.num_pairs),
         lambda: numpy_ops.pair_sums_backward(x["grad_pair"], x["tokens"], s.num_pairs)),
    ]


def agree(a, b) -> float:
    """Largest norm-wise relative difference between two results (tuples compared pairwise)."""
    pairs = zip(a, b) if isinstance(a, tuple) else [(a, b)]
    return max(float(np.linalg.norm(np.float64(p) - q) / max(np.linalg.norm(np.float64(q)), 1e-30))
               for p, q in pairs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m manaka.bench ops", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--runs", type=int, default=None, help="timed runs of each fused op (default 10)")
    parser.add_argument("--baseline-runs", type=int, default=3, help="timed runs of each NumPy version (default 3)")
    parser.add_argument("--batch", type=int, default=SeedShapes.B, help="batch size (default: the seed's 1024)")
    parser.add_argument("--threads", type=int, default=0, help="manaka's threads, and the GEMM rate's (0: default)")
    parser.add_argument("--copy-mib", type=int, default=256, help="size of the copy-rate probe in MiB (default 256)")
    parser.add_argument("--out", default=None, help=OUT_HELP)
    args, rest = parser.parse_known_args(argv)
    args.runs_given = args.runs is not None
    args.runs = args.runs or 10
    if args.device == "cuda":
        from . import ops_cuda
        forwarded = ["--batch", str(args.batch)] + (["--out", args.out] if args.out else [])
        if args.runs_given:
            forwarded += ["--runs", str(args.runs)]
        return ops_cuda.main(rest + forwarded)

    use_threads("ops", args.threads)
    shapes = SeedShapes(B=args.batch)
    print(f"manaka.bench ops (cpu): {shapes}, threads {mk.get_num_threads()}\n{mk.build_info()}", flush=True)
    x = op_inputs(shapes)
    need = floors(x, shapes)
    probe = cpu_rates(mk.get_num_threads(), copy_mib=args.copy_mib)
    copy_gbs, gemm_gflops = probe["copy_gbs"], probe["gemm_gflops"]
    rates = (f"copy {copy_gbs:.1f} GB/s (read + write, one core); float32 GEMM {gemm_gflops:.1f} GFLOP/s"
             f" (NumPy, threads {mk.get_num_threads()}); each the best of 7; floor = max(bytes at the copy rate,"
             f" FLOPs at the GEMM rate)")
    print(rates, flush=True)
    lines, results = [rates, HEADER], []
    for name, fused, naive in cases(x, shapes):
        err = agree(fused(), naive())
        if not err < 1e-4:
            print(f"{name}: fused and NumPy results disagree (relative difference {err:.2e})", file=sys.stderr)
            return 1
        # The fused op is timed first: NumPy's own BLAS threads keep spinning for a while
        # after its matmuls and would take a core from manaka's OpenMP team.
        time.sleep(0.5)
        fast = measure(f"{name}: manaka fused", fused, runs=args.runs, warmup=2,
                       peak_mb=round(peak_alloc_mb(fused), 1), rel_diff=f"{err:.1e}")
        floor = floor_ms(need[name], copy_gbs, gemm_gflops)
        fast.extra.update(floor_ms=f"{floor:.3f}", over_floor=f"{fast.median_ms / floor:.2f}")
        base = measure(f"{name}: NumPy, materialising", naive, runs=args.baseline_runs, warmup=1,
                       peak_mb=round(peak_alloc_mb(naive), 1))
        for line in (base.row(), fast.row(base)):
            lines.append(line)
            print(line, flush=True)
        results.append({"op": name, "numpy": base, "fused": fast, "speedup": base.median_ms / fast.median_ms,
                        "floor_ms": floor, "fused_over_floor": fast.median_ms / floor, **need[name]})
    path = write_results("ops", "cpu", {"shapes": shapes.__dict__, "threads": mk.get_num_threads(),
                                        "copy_gbs": copy_gbs, "gemm_gflops": gemm_gflops,
                                        "results": results}, lines, args.out)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
