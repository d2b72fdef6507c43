"""``python -m manaka.bench step``: the training step at the seed configuration on the CPU.

Reports manaka's step (median/min/max of N after warm-up, positions/s), its split into
forward, backward and optimizer (pair-table AdamW shown on its own), measured by the C
trainer's phase counters, the step with the fused policy head against the split one
(timed interleaved, bench/policy_head.py) and the fused head's entry alone against its floor
(manaka/bench/floors.py: max(its bytes at this core's copy rate, its FLOPs at the sgemm
rate)), and beside it the same network in PyTorch eager
(manaka/bench/torch_baseline.py, only when torch is importable) loaded with the same parameters
and batch, after checking that the two losses agree.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from typing import List

import numpy as np

import manaka as mk
from manaka.bench import policy_head
from manaka.bench.seed import MAX_LEGAL_HELP, SeedShapes, max_legal
from manaka.bench.floors import cpu_rates
from manaka.bench.timing import HEADER, OUT_HELP, measure, note_resources, phase_ms, write_results, use_threads

SEED = SeedShapes().model_config()


def seed_batch(cfg: mk.ModelConfig, B: int, L: int, seed: int = 0) -> mk.Batch:
    """The seed batch of docs/design.md §5: full boards, counts ~ clip(round(lognormal(ln 90,
    0.6)), 1, L - 7), distinct legal moves per position, padded with -1."""
    if not 8 <= L <= cfg.num_moves:
        raise ValueError(f"seed_batch: L must be in [8, num_moves = {cfg.num_moves}], got {L}")
    rng = np.random.default_rng(seed)
    counts = np.clip(np.round(rng.lognormal(np.log(90), 0.6, B)), 1, L - 7).astype(np.int32)
    tokens = rng.integers(0, cfg.num_tokens, (B, 2, cfg.tokens_per_side), dtype=np.int32)
    legal = np.argsort(rng.random((B, cfg.num_moves)), axis=1)[:, :L].astype(np.int32)
    legal[np.arange(L)[None, :] >= counts[:, None]] = -1
    target = (rng.random(B) * counts).astype(np.int32)
    value = rng.choice(np.float32([0.0, 0.5, 1.0]), B)
    return mk.Batch(tokens, legal, counts, target, value)


def load_torch_baseline():
    """manaka.bench.torch_baseline, or None when torch is not installed."""
    if importlib.util.find_spec("torch") is None:
        return None
    from . import torch_baseline

    return torch_baseline


def without_device(argv: List[str]) -> List[str]:
    """argv less its `--device X` / `--device=X` (only that: `--tag cuda` keeps its value)."""
    out, skip = [], False
    for i, a in enumerate(argv):
        if skip:
            skip = False
        elif a == "--device":
            skip = True
        elif not a.startswith("--device="):
            out.append(a)
    return out


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m manaka.bench step", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=1024, help="B (default 1024)")
    ap.add_argument("--max-legal", type=int, default=None, help=MAX_LEGAL_HELP)
    ap.add_argument("--runs", type=int, default=10, help="timed steps (median of N)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--head-runs", type=int, default=20,
                    help="interleaved rounds of the fused vs split policy head comparison (0: skip)")
    ap.add_argument("--torch-runs", type=int, default=5, help="timed PyTorch steps")
    ap.add_argument("--threads", type=int, default=0, help="threads (0: default)")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch baseline")
    ap.add_argument("--tag", default="cpu", help="results file tag: <out>/step-<tag>.*")
    ap.add_argument("--out", default=None, help=OUT_HELP)
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--torch", action="store_true",
                    help="the step_torch suite instead: mk.Trainer vs manaka.torch.Network vs plain PyTorch "
                         "(python -m manaka.bench step_torch --help)")
    ap.add_argument("--pair-update", default=None, metavar="MODES",
                    help="compare pair-table updates, e.g. dense,sparse,lazy (manaka/bench/pair_update.py): "
                         "timed interleaved, instead of the default suite")
    ap.add_argument("--move-update", default=None, metavar="MODES",
                    help="compare move-table updates, e.g. dense,sparse (manaka/bench/pair_update.py) on the "
                         "shogi recipe's model and settings; needs --records")
    ap.add_argument("--pair-batches", type=int, default=8,
                    help="distinct batches the --pair-update steps cycle through (default 8)")
    ap.add_argument("--records", default=None, metavar="FILES",
                    help="with --pair-update: batches of real positions from shogi records "
                         "(HCPE / PSV file, glob or folder) instead of the uniform seed batch")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cuda: the GPU suite (python -m manaka.bench step --device cuda --help)")
    ap.add_argument("--small", action="store_true",
                    help="with --pair-update: a small configuration, to test the benchmark itself")
    ap.add_argument("--dry-run", action="store_true", help="with --pair-update: parse the arguments only")
    args, rest = ap.parse_known_args(argv)
    # --small is the pair-table comparison's (the move-table one runs the recipe's model)
    args.max_legal = max_legal(args.max_legal, args.small and args.pair_update is not None and args.move_update is None)
    if args.move_update is not None:
        if rest:
            ap.error(f"unrecognized arguments: {' '.join(rest)}")
        if not args.records and not args.dry_run:
            ap.error("--move-update needs --records (the recipe's model reads shogi positions)")
        return main_pair_update(args, table="move")
    if args.pair_update is not None:
        if rest:
            ap.error(f"unrecognized arguments: {' '.join(rest)}")
        return main_pair_update(args)
    if args.torch:
        from . import step_torch

        return step_torch.main([a for a in argv if a != "--torch"])
    if args.device == "cuda":
        from . import step_cuda

        return step_cuda.main(without_device(list(argv)))
    if rest:
        ap.error(f"unrecognized arguments: {' '.join(rest)}")

    use_threads("step", args.threads)
    load = os.getloadavg()
    cfg = mk.ModelConfig(**SEED)
    batch = seed_batch(cfg, args.batch, args.max_legal)
    B = args.batch
    model = mk.Model(cfg, seed=0)
    state = model.state_dict()
    lines = [f"seed configuration: {cfg}", f"B={B} L={args.max_legal} threads={mk.get_num_threads()}"
             f" parameters={model.num_parameters():,}", "", HEADER]
    results = {"config": cfg.to_dict(), "batch": B, "max_legal": args.max_legal,
               "threads": mk.get_num_threads(), "load_average_at_start": load}

    loss0 = model.loss_and_grad(batch)[0]["loss"]
    trainer = mk.Trainer(model, lr=1e-3)
    step = measure("manaka step (forward+backward+AdamW)", lambda: trainer.step(batch),
                   runs=args.runs, warmup=args.warmup).count_positions(B)
    lines.append(step.row())
    results["manaka"] = step

    phases = phase_ms(trainer, batch, args.runs,
                      ("forward", "backward", "optimizer", "optimizer_pair_table"))
    results["phases_ms"] = phases
    total = phases["forward"] + phases["backward"] + phases["optimizer"]
    lines.append(f"  phases (mean of {args.runs} profiled steps, ms): forward+loss {phases['forward']:.1f}"
                 f" | backward {phases['backward']:.1f} | AdamW {phases['optimizer']:.1f}"
                 f" = pair_table {phases['optimizer_pair_table']:.1f} + rest"
                 f" {phases['optimizer'] - phases['optimizer_pair_table']:.1f} | sum {total:.1f}")
    lines.append("  (the pair table's gradient is fused with its AdamW update: its time is in pair_table,"
                 " not in backward)")
    if args.head_runs > 0:
        head_lines, results["policy_head"] = policy_head.compare(model, trainer, batch,
                                                                 args.head_runs, args.warmup)
        lines += head_lines
        head_lines, results["policy_head_ops"] = policy_head.compare_ops(
            "cpu", batch, cfg.head_width, cfg.num_moves, args.head_runs, repeats=10,
            rates=cpu_rates(mk.get_num_threads()))
        lines += head_lines

    baseline = None if args.no_torch else load_torch_baseline()
    if baseline is None:
        lines.append("  PyTorch baseline: skipped (torch not installed or --no-torch)")
    else:
        import torch

        torch.set_num_threads(mk.get_num_threads())
        ref = baseline.TorchStep(cfg, state, batch, lr=1e-3)
        torch_loss0 = ref.loss()
        agree = abs(torch_loss0 - loss0) <= 1e-4 * abs(loss0)
        results["loss_check"] = {"manaka": loss0, "torch": torch_loss0, "agree": agree}
        if not agree:
            print(f"error: losses disagree: manaka {loss0} vs torch {torch_loss0}", file=sys.stderr)
            return 1
        tt = measure(f"torch {torch.__version__} eager step (materialising)", ref.step,
                     runs=args.torch_runs, warmup=1).count_positions(B)
        lines.append(tt.row(baseline=None))
        lines.append(f"  losses agree at the same parameters: manaka {loss0:.6f} torch {torch_loss0:.6f}")
        lines.append(f"  manaka speed-up over torch eager: {tt.median_ms / step.median_ms:.2f}x (median)")
        results["torch"] = tt
        results["speedup_vs_torch"] = tt.median_ms / step.median_ms
    note_resources(lines, results, "other processes inflate every time above")
    print("\n".join(lines))
    if not args.no_write:
        print("wrote", write_results("step", args.tag, results, lines, args.out))
    return 0


def main_pair_update(args, table: str = "pair") -> int:
    """--pair-update / --move-update: the step with each pair-table (move-table) update,
    interleaved (pair_update.py), on the CPU or (--device cuda) the GPU."""
    from . import pair_update

    modes = pair_update.parse_modes(getattr(args, f"{table}_update"), f"--{table}-update")
    if args.dry_run:
        print(f"dry run: {vars(args)}")
        return 0
    if args.device == "cuda":
        from manaka import cuda

        reason = cuda.why_cannot_train()
        if reason:
            print(f"error: --device cuda: {reason}", file=sys.stderr)
            return 1
    use_threads("step", args.threads)
    load = os.getloadavg()
    settings, moves = None, "dlshogi"
    if table == "move":  # the shogi recipe, whose move table is the step's largest
        from manaka.shogi import recipe

        cfg, moves = recipe.model_config(), recipe.RECIPE["moves"]
        settings = {**recipe.trainer_settings(), "schedule": "constant"}
        settings.pop("move_update")
    elif args.small:
        from .step_cuda import SMALL

        cfg = mk.ModelConfig(**SMALL)
    else:
        cfg = mk.ModelConfig(**SEED)
    if args.records:
        batches = pair_update.record_batches(args.records, args.batch, args.pair_batches, moves=moves)
        source = f"records {args.records}"
    else:
        batches = [seed_batch(cfg, args.batch, args.max_legal, seed=i) for i in range(args.pair_batches)]
        source = "seed batches (uniform random tokens)"
    state = mk.Model(cfg, seed=0).state_dict()
    name = "shogi recipe" if table == "move" else "small test" if args.small else "seed"
    lines = [f"{name} configuration: {cfg}",
             f"B={args.batch} device={args.device} threads={mk.get_num_threads()} batches: {source}",
             f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", ""]
    more, results = pair_update.compare(cfg, state, batches, modes, args.runs, args.warmup, args.device,
                                        table, settings)
    lines += more
    results.update({"config": cfg.to_dict(), "batch": args.batch, "device": args.device,
                    "threads": mk.get_num_threads(),
                    "source": source, "load_average_at_start": load})
    note_resources(lines, results, "other processes inflate every time above")
    print("\n".join(lines))
    if not args.no_write:
        print("wrote", write_results(f"step-{table}-update", args.tag, results, lines, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
