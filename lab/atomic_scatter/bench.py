"""Times lab/atomic_scatter's atomicAdd table gradients against the product's deterministic
backward passes (manaka._cuda, index checks off, outputs preallocated) at the seed shapes of
`python -m manaka.bench ops --device cuda`, interleaved, and says whether two atomic runs give
the same bits. Needs a CUDA GPU and nvcc; builds the experiment into build/lab/.

    python lab/atomic_scatter/bench.py [--batch 1024] [--runs 20]
"""
import argparse
import ctypes
import os
import subprocess
import sys

import numpy as np

import manaka as mk  # first: _core's mk_fail, which the experiment's error path calls (RTLD_GLOBAL)
from manaka import cuda
from manaka.bench.seed import SeedShapes, op_inputs  # the ops benchmark's shapes and data
from manaka.bench.timing import measure_interleaved

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def build() -> ctypes.CDLL:
    out = os.path.join(ROOT, "build", "lab")
    os.makedirs(out, exist_ok=True)
    lib = os.path.join(out, "libatomic_scatter.so")
    src = os.path.join(HERE, "atomic_scatter.cu")
    if not os.path.exists(lib) or os.path.getmtime(lib) < os.path.getmtime(src):
        subprocess.run(["nvcc", "-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-I", os.path.join(ROOT, "csrc"),
                        src, "-o", lib], check=True)
    return ctypes.CDLL(lib)


def ptr(a) -> int:
    return a.__cuda_array_interface__["data"][0]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--runs", type=int, default=20)
    args = p.parse_args(argv)
    if not cuda.is_available():
        print("atomic_scatter bench: no usable CUDA device", file=sys.stderr)
        return 2
    lib = build()
    s = SeedShapes(B=args.batch)
    d = {k: mk.DeviceArray.from_numpy(v) for k, v in op_inputs(s).items()}
    _c = cuda._cuda
    gt = mk.DeviceArray.empty((s.M, s.W))
    gh = mk.DeviceArray.empty((s.B, s.W))
    gp = mk.DeviceArray.empty((s.num_pairs, s.P))

    def gd_atomic():
        assert lib.mk_lab_gather_dot_table_atomic_cuda(
            None, ctypes.c_void_p(ptr(d["grad_logits"])), ctypes.c_void_p(ptr(d["hidden"])),
            ctypes.c_void_p(ptr(d["indices"])), ctypes.c_void_p(ptr(d["counts"])), ctypes.c_int64(s.B),
            ctypes.c_int64(s.L), ctypes.c_int64(s.W), ctypes.c_int64(s.M), ctypes.c_void_p(ptr(gt))) == 0

    def ps_atomic():
        assert lib.mk_lab_pair_sums_table_atomic_cuda(
            None, ctypes.c_void_p(ptr(d["grad_pair"])), ctypes.c_void_p(ptr(d["tokens"])), ctypes.c_int64(s.B * s.S),
            ctypes.c_int64(s.T), ctypes.c_int64(s.P), ctypes.c_int64(s.num_pairs), ctypes.c_void_p(ptr(gp))) == 0

    fns = {
        "gather_dot backward (product, deterministic)": lambda: _c.gather_dot_backward(
            d["grad_logits"], d["hidden"], d["table"], d["indices"], d["counts"], out=(gh, gt), check=False),
        "gather_dot table (lab, atomicAdd)": gd_atomic,
        "pair_sums backward (product, deterministic)": lambda: _c.pair_sums_backward(
            d["grad_pair"], d["tokens"], s.num_pairs, out=gp, check=False),
        "pair_sums table (lab, atomicAdd)": ps_atomic,
    }
    times = measure_interleaved(fns, runs=args.runs, sync=cuda.synchronize)
    for name, t in times.items():
        print(f"{name:<48} {t.median_ms:9.4f} ms")
    for name, fn, out in (("gather_dot", gd_atomic, gt), ("pair_sums", ps_atomic, gp)):
        fn(); cuda.synchronize(); a = out.numpy()
        fn(); cuda.synchronize(); b = out.numpy()
        print(f"{name}: two atomic runs bitwise equal: {np.array_equal(a, b)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
