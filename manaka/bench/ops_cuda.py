"""``python -m manaka.bench ops --device cuda``: the fused CUDA kernels at the seed
configuration, beside

* the same op through the public API (index checks with their device round trip, and a
  fresh output allocation, included),
* the materialising PyTorch version, eager and under torch.compile (when torch with CUDA
  is installed),
* its floor (manaka.bench.floors, the CPU suite's model): max(the bytes it must move over
  the measured device-to-device bandwidth, the FLOPs it must do over the measured FP32
  matmul rate (PyTorch, TF32 off)); without PyTorch only the bandwidth floor is given.

Rows: "fused" is the kernel alone (preallocated output, index checks off); "API" the
public op; "torch eager" / "torch.compile" the materialising PyTorch version (the
speed-up column is relative to torch eager); "floor" the bound above.
A time is the median over --runs of a batch of --inner back-to-back calls followed by a
device synchronise (manaka.bench.timing.measure with sync=), divided by --inner, after
warm-up. Every fused result is checked against the CPU backend (and PyTorch) before any
time is reported, and the backward passes are checked for bitwise reproducibility. Refuses
to run (exit status 2) without a usable CUDA device.
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable, Dict, List, Optional

import numpy as np

import manaka as mk
from manaka import cuda

from .floors import floor_ms as phase_floor_ms, floors
from .ops import agree
from .seed import SeedShapes, op_inputs
from .timing import HEADER, Timing, measure, write_results, OUT_HELP

TOLERANCE = 1e-4  # norm-wise relative difference allowed between two results of one op


def timed(name: str, fn: Callable[[], object], runs: int, inner: int, **extra) -> Timing:
    t = measure(name, lambda: [fn() for _ in range(inner)], runs=runs, warmup=2,
                sync=cuda.synchronize, **extra)
    return Timing(name, t.median_ms / inner, t.min_ms / inner, t.max_ms / inner, runs, t.extra)


def bandwidth_gbs(nbytes: int = 1 << 30) -> float:
    """Device-to-device copy rate in GB/s, counting bytes read plus bytes written."""
    src = mk.DeviceArray.empty(nbytes // 4, "float32")
    dst = mk.DeviceArray.empty(nbytes // 4, "float32")
    t = timed("copy", lambda: cuda._cuda._device_copy(dst, src), runs=10, inner=5)
    return 2 * nbytes / (t.median_ms * 1e-3) / 1e9


def fp32_tflops(torch) -> Optional[float]:
    """FP32 matmul rate (TF32 off) through PyTorch, or None without it."""
    if torch is None:
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    n = 8192
    a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    t = timed("sgemm", lambda: a @ b, runs=5, inner=3)
    return 2 * n**3 / (t.median_ms * 1e-3) / 1e12


def import_torch():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def host(result):
    return tuple(r.numpy() for r in result) if isinstance(result, tuple) else result.numpy()


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m manaka.bench ops --device cuda",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20, help="timed batches per version (default 20)")
    parser.add_argument("--inner", type=int, default=10, help="calls per timed batch (default 10)")
    parser.add_argument("--batch", type=int, default=SeedShapes.B, help="batch size (default 1024)")
    parser.add_argument("--no-torch", action="store_true", help="skip the PyTorch versions")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile (slow to compile)")
    parser.add_argument("--copy-mib", type=int, default=1024,
                        help="size of the bandwidth probe's copy in MiB (default 1024)")
    parser.add_argument("--tag", default="cuda", help="results file tag (default: cuda)")
    parser.add_argument("--out", default=None, help=OUT_HELP)
    parser.add_argument("--dry-run", action="store_true",
                    help="parse the arguments, print them and exit (tools/gpu_check.sh --rehearse)")
    args = parser.parse_args(argv)
    if args.dry_run:
        print(f"dry run: {vars(args)}")
        return 0

    if not cuda.is_available():
        print(f"manaka.bench ops --device cuda: cannot run: {cuda.why_unavailable()}", file=sys.stderr)
        return 2
    s = SeedShapes(B=args.batch)
    print(f"manaka.bench ops (cuda) on {cuda.device_name()}: {s}\n{mk.build_info()}", flush=True)
    torch = None if args.no_torch else import_torch()
    busy = other_gpu_processes()
    if busy:
        print(f"warning: other processes use the GPU ({busy}); times may be disturbed", file=sys.stderr)

    nvml = open_nvml()
    x = op_inputs(s)
    d = {k: mk.DeviceArray.from_numpy(v) for k, v in x.items()}
    bw = bandwidth_gbs(args.copy_mib << 20)
    tflops = fp32_tflops(torch)
    print(f"device-to-device bandwidth {bw:.0f} GB/s; FP32 matmul "
          + (f"{tflops:.1f} TFLOP/s" if tflops else "rate not measured (no PyTorch)"), flush=True)
    need = floors(x, s)

    _c = cuda._cuda
    out = {
        "gather_dot": mk.DeviceArray.empty((s.B, s.L)),
        "grad_hidden": mk.DeviceArray.empty((s.B, s.W)), "grad_table": mk.DeviceArray.empty((s.M, s.W)),
        "power": mk.DeviceArray.empty((s.B, s.S, s.K, s.D)), "grad_emb": mk.DeviceArray.empty((s.V, s.D)),
        "pair": mk.DeviceArray.empty((s.B, s.S, s.P)), "grad_pair": mk.DeviceArray.empty((s.num_pairs, s.P)),
    }
    gd_args = (d["hidden"], d["table"], d["indices"], d["counts"])
    gdb_args = (d["grad_logits"],) + gd_args
    # name -> (kernel call, public call, cpu call)
    cases = {
        "gather_dot forward": (
            lambda: _c.gather_dot(*gd_args, out=out["gather_dot"], check=False),
            lambda: mk.ops.gather_dot(*gd_args),
            lambda: mk.ops.gather_dot(x["hidden"], x["table"], x["indices"], x["counts"])),
        "gather_dot backward": (
            lambda: _c.gather_dot_backward(*gdb_args, out=(out["grad_hidden"], out["grad_table"]), check=False),
            lambda: mk.ops.gather_dot_backward(*gdb_args),
            lambda: mk.ops.gather_dot_backward(x["grad_logits"], x["hidden"], x["table"], x["indices"], x["counts"])),
        "power_sums forward": (
            lambda: _c.power_sums(d["emb"], d["tokens"], s.K, out=out["power"], check=False),
            lambda: mk.ops.power_sums(d["emb"], d["tokens"], s.K),
            lambda: mk.ops.power_sums(x["emb"], x["tokens"], s.K)),
        "power_sums backward": (
            lambda: _c.power_sums_backward(d["grad_power"], d["emb"], d["tokens"], out=out["grad_emb"], check=False),
            lambda: mk.ops.power_sums_backward(d["grad_power"], d["emb"], d["tokens"]),
            lambda: mk.ops.power_sums_backward(x["grad_power"], x["emb"], x["tokens"])),
        "pair_sums forward": (
            lambda: _c.pair_sums(d["pair_table"], d["tokens"], out=out["pair"], check=False),
            lambda: mk.ops.pair_sums(d["pair_table"], d["tokens"]),
            lambda: mk.ops.pair_sums(x["pair_table"], x["tokens"])),
        "pair_sums backward": (
            lambda: _c.pair_sums_backward(d["grad_pair"], d["tokens"], s.num_pairs, out=out["grad_pair"], check=False),
            lambda: mk.ops.pair_sums_backward(d["grad_pair"], d["tokens"], s.num_pairs),
            lambda: mk.ops.pair_sums_backward(x["grad_pair"], x["tokens"], s.num_pairs)),
    }
    torch_cases = make_torch_cases(torch, d, s, compile_too=not args.no_compile) if torch else {}

    lines, results = [HEADER], []
    for name, (kernel, public, cpu) in cases.items():
        want = cpu()
        got = host(public())
        err = agree(got, want)
        reproducible = identical(got, host(public()))
        if not err < TOLERANCE:
            print(f"{name}: CUDA and CPU results disagree (relative difference {err:.2e})", file=sys.stderr)
            return 1
        if "backward" in name and not reproducible:
            print(f"{name}: two runs of the deterministic CUDA backward differ", file=sys.stderr)
            return 1
        floor_ms = phase_floor_ms(need[name], bw, tflops * 1e3 if tflops else None)
        rows: List[Timing] = []
        entry: Dict[str, object] = {"op": name, "rel_diff_vs_cpu": err, "bitwise_reproducible": reproducible,
                                    "floor_ms": floor_ms, **need[name]}
        baseline = None
        for label, fn in torch_cases.get(name, []):
            try:
                t_err = agree(host_torch(fn()), want)
                t = timed(f"{name}: {label}", fn, args.runs, args.inner, rel_diff=f"{t_err:.1e}")
            except Exception as exc:  # e.g. torch.compile unavailable: say so, not a time
                entry[label] = f"failed: {type(exc).__name__}: {exc}"[:300]
                print(f"{name}: {label} failed: {exc}", file=sys.stderr)
                continue
            entry[label] = t
            rows.append(t)
            baseline = baseline or t
        fused = timed(f"{name}: fused", kernel, args.runs, args.inner,
                      floor_ms=round(floor_ms, 4))
        entry["fused"] = fused
        entry["fused_telemetry"] = telemetry(nvml, kernel)
        rows.append(fused)
        t = timed(f"{name}: API (checks+alloc)", public, args.runs, args.inner)
        entry["public"] = t
        rows.append(t)
        for t in rows:
            line = t.row(baseline if baseline is not None and t is not baseline else None)
            lines.append(line)
            print(line, flush=True)
        fl = f"{name + ': floor':<44} {floor_ms:10.4f}"
        lines.append(fl)
        print(fl, flush=True)
        entry["fused_over_floor"] = fused.median_ms / floor_ms
        results.append(entry)

    path = write_results("ops", args.tag, {"shapes": s.__dict__, "device": cuda.device_name(),
                                           "bandwidth_gbs": bw, "fp32_tflops": tflops,
                                           "torch": getattr(torch, "__version__", None),
                                           "results": results}, lines, args.out)
    print(f"wrote {path}")
    return 0


def identical(a, b) -> bool:
    """Bitwise equality of two results (arrays, or tuples of arrays)."""
    a, b = (a, b) if isinstance(a, tuple) else ((a,), (b,))
    return all(x.tobytes() == y.tobytes() for x, y in zip(a, b))


def host_torch(result):
    return tuple(r.cpu().numpy() for r in result) if isinstance(result, tuple) else result.cpu().numpy()


def open_nvml():
    """An NVML handle on GPU 0, or None where NVML is not available."""
    try:
        from .nvml import Nvml, NvmlError
    except ImportError:
        return None
    try:
        return Nvml()
    except NvmlError:
        return None


def other_gpu_processes() -> List[int]:
    nvml = open_nvml()
    try:
        return nvml.other_processes() if nvml else []
    except Exception:
        return []


def telemetry(nvml, fn: Callable[[], object], seconds: float = 0.3) -> Dict[str, float]:
    """Memory-controller utilisation and power while `fn` runs back to back for `seconds`
    (docs/design.md §5: "busy" alone says little about a memory-bound kernel)."""
    if nvml is None:
        return {}
    import time

    from .nvml import Sampler

    with Sampler(nvml, interval=0.01) as sampler:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            for _ in range(20):
                fn()
            cuda.synchronize()
    return sampler.summary()


def make_torch_cases(torch, d: dict, s: SeedShapes, compile_too: bool) -> Dict[str, list]:
    """name -> [(label, call)]: PyTorch eager (and torch.compile) on the same device data."""
    from . import torch_ops

    torch.backends.cuda.matmul.allow_tf32 = False
    t = {k: torch.from_dlpack(v) for k, v in d.items()}  # zero-copy views of the DeviceArrays
    idx, tok = t["indices"].long(), t["tokens"].long()
    cnt = t["counts"].long()
    fns = {
        "gather_dot forward": (torch_ops.gather_dot, (t["hidden"], t["table"], idx, cnt)),
        "gather_dot backward": (torch_ops.gather_dot_backward, (t["grad_logits"], t["hidden"], t["table"], idx, cnt)),
        "power_sums forward": (torch_ops.power_sums, (t["emb"], tok, s.K)),
        "power_sums backward": (torch_ops.power_sums_backward, (t["grad_power"], t["emb"], tok)),
        "pair_sums forward": (torch_ops.pair_sums, (t["pair_table"], tok)),
        "pair_sums backward": (torch_ops.pair_sums_backward, (t["grad_pair"], tok, s.num_pairs)),
    }
    cases = {}
    for name, (fn, fn_args) in fns.items():
        cases[name] = [("torch eager", lambda fn=fn, a=fn_args: fn(*a))]
        if compile_too:
            compiled = torch.compile(fn, dynamic=False)
            cases[name].append(("torch.compile", lambda fn=compiled, a=fn_args: fn(*a)))
    return cases


if __name__ == "__main__":
    sys.exit(main())
