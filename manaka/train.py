"""``python -m manaka.train``: train a policy/value network (docs/design.md §1) on a dataset.

With no arguments it trains on built-in synthetic data (positions at the seed shapes,
labelled by a fixed random teacher network, see manaka.synthetic) for one epoch of at most
a minute, on the GPU if one is usable and the CPU otherwise, and ends with a summary:
throughput, the data-wait share, and held-out loss and accuracy against the teacher's own
ceiling.

Examples:
    python -m manaka.train                                   # a one-minute demonstration
    python -m manaka.train --steps 2000 --checkpoint run.ckpt
    python -m manaka.train --steps 4000 --checkpoint run.ckpt --resume    # continue exactly
    python -m manaka.train --data my_dataset/ --epochs 3 --preset seed --device cuda
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import manaka as mk

from .fit import format_duration
from .synthetic import SEED_SHAPES

# Model shapes besides the vocabularies (which come from the data). "small" learns visibly
# within a minute on a laptop CPU; "seed" is the seed configuration of docs/design.md §5.
PRESETS = {
    "small": dict(embed_dim=32, orders=4, pair_dim=4, hidden=(128,), head_width=64, batch_size=512, lr=5e-3),
    "seed": dict(embed_dim=256, orders=4, pair_dim=16, hidden=(512, 512), head_width=300, batch_size=1024, lr=1e-3),
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m manaka.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("data")
    g.add_argument("--data", metavar="PATH", help="a dataset folder (docs/design.md §4), or shogi records by suffix: "
                   "'games/*.hcpe' (dlshogi HCPE), '*.bin' / '*.psv' (YaneuraOu PSV), a file, glob or folder "
                   "(docs/shogi.md); default: synthetic data")
    g.add_argument("--eval-data", metavar="PATH", help="held-out data evaluated while training, every --eval-every "
                   "steps and at the end (the same kinds as --data)")
    g.add_argument("--eval-every", type=int, metavar="STEPS",
                   help="evaluate the held-out data every this many steps (default: about 10 times per run, at a "
                        "multiple of --log-every; 0: only at the end)")
    g.add_argument("--synthetic", type=int, default=600_000, metavar="N",
                   help="positions of synthetic training data when --data is not given (default 600000)")
    g.add_argument("--eval-positions", type=int, default=4096, metavar="N",
                   help="held-out synthetic positions (same teacher, other seed) evaluated at the end (default 4096)")
    g = p.add_argument_group("run length (default: one epoch, at most one minute)")
    g.add_argument("--steps", type=int, help="optimizer steps in total (counted from the start when resuming)")
    g.add_argument("--epochs", type=float, help="or epochs over the data (may be fractional)")
    g.add_argument("--time-limit", type=float, metavar="SECONDS",
                   help="stop after this many seconds (default 60 when neither --steps nor --epochs is given)")
    # One pass: positions seen twice let the pair table memorise them, and the held-out
    # accuracy (what the summary reports) then falls while the training accuracy soars.
    g = p.add_argument_group("training")
    g.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="auto: the GPU when the CUDA backend is built and usable, else the CPU")
    g.add_argument("--batch-size", type=int, help="positions per step (default: the preset's: 512 small, 1024 seed)")
    g.add_argument("--lr", type=float, help="peak learning rate (default: the preset's: 5e-3 small, 1e-3 seed)")
    g.add_argument("--warmup", type=int, default=20, metavar="STEPS", help="linear warm-up steps (default 20)")
    g.add_argument("--schedule", choices=["constant", "cosine"], default="constant",
                   help="after warm-up: constant, or cosine to 0 at the last step")
    g.add_argument("--weight-decay", type=float, default=0.01, help="AdamW weight decay (default 0.01)")
    g.add_argument("--pair-update", choices=["dense", "sparse", "lazy"], default="dense",
                   help="which pair-table rows a step updates: every row (dense, default), or only the rows "
                        "the batch names (sparse, lazy; see manaka.Trainer)")
    g.add_argument("--producers", type=int, default=4, help="C threads packing batches (default 4)")
    g.add_argument("--prefetch", type=int, default=8, help="batches packed ahead of the trainer (default 8)")
    g.add_argument("--threads", type=int, help="CPU threads of the model's ops (default: all cores)")
    g.add_argument("--seed", type=int, default=0, help="model initialisation, data order and synthetic data (default 0)")
    g = p.add_argument_group("model (default: --preset small on the CPU, seed on the GPU)")
    g.add_argument("--preset", choices=sorted(PRESETS), help="small: learns within a minute on a CPU; "
                   "seed: the seed configuration of docs/design.md §5")
    g.add_argument("--embed-dim", type=int, help="D, the embedding width")
    g.add_argument("--orders", type=int, help="K, power orders")
    g.add_argument("--pair-dim", type=int, help="P, the pair-table width")
    g.add_argument("--hidden", help="trunk widths, comma-separated (e.g. 512,512)")
    g.add_argument("--head-width", type=int, help="W, the policy head width")
    g = p.add_argument_group("logging and checkpoints")
    g.add_argument("--log-every", type=int, default=25, help="log line every this many steps (default 25)")
    g.add_argument("--checkpoint", metavar="PATH", help="checkpoint file (model, optimizer, schedule, data position)")
    g.add_argument("--checkpoint-every", type=int, metavar="STEPS", help="also checkpoint every this many steps")
    g.add_argument("--resume", action="store_true", help="continue from --checkpoint if it exists")
    g.add_argument("--save", metavar="PATH", help="save the trained model (mk.Model.load reads it)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar (log lines only)")
    return p


def model_config(args, preset: dict, data: "mk.Dataset") -> "mk.ModelConfig":
    pick = lambda name: getattr(args, name) if getattr(args, name) is not None else preset[name]
    hidden = preset["hidden"] if args.hidden is None else tuple(int(h) for h in args.hidden.split(",") if h.strip())
    cfg = mk.ModelConfig(num_tokens=data.num_tokens, num_moves=data.num_moves, tokens_per_side=data.tokens_per_side,
                         embed_dim=pick("embed_dim"), orders=pick("orders"), pair_dim=pick("pair_dim"),
                         hidden=hidden, head_width=pick("head_width"))
    check_fits_in_memory(cfg, data)
    return cfg


def check_fits_in_memory(cfg: "mk.ModelConfig", data: "mk.Dataset") -> None:
    """Refuses, before allocating, a model sized (by the data's meta.json and the options)
    beyond this machine's memory: parameters, gradients and two AdamW moments, float32."""
    from .model import expected_shapes

    params = 0
    for shape in expected_shapes(cfg).values():
        n = 1
        for d in shape:
            n *= d
        params += n
    need = 16 * params
    try:
        have = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not POSIX: let the allocation decide
        return
    if need > have:
        where = os.path.join(data.path, "meta.json") if data.path else "the data"
        raise ValueError(f"the model sized by {where} (num_tokens={cfg.num_tokens}, num_moves={cfg.num_moves}, "
                         f"T={cfg.tokens_per_side}) and the options has {params:,} parameters and needs about "
                         f"{need / 2**30:,.1f} GiB for training, more than this machine's {have / 2**30:,.1f} GiB")


def choose_device(requested: str) -> str:
    """`requested`, or for "auto" the GPU when a model can train there (the CUDA backend, a
    device and cuBLAS), else the CPU with one line saying why."""
    if requested != "auto":
        return requested
    reason = mk.cuda.why_cannot_train()
    if reason:
        print(f"device: cpu (--device auto: the GPU cannot train here: {reason})")
        return "cpu"
    return "cuda"


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.resume and not args.checkpoint:
        print("python -m manaka.train: --resume needs --checkpoint", file=sys.stderr)
        return 2
    if args.eval_every is not None and args.eval_every < 0:
        print(f"python -m manaka.train: --eval-every must be >= 0, got {args.eval_every}", file=sys.stderr)
        return 2
    device = choose_device(args.device)
    preset = PRESETS[args.preset or ("seed" if device == "cuda" else "small")]
    if args.threads:
        mk.set_num_threads(args.threads)
    time_limit, epochs = args.time_limit, args.epochs
    if args.steps is None and epochs is None:
        epochs = 1.0
        if time_limit is None:
            time_limit = 60.0

    try:  # a bad dataset, device or option is a one-line error, not a traceback
        t0 = time.perf_counter()
        held_out = None
        if args.data:
            data = open_data(args.data)
            if args.eval_data:
                held_out = open_data(args.eval_data)
        else:
            # Vocabularies and shapes of the seed configuration; orders as the model's.
            shape = mk.ModelConfig(**{**SEED_SHAPES, "orders": args.orders or preset["orders"]})
            data = mk.Dataset.synthetic(args.synthetic, shape, seed=args.seed)
            if args.eval_positions > 0:
                held_out = mk.Dataset.synthetic(args.eval_positions, shape, seed=args.seed + 1_000_003)
        cfg = model_config(args, preset, data)
        print(f"data: {data}  ({format_duration(time.perf_counter() - t0)} to prepare)")
        model = mk.Model(cfg, device=device, seed=args.seed)
        print(f"model: {device}, {model.num_parameters():,} parameters, {cfg}")

        batch_size = args.batch_size or preset["batch_size"]
        loader = mk.Loader(data, batch_size=batch_size, producers=args.producers, prefetch=args.prefetch,
                           shuffle=True, seed=args.seed)
        total = args.steps if args.steps is not None else int(round(epochs * len(loader)))
        trainer = mk.Trainer(model, lr=args.lr or preset["lr"], weight_decay=args.weight_decay,
                             warmup_steps=args.warmup, schedule=args.schedule, total_steps=total,
                             pair_update=args.pair_update)
        print(f"training: batch {batch_size}, {loader.producers} producers, {trainer!r}")
        eval_every = None if held_out is None else held_out_every(args, total)
        if held_out is not None:
            print(f"held-out: {len(held_out):,} positions, evaluated "
                  + (f"every {eval_every} steps and " if eval_every else "") + "at the end")
    except (ValueError, TypeError, RuntimeError, OSError, MemoryError, OverflowError) as e:
        # MemoryError: a size the machine cannot allocate (e.g. --batch-size 2**40)
        print(f"python -m manaka.train: {e}", file=sys.stderr)
        return 2
    try:  # a checkpoint of another run, a damaged one, an unwritable path, a bad shogi record: one line
        history = mk.fit(model, loader, steps=args.steps, epochs=epochs, trainer=trainer,
                         log_every=args.log_every, checkpoint=args.checkpoint,
                         checkpoint_every=args.checkpoint_every, resume=args.resume,
                         progress=not args.no_progress, time_limit=time_limit,
                         eval_data=held_out, eval_every=eval_every, eval_batch_size=batch_size)
        summary(history, loader, data, held_out, model, batch_size)
        if args.save:
            model.save(args.save)
            print(f"saved the model to {args.save}")
    except (mk.FileFormatError, OSError) as e:
        print(f"python -m manaka.train: {e}", file=sys.stderr)
        return 2
    except ValueError as e:  # shogi records are decoded while training
        if not str(e).startswith("shogi:"):
            raise
        print(f"python -m manaka.train: {e}", file=sys.stderr)
        return 2
    return 0


def held_out_every(args, total: int):
    """--eval-every, or by default about 10 evaluations over the run's `total` steps, each on a
    logging step (a multiple of --log-every); None: only at the end."""
    if args.eval_every is not None:
        return args.eval_every or None
    return args.log_every * max(1, -(-total // (10 * args.log_every)))


def open_data(path: str):
    """A dataset folder, or shogi records chosen by suffix (a file, glob or folder): *.hcpe
    (dlshogi HCPE) or *.bin / *.psv (YaneuraOu PackedSfenValue), see docs/shogi.md."""
    from . import shogi

    if path.endswith(".hcpe") or (os.path.isdir(path) and _holds(path, (".hcpe",))):
        return shogi.open_hcpe(path)
    if path.endswith((".bin", ".psv")) or (os.path.isdir(path) and _holds(path, (".bin", ".psv"))):
        return shogi.open_psv(path)
    return mk.Dataset.open(path)


def _holds(folder: str, suffixes) -> bool:
    """A folder of records, and not a dataset folder (which has meta.json)."""
    names = os.listdir(folder)
    return "meta.json" not in names and any(n.endswith(suffixes) for n in names)


def summary(history, loader, data, held_out, model, batch_size) -> None:
    if not history.records:
        print("no step was run (the checkpoint was already at the end)")
        return
    last = history.last
    rates = history["positions_per_s"]
    waits = history["wait_share"]
    steady = slice(1, None) if len(history) > 1 else slice(None)  # the first interval includes start-up
    print(f"\ndone: step {last['step']}, epoch {last['epoch']:.2f}, {format_duration(last['elapsed'])} | "
          f"{rates[steady].mean():,.0f} positions/s | data wait {100 * waits[steady].mean():.2f}% of wall time")
    print(f"last training batch: loss {last['loss']:.4f}, accuracy {last['accuracy']:.3f}")
    meta = (held_out or data).meta
    if held_out is not None:
        # fit evaluated the held-out data at the last step: its figures, not a second pass
        # (unless that step's record comes from a checkpoint of a run without held-out data)
        if "eval_loss" in last:
            r = {k: last[f"eval_{k}"] for k in ("loss", "policy_loss", "value_loss", "accuracy", "positions")}
        else:
            r = mk.evaluate(model, held_out, batch_size=batch_size)
        print(f"held-out ({int(r['positions']):,} positions): loss {r['loss']:.4f} (policy {r['policy_loss']:.4f}, "
              f"value {r['value_loss']:.4f}), accuracy {r['accuracy']:.3f}")
    if "teacher_accuracy_ceiling" in meta:
        print(f"teacher's ceiling: accuracy {meta['teacher_accuracy_ceiling']:.3f}, policy loss floor "
              f"{meta['teacher_policy_loss_floor']:.4f}, value loss floor {meta['teacher_value_loss_floor']:.4f}; "
              f"chance accuracy {meta['chance_accuracy']:.3f}")


if __name__ == "__main__":
    sys.exit(main())
