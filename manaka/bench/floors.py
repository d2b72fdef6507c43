"""Floors: the least time the machine's memory bandwidth and arithmetic allow for a piece of
work, and the probe that measures those two rates. One model for every benchmark that
prints a floor: ``python -m manaka.bench ops`` (each fused op; its ``--device cuda`` suite,
manaka.bench.ops_cuda, with the GPU's rates), ``python -m manaka.bench step`` (the fused
policy head entry), ``step_torch`` and ``step --device cuda`` (the whole step), and the
A/B tools (tools/power_sums_cpu_time.py, tools/policy_head_cpu_time.py).

What is counted. A piece of work needs some bytes (every input read once, every output
written once, gathered table rows counted once, only the rows actually used) and some
FLOPs (the multiply-adds of its dot products; exponentials, logarithms and the optimizer's
per-element arithmetic are not counted).

The rule. Within one phase, floor = max(bytes / copy rate, FLOPs / GEMM rate): the
roofline bound. A core's loads and stores (and its prefetchers) keep running while its
vector units multiply, so at best the two overlap fully, and no implementation can beat
the larger of the two; adding them instead would describe one schedule that does not
overlap, and a faster schedule could then run under its "floor". A phase is a stretch of
work whose items may overlap: every op of `floors`, and the fused policy head entry
(`policy_head_floor`: per position the logits come before the softmax and dq, but the
positions are independent, so one position's arithmetic overlaps the next one's reads) are
single phases. Phases are summed where the work is done by separate kernels one after the
other, each needing the last one's output: the training step (`step_floor`) is three, the
pair rows gathered forward (layer 0's input), the GEMMs and GatherDot forward and backward,
and the update (AdamW needs each parameter's gradient summed over the whole batch; the
pair table's gradient pass is fused with its update, so its rows are counted there). This
is the floor of a step built from kernels, as manaka's and PyTorch's are and as the step
ratios in bench/results count it (the gathers' and the update's bytes at the copy rate plus
the FLOPs at the GEMM rate); a schedule that interleaved the gathers with the GEMMs position
by position could at best hide the gathers (~4 ms at the seed shapes), and the few
parameters whose gradients are complete before the end of the backward (the heads, the
move table, the trunk layers above the first: about 30 MB of AdamW traffic, ~1.2 ms at
25 GB/s) could overlap it.

The rates (`cpu_rates`, one probe, one timing convention). Copy rate: one NumPy copy of a
large float32 array, bytes read plus bytes written, one core (NumPy copies on one thread,
so above one thread this understates the machine). GEMM rate: NumPy's float32 matmul of a
2048 cube (the BLAS NumPy links, a tuned sgemm: the floor is the machine's, not manaka's,
so it is measured with the fastest GEMM at hand, not manaka's own, which would move the
floor with manaka's GEMM), with the BLAS threads set to `threads` in a child process (the
BLAS reads its thread count when it loads). Each rate is the BEST of `runs` timed runs
after a warm-up: the floor asks what the machine can do, and on a shared machine other
processes only ever add time, so the other runs measure the load. The clock is process CPU
time where one thread does the work (the copy; the GEMM at one thread), which leaves out
time other processes held the core, and wall time for a GEMM on several threads (whose
CPU time would add the threads' times). On a GPU the callers pass the device's own rates
(manaka.bench.ops_cuda.bandwidth_gbs, fp32_tflops x 1e3) to the same floor functions.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Dict, Optional, Tuple

import numpy as np

from .seed import SeedShapes

Need = Dict[str, float]  # {"bytes": ..., "flops": ...} of one phase


def floors(x: dict, s: SeedShapes) -> Dict[str, Need]:
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


def policy_head_floor(legal: np.ndarray, counts: np.ndarray, W: int, M: Optional[int] = None) -> Need:
    """Bytes and FLOPs the fused policy head entry (logits, cross-entropy, dq) cannot avoid
    for legal [B, L] with counts [B] and a head of width W: q and the legal slots read, each
    distinct move row read once, dlogits [B, L] and dq [B, W] written, counts, targets and
    the two per-row stats; 2 n W FLOPs for the logits and 2 n W for dq (n legal slots).
    With M (the move table's rows), also the table's gradient: grad_table [M, W] written and
    2 n W FLOPs more (the whole policy head of a step). One phase (the module's docstring)."""
    legal, counts = np.asarray(legal), np.asarray(counts)
    if legal.ndim != 2:
        raise ValueError(f"policy_head_floor: legal must be [B, L], got shape {legal.shape}")
    B, L = legal.shape
    if counts.shape != (B,):
        raise ValueError(f"policy_head_floor: counts must be [B] = [{B}], got shape {counts.shape}")
    if W < 1 or (M is not None and M < 1):
        raise ValueError(f"policy_head_floor: W and M must be positive, got W={W} M={M}")
    n = int(counts.sum())
    rows = len(np.unique(legal[np.arange(L)[None] < counts[:, None]]))
    nbytes = 4 * (B * W + n + 2 * B + rows * W + B * L + B * W + 2 * B)
    flops = 4 * n * W
    if M is not None:
        nbytes, flops = nbytes + 4 * M * W, flops + 2 * n * W
    return {"bytes": nbytes, "flops": flops}


def step_floor(cfg, batch, num_parameters: int) -> Dict[str, Need]:
    """The three phases of one training step of a model of `cfg` (a manaka.ModelConfig) with
    `num_parameters` parameters on `batch`, each as bytes and FLOPs (the module's docstring
    says why they are summed):
    gather: the pair rows gathered forward;
    gemm: the GEMMs forward and backward (3x the forward's) and GatherDot forward and
    backward;
    update: AdamW reads p, m, v and the gradient and writes p, m, v (the pair table's
    gradient is consumed where it is computed, so it is not read), and the pair rows the
    fused gradient pass gathers. The activations' round trips are not counted (small)."""
    B, T, P = len(batch), cfg.tokens_per_side, cfg.pair_dim
    pair_params = cfg.num_pairs * P
    other = num_parameters - pair_params
    if other < 0:
        raise ValueError(f"step_floor: num_parameters ({num_parameters}) is below the pair table's "
                         f"{pair_params}")
    tok = batch.tokens
    i, j = np.triu_indices(T, k=1)
    pair_rows = 4 * int(((tok[..., i] >= 0) & (tok[..., j] >= 0)).sum()) * P
    widths = [cfg.num_features, *cfg.hidden]
    gemm = sum(2 * B * a * b for a, b in zip(widths[:-1], widths[1:]))
    gemm += 2 * B * widths[-1] * (cfg.head_width + 1)
    n_legal = int(batch.counts.sum())
    return {"gather": {"bytes": pair_rows, "flops": 0},
            "gemm": {"bytes": 0, "flops": 3 * gemm + 3 * 2 * n_legal * cfg.head_width},
            "update": {"bytes": 4 * (6 * pair_params + 7 * other) + pair_rows, "flops": 0}}


def _check_rates(copy_gbs: float, gemm_gflops: Optional[float]) -> None:
    if not copy_gbs > 0:
        raise ValueError(f"copy_gbs must be positive, got {copy_gbs}")
    if gemm_gflops is not None and not gemm_gflops > 0:
        raise ValueError(f"gemm_gflops must be positive or None, got {gemm_gflops}")


def floor_terms_ms(need: Need, copy_gbs: float, gemm_gflops: Optional[float]) -> Tuple[float, float]:
    """(bytes at `copy_gbs` GB/s, FLOPs at `gemm_gflops` GFLOP/s), each in milliseconds; the
    FLOP term is 0 where the GEMM rate is not measured (None: a GPU without PyTorch), which
    leaves the bandwidth floor alone."""
    _check_rates(copy_gbs, gemm_gflops)
    flops = 0.0 if gemm_gflops is None else need["flops"] / (gemm_gflops * 1e9) * 1e3
    return need["bytes"] / (copy_gbs * 1e9) * 1e3, flops


def floor_ms(need: Need, copy_gbs: float, gemm_gflops: Optional[float]) -> float:
    """The floor of one phase (an entry of `floors`, `policy_head_floor`, one phase of
    `step_floor`) in milliseconds: max(bytes / copy rate, FLOPs / GEMM rate)."""
    return max(floor_terms_ms(need, copy_gbs, gemm_gflops))


def phases_floor_ms(phases: Dict[str, Need], copy_gbs: float, gemm_gflops: Optional[float]) -> float:
    """The floor of phases that run one after the other (`step_floor`): the sum of each
    phase's floor_ms."""
    return sum(floor_ms(need, copy_gbs, gemm_gflops) for need in phases.values())


def phases_total(phases: Dict[str, Need]) -> Need:
    """The bytes and FLOPs of all `phases` together."""
    return {k: sum(need[k] for need in phases.values()) for k in ("bytes", "flops")}


def explain(need: Need, copy_gbs: float, gemm_gflops: Optional[float]) -> str:
    """One phase's floor as a line of text: max(bytes at the copy rate, FLOPs at the GEMM
    rate) = floor."""
    b, f = floor_terms_ms(need, copy_gbs, gemm_gflops)
    flop_part = ("FLOP rate not measured" if gemm_gflops is None else
                 f"{need['flops'] / 1e6:.1f} MFLOP at {gemm_gflops:,.1f} GFLOP/s = {f:.3f} ms")
    return (f"max({need['bytes'] / 1e6:.2f} MB at {copy_gbs:,.1f} GB/s = {b:.3f} ms, {flop_part})"
            f" = {max(b, f):.3f} ms")


def cpu_rates(threads: int, runs: int = 7, copy_mib: int = 256, gemm_n: int = 2048) -> Dict[str, float]:
    """This machine's copy rate (GB/s, one core, a `copy_mib` MiB float32 copy, read plus
    write) and float32 GEMM rate (GFLOP/s, NumPy's matmul of a `gemm_n` cube on `threads`
    BLAS threads), each the best of `runs`, in process CPU time where one thread does the
    work (the module's docstring): {"copy_gbs": ..., "gemm_gflops": ...}."""
    for name, value in (("threads", threads), ("runs", runs), ("copy_mib", copy_mib), ("gemm_n", gemm_n)):
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"cpu_rates: {name} must be a positive integer, got {value!r}")
    return {"copy_gbs": _copy_gbs(copy_mib, runs), "gemm_gflops": _gemm_gflops(threads, gemm_n, runs)}


def _copy_gbs(mib: int, runs: int) -> float:
    src = np.ones((mib << 20) // 4, np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    times = []
    for _ in range(runs):
        start = time.process_time()
        np.copyto(dst, src)
        times.append(time.process_time() - start)
    return 2 * src.nbytes / max(min(times), 1e-9) / 1e9


_GEMM_PROBE = """
import sys, time
import numpy as np
n, runs = int(sys.argv[1]), int(sys.argv[2])
clock = time.process_time if sys.argv[3] == "1" else time.perf_counter
a, b = np.ones((n, n), np.float32), np.ones((n, n), np.float32)
a @ b
times = []
for _ in range(runs):
    start = clock()
    a @ b
    times.append(clock() - start)
print(2 * n ** 3 / max(min(times), 1e-9) / 1e9)
"""


def _gemm_gflops(threads: int, n: int, runs: int) -> float:
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, "-c", _GEMM_PROBE, str(n), str(runs), str(threads)],
                         capture_output=True, text=True, env=env, timeout=600, check=True)
    return float(out.stdout.strip())
