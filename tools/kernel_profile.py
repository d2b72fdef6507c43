"""Where one training step's GPU time goes, kernel by kernel, at the seed configuration:

    python tools/kernel_profile.py [--small] [--steps N] [--out DIR] [--move-hidden D]

With PyTorch (CUDA build) installed, the steps run under torch.profiler, whose CUPTI
tracing sees every GPU operation of the process, manaka's included: each kernel (CUB's
internal sort/scan kernels too), memset and memcpy, with its calls per step, total and
mean microseconds and share of the step's GPU time. The count of GPU operations per step
from this table is the honest one (manaka's own launch counter sees only the launches in
its source, not CUB's internal kernels and memsets).

Without torch it falls back to the trainer's phase counters (forward, backward, optimizer;
each phase synchronised, so their sum exceeds the pipelined step) and says so: there is no
per-kernel split then.

--move-hidden D adds the move-pair table with shogi's relative part (9 x 9 board, 28 token
kinds, 2,187 classes) and MoveHidden with D units, whose kernels then show in the table.

Writes DIR/kernel-profile.json and .md (default bench/results; kernel-profile-move-hidden-D.*
with --move-hidden)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import manaka as mk  # noqa: E402
from manaka import cuda  # noqa: E402
from manaka.bench.step import SEED, seed_batch  # noqa: E402
from manaka.bench.seed import SMALL  # noqa: E402
from manaka.bench.timing import phase_ms, write_results  # noqa: E402


def cuda_torch():
    """torch when it is installed with a usable CUDA device, else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def profile_kernels(torch, trainer, batch, steps):
    """Rows (name, calls/step, total µs/step, mean µs, share) of the GPU operations of
    `steps` training steps, from torch.profiler's CUDA activity, largest first."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            trainer.step(batch)
        cuda.synchronize()
    rows = {}
    for event in prof.events():
        if getattr(event, "device_type", None) is None or "CUDA" not in str(event.device_type):
            continue
        name = event.name
        row = rows.setdefault(name, {"name": name, "calls": 0, "us": 0.0})
        row["calls"] += 1
        row["us"] += event.device_time if hasattr(event, "device_time") else event.cuda_time
    total = sum(r["us"] for r in rows.values()) or 1.0
    table = []
    for r in sorted(rows.values(), key=lambda r: -r["us"]):
        table.append({"name": r["name"], "calls_per_step": r["calls"] / steps, "us_per_step": r["us"] / steps,
                      "mean_us": r["us"] / r["calls"], "share": r["us"] / total})
    return table


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/kernel_profile.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20, help="profiled steps after warm-up (default 20)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--max-legal", type=int, default=600)
    ap.add_argument("--small", action="store_true", help="a small configuration, to test the tool itself")
    ap.add_argument("--out", default=None, help="results folder (default bench/results)")
    ap.add_argument("--move-hidden", type=int, default=0, metavar="D",
                    help="with the relative move pairs and MoveHidden of D units (default 0: neither)")
    ap.add_argument("--dry-run", action="store_true", help="parse the arguments, print them and exit")
    args = ap.parse_args(argv)
    if args.dry_run:
        print(f"dry run: {vars(args)}")
        return 0
    if not cuda.is_available():
        print(f"kernel_profile: {cuda.why_unavailable()}", file=sys.stderr)
        return 2
    shapes = dict(SMALL if args.small else SEED)
    if args.move_hidden:  # shogi's board; the small one: a 3 x 3 board, 2 kinds, 18 classes
        W, K, C = (3, 2, 18) if args.small else (9, 28, 2187)
        shapes.update(move_pairs=C, board_width=W, board_height=W, board_kinds=K,
                      move_hidden=args.move_hidden)
    cfg = mk.ModelConfig(**shapes)
    batch = seed_batch(cfg, args.batch, args.max_legal)
    model = mk.Model(cfg, device="cuda", seed=0)
    trainer = mk.Trainer(model, lr=1e-3)
    for _ in range(args.warmup):
        trainer.step(batch)
    cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        trainer.step(batch)
    cuda.synchronize()
    wall_ms = (time.perf_counter() - t0) / args.steps * 1e3
    result = {"config": cfg.to_dict(), "batch": args.batch, "max_legal": args.max_legal, "steps": args.steps,
              "device": cuda.device_name(), "wall_ms_per_step": wall_ms,
              "manaka_launch_counter": None}
    lines = [f"{'small test' if args.small else 'seed'} configuration"
             f"{f' with MoveHidden D={args.move_hidden}' if args.move_hidden else ''}, B={args.batch} L={args.max_legal}, "
             f"{cuda.device_name()}: {wall_ms:.3f} ms/step wall (no per-step sync, {args.steps} steps)"]
    torch = cuda_torch()
    if torch is not None:
        before = cuda._cuda.launch_count()
        table = profile_kernels(torch, trainer, batch, args.steps)
        result["manaka_launch_counter"] = (cuda._cuda.launch_count() - before) / args.steps
        gpu_us = sum(r["us_per_step"] for r in table)
        ops = sum(r["calls_per_step"] for r in table)
        result.update(source="torch.profiler (CUPTI)", kernels=table, gpu_us_per_step=gpu_us, gpu_ops_per_step=ops)
        lines.append(f"GPU time {gpu_us:.1f} µs/step in {ops:.0f} GPU operations/step (CUB's kernels and memsets "
                     f"included; manaka's launch counter says {result['manaka_launch_counter']:.0f})")
        lines.append(f"{'kernel / operation':<60} {'calls':>6} {'µs/step':>9} {'mean µs':>8} {'share':>6}")
        for r in table:
            lines.append(f"{r['name'][:60]:<60} {r['calls_per_step']:6.1f} {r['us_per_step']:9.1f} "
                         f"{r['mean_us']:8.1f} {100 * r['share']:5.1f}%")
    else:
        phases = phase_ms(trainer, batch, args.steps)
        result.update(source="trainer phase counters (no torch with CUDA: no per-kernel split)", phases_ms=phases)
        lines.append("no torch with CUDA here: per-phase split only (each phase synchronised)")
        lines += [f"  {k:<10} {v:8.3f} ms" for k, v in phases.items()]
    print("\n".join(lines))
    tag = f"profile-move-hidden-{args.move_hidden}" if args.move_hidden else "profile"
    print("wrote", write_results("kernel", tag, result, lines, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
