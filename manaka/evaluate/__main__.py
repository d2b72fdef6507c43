"""``python -m manaka.evaluate MODEL DATA``: a model's figures on a dataset, beside the chance
and frequency baselines.

Prints loss, policy loss, top-1 and top-5 accuracy, value BCE and value accuracy (on the
decisive positions: value target not 0.5) of MODEL over every position of DATA, and the
same figures for a uniformly random legal move (value: the constant 0.5, BCE 0.693) and
for the most frequent move among the legal ones (value: the mean value target), see
manaka/evaluate/baseline_figures.py. The move frequencies are counted on DATA itself unless
--train gives the training data (counted on DATA, the frequency baseline has seen the
answers: an optimistic bound).

Examples:
    python -m manaka.evaluate model.manaka held_out.hcpe
    python -m manaka.evaluate model.manaka 'games/*.hcpe' --train train.hcpe --value eval
    python -m manaka.evaluate model.manaka my_dataset/ --json
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

from ..errors import FileFormatError
from ..model import Model
from ..shogi.eval_scale import EVAL_SCALE
from . import baselines, evaluate, label_frequencies

PROG = "python -m manaka.evaluate"


def value_option(text: str):
    """--value: "result", "eval" or a mixing weight in [0, 1] (manaka.shogi.open_hcpe's value=)."""
    if text in ("result", "eval"):
        return text
    try:
        weight = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected result, eval or a number in [0, 1], got {text!r}") from None
    if not 0.0 <= weight <= 1.0:
        raise argparse.ArgumentTypeError(f"a mixing weight must be in [0, 1], got {text}")
    return weight


def positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def parser() -> argparse.ArgumentParser:
    from ..train import eval_scale_option, path_option

    p = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", metavar="MODEL", help="a model file (mk.Model.save, python -m manaka.train --save)")
    p.add_argument("data", metavar="DATA", help="a dataset folder (docs/design.md §4), or shogi records: "
                   "'games/*.hcpe' (dlshogi HCPE), '*.bin' / '*.psv' (YaneuraOu PSV), a file, glob or folder")
    p.add_argument("--train", type=path_option, metavar="DATA",
                   help="count the frequency baseline's moves on this data (the training data) instead of on DATA "
                        "itself")
    p.add_argument("--value", type=value_option, default="result", metavar="result|eval|λ",
                   help="value target of shogi records: the game result (default), the engine eval "
                        "(sigmoid(eval / S), S from --eval-scale), or the mix (1 - λ) result + λ eval")
    p.add_argument("--eval-scale", type=eval_scale_option, default=EVAL_SCALE, metavar="S|fit",
                   help="s in the engine eval's win probability sigmoid(eval / s): a number (default 756, "
                        "dlshogi's) or fit, the s that best predicts the results of --train's records (of DATA's "
                        "without --train)")
    p.add_argument("--on-bad", choices=["raise", "skip"], default="raise",
                   help="a bad shogi record: stop with an error naming it (default), or leave it out")
    p.add_argument("--batch-size", type=positive, default=1024, help="positions per forward pass (default 1024)")
    p.add_argument("--value-weight", type=float, default=1.0,
                   help="weight of the value loss in the loss column, as in training (default 1)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where the model runs (default cpu)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table: model, chance, "
                   "frequency (each mk.evaluate's keys; null for a value accuracy without decisive positions), "
                   "model_file, data_path, frequencies_from, frequency_positions")
    return p


def open_data(path: str, option: str, value, on_bad: str, model=None, model_path: str = "MODEL", eval_scale=EVAL_SCALE):
    """What ``python -m manaka.train --data`` reads (its data_kind and open_data: a dataset
    folder, or shogi records chosen by suffix, a file, glob or folder); `value`, `on_bad`
    and `eval_scale` apply to records, which are labelled in the move encoding `model`
    reads (a model that reads no shogi positions is refused, naming `model_path`)."""
    from ..shogi.position import model_encoding
    from ..train import data_kind, open_data as open_train_data

    kind = data_kind(path, option)
    if kind == "data":
        if value != "result":
            raise ValueError(f"--value {value} applies to shogi records; the dataset folder {path} holds its own values")
        return open_train_data(path, kind)
    moves = model_encoding(model, f"MODEL {model_path} beside the shogi records {option} {path}")
    return open_train_data(path, kind, value=value, on_bad=on_bad, moves=moves, eval_scale=eval_scale)


ROWS = (("model", "model"), ("chance", "chance (uniform)"), ("frequency", "frequency"))
COLUMNS = (("loss", "loss", "{:.4f}"), ("policy_loss", "policy", "{:.4f}"), ("accuracy", "top-1", "{:.2%}"),
           ("top5_accuracy", "top-5", "{:.2%}"), ("value_loss", "value BCE", "{:.4f}"),
           ("value_accuracy", "value acc", "{:.2%}"))


def table(figures) -> str:
    head = f"{'':18}" + "".join(f"{title:>11}" for _, title, _ in COLUMNS)
    lines = [head]
    for key, name in ROWS:
        cells = []
        for column, _, fmt in COLUMNS:
            x = figures[key][column]
            cells.append(f"{'-' if x != x else fmt.format(x):>11}")
        lines.append(f"{name:18}" + "".join(cells))
    return "\n".join(lines)


def _shared_files(a, b) -> bool:
    from ..fit import _data_files

    real = lambda d: {os.path.realpath(f) for f in _data_files(d)}
    return bool(real(a) & real(b))


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        start = time.perf_counter()
        model = Model.load(args.model, device=args.device)
        train = (open_data(args.train, "--train", args.value, args.on_bad, model, args.model, args.eval_scale)
                 if args.train else None)
        scale = getattr(train, "eval_scale", None)  # a fit on --train is DATA's scale too
        data = open_data(args.data, "DATA", args.value, args.on_bad, model, args.model,
                         args.eval_scale if scale is None else scale)
        result = evaluate(model, data, batch_size=args.batch_size, value_weight=args.value_weight)
        counted = label_frequencies(train if train is not None else data, batch_size=args.batch_size)
        figures = {"model": result, **baselines(data, counted, batch_size=args.batch_size,
                                                value_weight=args.value_weight)}
    except (FileFormatError, ValueError, TypeError, OSError, RuntimeError, MemoryError) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; nothing was evaluated", file=sys.stderr)
        return 130
    where = "DATA itself (it has seen the answers: an optimistic bound)" if train is None else f"--train {args.train}"
    if train is not None and _shared_files(train, data):  # a --train glob that takes in DATA: as optimistic
        where += " (it shares files with DATA, whose answers it has seen: an optimistic bound)"
    if args.json:
        clean = {k: {m: (None if isinstance(x, float) and math.isnan(x) else x) for m, x in v.items()}
                 for k, v in figures.items()}
        print(json.dumps({"model_file": args.model, "data_path": args.data, "frequencies_from": "data" if train is None
                          else args.train, "frequency_positions": counted.positions, **clean}))
        return 0
    print(f"model: {args.model} ({model.num_parameters():,} parameters)")
    print(f"data: {data!r}")
    print(f"{result['positions']:,} positions, {result['decisive']:,} decisive (value target not 0.5; value "
          f"accuracy is over these), {time.perf_counter() - start:.1f}s\n")
    print(table(figures))
    print(f"\nchance: a uniform pick among the legal moves; value: the constant 0.5 (BCE ln 2), a random side")
    print(f"frequency: the legal move played most often in {counted.positions:,} positions of {where}; "
          f"value: their mean target, {counted.value_mean:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
