"""``python -m manaka.bench step --device cuda``: the training step at the seed
configuration on a GPU.

Reports manaka's step (median/min/max of N after warm-up, positions/s) with the batch
staged from NumPy every step (as a loader delivers it), with bf16 pair-table moments, and
with the batch already on the GPU (read in place); its throughput (N steps, one
synchronise: copy/compute overlap) with the host time of one call; the step on a skewed
batch (bench/skew.py: hot tokens, pairs and moves as in real games);
kernel launches per step (manaka's counter, which does not see CUB's internal kernels and
memsets: tools/kernel_profile.py counts every GPU operation); device memory in use; memory-controller utilisation and power
sampled through NVML during the timed loop; the step with the fused policy head against the
split one (timed interleaved, bench/policy_head.py); and beside it, in the same run, the same
network in PyTorch eager and under torch.compile (manaka/bench/torch_baseline.py, same parameters
and batch, losses checked to agree; their batch is already on the GPU, unlike the
first manaka row's, and their labels say so), and the floor (manaka.bench.floors.step_floor): per
phase, max(the bytes it must move over this GPU's measured copy bandwidth, the FLOPs it must do
over its FP32 matmul rate), summed over the pair gathers, the GEMMs and the update.
The run is refused while another process uses the GPU (docs/design.md §5).
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Dict, List

import numpy as np

import manaka as mk
from manaka import cuda

from . import policy_head
from .seed import MAX_LEGAL_HELP, SMALL, max_legal
from .skew import hottest_share, skewed_batch
from .ops_cuda import bandwidth_gbs, fp32_tflops, import_torch, open_nvml, other_gpu_processes
from .step import SEED, load_torch_baseline, seed_batch
from .floors import explain, phases_floor_ms, step_floor, phases_total
from .timing import HEADER, Timing, measure, write_results, OUT_HELP


def throughput(name: str, step, steps: int, sync) -> Timing:
    """`steps` calls of `step` back to back and one synchronise at the end: the rate a
    training loop gets, with the host enqueueing while the GPU works (the staging copy of
    the next batch overlapping the step before it). Also the host time per call (its
    enqueue cost, measured with the GPU busy), as extra "host ms"."""
    sync()
    calls = []
    start = time.perf_counter()
    for _ in range(steps):
        t = time.perf_counter()
        step()
        calls.append((time.perf_counter() - t) * 1e3)
    sync()
    per_step = (time.perf_counter() - start) * 1e3 / steps
    calls.sort()
    timing = Timing(name, per_step, per_step, per_step, 1)
    timing.extra["host ms"] = f"{calls[len(calls) // 2]:.3f}"
    return timing


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m manaka.bench step --device cuda", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=1024, help="B (default 1024)")
    ap.add_argument("--max-legal", type=int, default=None, help=MAX_LEGAL_HELP)
    ap.add_argument("--runs", type=int, default=50, help="timed steps (median of N)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--head-runs", type=int, default=100,
                    help="interleaved rounds of the fused vs split policy head comparison (0: skip)")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch baselines")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile (slow to compile)")
    ap.add_argument("--tf32", action="store_true", help="let cuBLAS use TF32 (default: FP32)")
    ap.add_argument("--small", action="store_true",
                    help="a small configuration, to test the benchmark itself (not a result)")
    ap.add_argument("--tag", default="cuda", help="results file tag: <out>/step-<tag>.*")
    ap.add_argument("--out", default=None, help=OUT_HELP)
    ap.add_argument("--dry-run", action="store_true",
                    help="parse the arguments, print them and exit (tools/gpu_check.sh --rehearse)")
    args = ap.parse_args(argv)
    args.max_legal = max_legal(args.max_legal, args.small)
    if args.dry_run:
        print(f"dry run: {vars(args)}")
        return 0

    if not cuda.is_available():
        print(f"step --device cuda: {cuda.why_unavailable()}", file=sys.stderr)
        return 2
    busy = other_gpu_processes()
    if busy:
        print(f"step --device cuda: refused, other processes use the GPU: {busy}", file=sys.stderr)
        return 3
    if args.tf32:
        cuda.allow_tf32(True)
    cfg = mk.ModelConfig(**(SMALL if args.small else SEED))
    batch = seed_batch(cfg, args.batch, args.max_legal)
    B = args.batch
    free0, total = cuda._cuda.mem_info()
    model = mk.Model(cfg, device="cuda", seed=0)
    trainer = mk.Trainer(model, lr=1e-3)
    lines = [f"{'small test' if args.small else 'seed'} configuration: {cfg}", f"B={B} L={args.max_legal} device={cuda.device_name()}"
             f" tf32={args.tf32} parameters={model.num_parameters():,}", "", HEADER]
    results: Dict[str, object] = {"config": cfg.to_dict(), "batch": B, "max_legal": args.max_legal,
                                  "device": cuda.device_name(), "tf32": args.tf32}

    # PyTorch starts from these parameters (the timed steps below change the model)
    state0 = model.state_dict()
    loss0 = model.loss_and_grad(batch)[0]["loss"]
    results["loss_at_start"] = loss0
    launches0 = cuda._cuda.launch_count()
    step = measure("manaka step, batch staged from NumPy", lambda: trainer.step(batch),
                   runs=args.runs, warmup=args.warmup, sync=cuda.synchronize).count_positions(B)
    launches = (cuda._cuda.launch_count() - launches0) / (args.runs + args.warmup)
    # manaka's own counter: every kernel launch and GEMM in its source; CUB's internal
    # kernels and memsets are not seen (tools/kernel_profile.py counts every GPU operation).
    step.extra["launches/step"] = f"{launches:.0f} (CUB internals not counted)"
    # Throughput: no synchronisation between steps, as a training loop runs.
    rate = throughput("manaka step, throughput (one sync per run)", lambda: trainer.step(batch),
                      max(args.runs, 2), cuda.synchronize).count_positions(B)
    results["manaka_throughput"] = rate
    free1, _ = cuda._cuda.mem_info()
    # The same step with the pair table's moments in bf16 (pair_state_dtype="bf16"), on a
    # second trainer of the same model: its AdamW moves ~16 instead of ~24 bytes/parameter.
    trainer_bf16 = mk.Trainer(model, lr=1e-3, pair_state_dtype="bf16")
    bf16 = measure("manaka step, bf16 pair-table moments", lambda: trainer_bf16.step(batch),
                   runs=args.runs, warmup=args.warmup, sync=cuda.synchronize).count_positions(B)
    results["manaka_bf16_moments"] = bf16
    del trainer_bf16
    # The same step on a batch already on the GPU (DeviceArrays, as a GPU data pipeline or
    # a self-play buffer in CuPy/PyTorch would hand it over): read in place, no copy, after
    # the check on the device and its one small device -> host read.
    resident = mk.Batch(*(None if getattr(batch, n) is None else mk.DeviceArray.from_numpy(getattr(batch, n))
                          for n in ("tokens", "legal", "counts", "target", "value", "policy_target")))
    on_device = measure("manaka step, batch already on the GPU", lambda: trainer.step(resident),
                        runs=args.runs, warmup=args.warmup, sync=cuda.synchronize).count_positions(B)
    results["manaka_device_batch"] = on_device
    # A batch with the skew of real positions (a few hot tokens, pairs and moves carry most
    # occurrences: long buckets in the deterministic scatters), on the same model.
    skewed = skewed_batch(cfg, B, args.max_legal)
    skew = measure("manaka step, skewed batch (hot ids)", lambda: trainer.step(skewed),
                   runs=args.runs, warmup=args.warmup, sync=cuda.synchronize).count_positions(B)
    skew.extra["top-10 token share"] = f"{hottest_share(skewed.tokens):.2f}"
    skew.extra["top-10 move share"] = f"{hottest_share(skewed.legal):.2f}"
    results["manaka_skewed_batch"] = skew
    results["manaka"] = step
    results["launches_per_step"] = launches
    results["device_memory_mb"] = (free0 - free1) / 2**20
    lines.append(step.row())
    lines.append(bf16.row(step))
    lines.append(on_device.row(step))
    lines.append(rate.row(step))
    lines.append(skew.row(step))
    lines.append("  latency rows: one synchronise after every step (median of N); throughput: N steps, one "
                 "synchronise; host ms: the median time of one trainer.step call while the GPU is busy")

    nvml = open_nvml()
    if nvml is not None:
        from .nvml import Sampler

        with Sampler(nvml, interval=0.01) as sampler:
            for _ in range(args.runs if args.small else max(args.runs, 200)):
                trainer.step(batch)
            cuda.synchronize()
        results["nvml"] = sampler.summary()
        lines.append(f"  NVML during the sampled steps: {results['nvml']}")
    else:
        lines.append("  NVML: not available here (no utilisation or power figures)")
    if args.head_runs > 0:
        head_lines, results["policy_head"] = policy_head.compare(
            model, trainer, batch, args.head_runs, args.warmup, sync=cuda.synchronize,
            launches=cuda._cuda.launch_count)
        lines += head_lines
        head_lines, results["policy_head_ops"] = policy_head.compare_ops(
            cuda.backend_table(), batch, cfg.head_width, cfg.num_moves, args.head_runs,
            repeats=2 if args.small else 200, sync=cuda.synchronize)
        lines += head_lines
    final_loss = trainer.step(batch).loss  # a real read: a run that failed is an error, not a time
    if not np.isfinite(final_loss):
        print(f"error: the loss became {final_loss}", file=sys.stderr)
        return 1

    bw = bandwidth_gbs(1 << 24 if args.small else 1 << 30)
    torch = import_torch()
    tflops = fp32_tflops(torch) if torch is not None else None
    phases = step_floor(cfg, batch, model.num_parameters())
    gflops = tflops * 1e3 if tflops else None
    floor_ms = phases_floor_ms(phases, bw, gflops)
    results["floor"] = {**phases_total(phases), "phases": phases, "bandwidth_gbs": bw, "fp32_tflops": tflops,
                        "floor_ms": floor_ms}
    lines.append(f"  floor = the sum of its phases' floors = {floor_ms:.3f} ms; manaka is"
                 f" {step.median_ms / floor_ms:.2f}x the floor")
    lines += [f"    {name}: {explain(need, bw, gflops)}" for name, need in phases.items()]
    lines.append(f"  device memory used by the model and its step: {results['device_memory_mb']:,.0f} MB")

    baseline = None if args.no_torch or torch is None else load_torch_baseline()
    if baseline is None:
        lines.append("  PyTorch baselines: skipped (torch with CUDA not installed, or --no-torch)")
    else:
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
        for label, compiled in (("eager", False), ("torch.compile", True)):
            if compiled and args.no_compile:
                continue
            ref = baseline.TorchStep(cfg, state0, batch, lr=1e-3, device="cuda", compile=compiled)
            torch_loss0 = ref.loss()
            if abs(torch_loss0 - loss0) > 1e-4 * abs(loss0):
                print(f"error: losses disagree: manaka {loss0} vs torch {torch_loss0}", file=sys.stderr)
                return 1
            tt = measure(f"torch {torch.__version__} {label} step (batch already on the GPU)", ref.step, runs=args.runs,
                         warmup=args.warmup, sync=torch.cuda.synchronize).count_positions(B)
            lines.append(tt.row())
            lines.append(f"  manaka speed-up over torch {label}: {tt.median_ms / step.median_ms:.2f}x (median)")
            results[f"torch_{label}"] = tt
            results[f"speedup_vs_torch_{label}"] = tt.median_ms / step.median_ms
            del ref
            torch.cuda.empty_cache()
    print("\n".join(lines))
    print("wrote", write_results("step", args.tag, results, lines, args.out))
    return 0
