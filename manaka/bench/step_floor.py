"""The floor of one training step: the bytes it cannot avoid moving and the FLOPs it cannot
avoid doing, over a machine's measured rates. Used by ``step --device cuda`` (the GPU's
copy bandwidth and FP32 matmul rate) and by ``step_torch`` on the CPU (this core's copy
bandwidth and manaka's own GEMM at a large square shape)."""
from __future__ import annotations

import time
from typing import Dict

import numpy as np

import manaka as mk


def floor(cfg: mk.ModelConfig, batch: mk.Batch, num_parameters: int) -> Dict[str, float]:
    """Bytes and FLOPs one step cannot avoid. Bytes: AdamW reads p, m, v and writes them
    (plus reads the gradient, except the pair table's, which is consumed where it is
    computed), the pair rows gathered forward and backward, the activations' round trips
    are ignored (they are small); FLOPs: the GEMMs forward and backward and GatherDot."""
    B, T, P = len(batch), cfg.tokens_per_side, cfg.pair_dim
    pair_params = cfg.num_pairs * P
    other = num_parameters - pair_params
    tok = batch.tokens
    i, j = np.triu_indices(T, k=1)
    n_pairs = int(((tok[..., i] >= 0) & (tok[..., j] >= 0)).sum())
    widths = [cfg.num_features, *cfg.hidden]
    gemm = sum(2 * B * a * b for a, b in zip(widths[:-1], widths[1:]))
    gemm += 2 * B * widths[-1] * (cfg.head_width + 1)
    n_legal = int(batch.counts.sum())
    flops = 3 * gemm + 3 * 2 * n_legal * cfg.head_width   # forward, and two GEMMs backward
    nbytes = 4 * (6 * pair_params + 7 * other) + 2 * 4 * n_pairs * P
    return {"bytes": nbytes, "flops": flops}


def policy_head_floor(legal: np.ndarray, counts: np.ndarray, W: int) -> Dict[str, float]:
    """Bytes and FLOPs the fused policy head entry (logits, cross-entropy, dq) cannot avoid for
    legal [B, L] with counts [B] and a head of width W: q and the legal slots read, each
    distinct move row read once, dlogits [B, L] and dq [B, W] written, counts, targets and the
    two per-row stats; 2 n W FLOPs for the logits and 2 n W for dq (n legal slots). The
    exponentials and logarithms are not counted."""
    B, L = legal.shape
    n = int(counts.sum())
    rows = len(np.unique(legal[np.arange(L)[None] < counts[:, None]]))
    nbytes = 4 * (B * W + n + 2 * B + rows * W + B * L + B * W + 2 * B)
    return {"bytes": nbytes, "flops": 4 * n * W}


def floor_ms(need: Dict[str, float], gbs: float, gflops: float) -> float:
    """The step's floor: its bytes at `gbs` plus its FLOPs at `gflops` (summed, not
    overlapped: a single core either streams or multiplies)."""
    return need["bytes"] / (gbs * 1e9) * 1e3 + need["flops"] / (gflops * 1e9) * 1e3


def cpu_rates(runs: int = 7) -> Dict[str, float]:
    """This machine's rates at manaka's current thread count, medians of `runs`: the copy
    bandwidth of a NumPy copy of 256 MiB (bytes read plus bytes written; NumPy copies on
    one thread, so above one thread this understates the machine), and GFLOP/s of a
    2,048-cube GEMM through manaka's CPU GEMM (the test-hook extension; None without it)."""
    n = 1 << 26
    src, dst = np.ones(n, np.float32), np.empty(n, np.float32)
    copies = []
    for _ in range(runs):
        start = time.perf_counter()
        np.copyto(dst, src)
        copies.append(time.perf_counter() - start)
    rates = {"copy_gbs": 2 * 4 * n / float(np.median(copies)) / 1e9, "gemm_gflops": None}
    try:
        from manaka import _testing
    except ImportError:
        return rates
    m = 2048
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, m), np.float32), rng.standard_normal((m, m), np.float32)
    _testing.backend_gemm("cpu", a, b, trans_a=False, trans_b=True)
    gemms = []
    for _ in range(runs):
        start = time.perf_counter()
        _testing.backend_gemm("cpu", a, b, trans_a=False, trans_b=True)
        gemms.append(time.perf_counter() - start)
    rates["gemm_gflops"] = 2 * m ** 3 / float(np.median(gemms)) / 1e9
    return rates
