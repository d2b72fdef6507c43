"""``python -m manaka.train``: train a policy/value network (docs/design.md §1) on a dataset.

With no arguments it trains on built-in synthetic data (positions at the seed shapes,
labelled by a fixed random teacher network, see manaka.synthetic) for one epoch of at most
a minute, on the GPU if one is usable and the CPU otherwise, and ends with a summary:
throughput (positions over training time, evaluations excluded), the data-wait share, and
held-out loss and accuracy against the teacher's own ceiling; with --data and --eval-data,
against the chance and frequency baselines (manaka/evaluate/baseline_figures.py).

The trained model is saved to --save, or next to --checkpoint (run.ckpt -> run.manaka), or
to model.manaka here; an existing file is never replaced unless named by --save (a free name
is picked instead: run-1.manaka). An existing checkpoint is continued with --resume, or
replaced only with --force. --save and --checkpoint must differ, neither may be a file of
--data or --eval-data, and each must be writable (refused before anything is read). Ctrl-C saves the checkpoint at
the last finished step.

Examples:
    python -m manaka.train                                   # a one-minute demonstration
    python -m manaka.train --steps 2000 --checkpoint run.ckpt
    python -m manaka.train --steps 4000 --checkpoint run.ckpt --resume    # continue exactly
    python -m manaka.train --data my_dataset/ --epochs 3 --preset seed --device cuda
    python -m manaka.train --data 'games/*.hcpe' --eval-data held_out.hcpe --value 0.5 --time-limit 3600
    python -m manaka.train --data 'games/*.hcpe' --nproc 4 --steps 10000 --checkpoint run.ckpt   # 4 processes
"""
from __future__ import annotations

import argparse
import glob
import math
import os
import signal
import sys
import time

import manaka as mk

from . import interrupt
from .atomic_file import unwritable
from .distributed_trainer import ExchangeFailed
from .fit import format_duration
from .shogi.eval_scale import EVAL_SCALE
from .shogi.position import MOVE_ENCODINGS
from .synthetic import SEED_SHAPES

# Model shapes besides the vocabularies (which come from the data). "small" learns visibly
# within a minute on a laptop CPU; "seed" is the seed configuration of docs/design.md §5.
PRESETS = {
    "small": dict(embed_dim=32, orders=4, pair_dim=4, hidden=(128,), head_width=64, move_pairs=0,
                  move_pair_board=(0, 0, 0), move_hidden=0, move_shared=0, move_hidden_gate=0, value_hidden=0,
                  value_power_sums=0, batch_size=512, lr=5e-3),
    "seed": dict(embed_dim=256, orders=4, pair_dim=16, hidden=(512, 512), head_width=300, move_pairs=0,
                 move_pair_board=(0, 0, 0), move_hidden=0, move_shared=0, move_hidden_gate=0, value_hidden=0,
                 value_power_sums=0, batch_size=1024, lr=1e-3),
}

# Training defaults by kind of data, stated once: shogi records (HCPE, PSV) have their own
# recipe (manaka/shogi/recipe.py, measured on held-out engine games), which the options
# override one by one. value, on_bad and mirror are the records' own (manaka.shogi.open_hcpe
# / open_psv; the mirror only for the training data).
def _shogi_recipe() -> dict:
    from .shogi.recipe import RECIPE

    return dict(weight_decay=RECIPE["weight_decay"], warmup=RECIPE["warmup"], schedule=RECIPE["schedule"],
                eps=RECIPE["eps"], value=RECIPE["value"], eval_scale=RECIPE["eval_scale"], on_bad="raise",
                mirror=RECIPE["mirror"],
                keep_best=RECIPE["keep_best"], moves=RECIPE["moves"], pair_update=RECIPE["pair_update"],
                move_update=RECIPE["move_update"])


RECIPES = {
    "data": dict(weight_decay=0.01, warmup=20, schedule="constant", eps=1e-8, keep_best=False, pair_update="dense",
             move_update="dense"),
    "shogi": _shogi_recipe(),
}
# What --data and --eval-data accept, for the messages that refuse anything else.
ACCEPTED = ("a dataset folder with meta.json (docs/design.md §4), dlshogi HCPE files (.hcpe), YaneuraOu PSV "
            "files (.bin, .psv), dlshogi hcpe3 games (.hcpe3), or a folder or glob of those")
CONVERT = "python -m manaka.shogi convert games.hcpe"  # CSA / KIF game records -> HCPE
GAME_RECORDS = (".csa", ".kif", ".kifu")


def _positive(kind):
    """A parser of numbers > 0; a float must also be finite (an infinite --epochs, --time-limit
    or --lr is no run length or rate)."""
    def parse(text: str):
        try:
            x = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {kind.__name__}, got {text!r}") from None
        if not x > 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        if kind is float and not math.isfinite(x):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
        return x
    return parse


def _non_negative_int(text: str) -> int:
    try:
        x = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an int, got {text!r}") from None
    if x < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return x


MAX_SEED = 2**62  # what the Loader (< 2**63) and the held-out data's seed + 1,000,003 take


def _seed(text: str) -> int:
    x = _non_negative_int(text)
    if x > MAX_SEED:  # else refused later as the Loader's seed, naming no option
        raise argparse.ArgumentTypeError(f"must be <= 2**62, got {text}")
    return x


def _value(text: str):
    """--value: result, eval, or a mixing weight in [0, 1]."""
    if text in ("result", "eval"):
        return text
    try:
        x = float(text)
    except ValueError:
        x = -1.0
    if not 0.0 <= x <= 1.0:
        raise argparse.ArgumentTypeError(f"expected result, eval or a weight in [0, 1], got {text!r}")
    return x


class _Once(argparse.Action):
    """An option that may be given once: a second --data was taken for the first without a
    word (last wins), where the user meant both files."""

    def __call__(self, parser, namespace, value, option_string=None):
        if getattr(namespace, self.dest) is not None:
            parser.error(f"argument {option_string}: given twice ({getattr(namespace, self.dest)} and {value}); "
                         "name several files with one glob or folder")
        setattr(namespace, self.dest, value)


def path_option(text: str) -> str:
    """A path option (here, in manaka.evaluate and in the match's --json): never empty. An
    unset shell variable (--data "$DATA") gave "", which read as the option not given: the
    run trained on synthetic data, or kept no checkpoint, without a word."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path (an unset shell variable?)")
    return text


def eval_scale_option(text: str):
    """--eval-scale (here and in manaka.evaluate): fit, or a positive number
    (shogi.eval_scale.check_eval_scale's rule)."""
    from .shogi.eval_scale import check_eval_scale

    try:
        return check_eval_scale("fit" if text == "fit" else float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected fit or a positive number, got {text!r}") from None


def _default(name: str) -> str:
    """The help text's default of a recipe option, per kind of data."""
    s = RECIPES["shogi"][name]
    if name not in RECIPES["data"]:
        return f"default {s}"
    d = RECIPES["data"][name]
    return f"default {d}" if d == s else f"default {d}; shogi records: {s}"


def _by_preset(name: str) -> str:
    """A preset setting's value in each preset, for the help ("512 small, 1024 seed, 512 shogi")."""
    return ", ".join(f"{PRESETS[p][name]:g} {p}" for p in ("small", "seed", "shogi"))


def _shogi_preset() -> dict:
    """"shogi": the shogi recipe's shapes, batch size and learning rate (its other settings
    are RECIPES["shogi"]), the default preset for record data."""
    from .shogi.recipe import RECIPE

    return {"move_pair_board": (RECIPE["board_width"], RECIPE["board_height"], RECIPE["board_kinds"]),
            **{k: RECIPE[k] for k in ("embed_dim", "orders", "pair_dim", "hidden", "head_width", "move_pairs",
                                      "move_hidden", "move_shared", "move_hidden_gate", "value_hidden",
                                      "value_power_sums", "batch_size", "lr")}}


PRESETS["shogi"] = _shogi_preset()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m manaka.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("data")
    g.add_argument("--data", type=path_option, action=_Once, metavar="PATH",
                   help="a dataset folder with meta.json (docs/design.md §4), or shogi records by suffix: "
                        "'games/*.hcpe' (dlshogi HCPE), '*.bin' / '*.psv' (YaneuraOu PSV), a file, glob or folder "
                        "(docs/shogi.md; CSA / KIF game records: convert them first with "
                        f"'{CONVERT} kifu/'); default: synthetic data")
    g.add_argument("--eval-data", type=path_option, action=_Once, metavar="PATH",
                   help="held-out data evaluated while training, every --eval-every steps and at the end (the same "
                        "kinds as --data)")
    g.add_argument("--value", type=_value, metavar="result|eval|λ",
                   help="shogi records: the value target: the game result, the evaluation (sigmoid(eval/s), s from "
                        "--eval-scale) or "
                        f"the mix (1-λ)·result + λ·eval ({_default('value')})")
    g.add_argument("--eval-scale", type=eval_scale_option, metavar="S|fit",
                   help="shogi records: s in the evaluation's win probability sigmoid(eval/s): a number (dlshogi's "
                        "756) or fit, the s that best predicts the training records' own results, also used for "
                        f"--eval-data ({_default('eval_scale')})")
    g.add_argument("--moves", choices=sorted(MOVE_ENCODINGS), metavar="ENCODING",
                   help="shogi records: the move label encoding: dlshogi, or one whose labels also say what a move "
                        "captures (capture), and whether its destination is defended (capture-defended), whether "
                        "it checks (capture-defended-check), whether it moves an attacked piece "
                        "(capture-defended-check-escape), which piece moves (capture-defended-check-escape-mover) "
                        "and whether another of ours attacks the destination "
                        f"(capture-defended-check-escape-mover-supported) ({_default('moves')}; docs/shogi.md)")
    g.add_argument("--on-bad", choices=["raise", "skip"],
                   help="shogi records: a bad record stops the run naming it (raise), or is left out (skip) "
                        f"({_default('on_bad')})")
    g.add_argument("--eval-every", type=_non_negative_int, metavar="STEPS",
                   help="evaluate the held-out data every this many steps (default: about 10 times per run, at a "
                        "multiple of --log-every, or with --time-limit alone about every tenth of it; 0: only "
                        "at the end)")
    g.add_argument("--synthetic", type=_positive(int), default=600_000, metavar="N",
                   help="positions of synthetic training data when --data is not given (default 600000)")
    g.add_argument("--eval-positions", type=_non_negative_int, default=4096, metavar="N",
                   help="held-out synthetic positions (same teacher, other seed) evaluated every --eval-every steps "
                        "and at the end (default 4096)")
    g = p.add_argument_group("run length (default: one epoch, at most one minute)")
    length = g.add_mutually_exclusive_group()  # both: --epochs was ignored without a word
    length.add_argument("--steps", type=_non_negative_int, help="optimizer steps in total (counted from the start "
                        "when resuming)")
    length.add_argument("--epochs", type=_positive(float), help="or epochs over the data (may be fractional)")
    g.add_argument("--time-limit", type=_positive(float), metavar="SECONDS",
                   help="stop after this many seconds (default 60 when neither --steps nor --epochs is given); "
                        "alone, the run lasts until then, over as many epochs as fit")
    # One pass: positions seen twice let the pair table memorise them, and the held-out
    # accuracy (what the summary reports) then falls while the training accuracy soars.
    g = p.add_argument_group("training")
    g.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="auto: the GPU when the CUDA backend is built and usable, else the CPU")
    g.add_argument("--batch-size", type=_positive(int),
                   help="positions per step, per process with --nproc (default: the preset's: "
                        f"{_by_preset('batch_size')})")
    g.add_argument("--lr", type=_positive(float), help=f"peak learning rate (default: the preset's: {_by_preset('lr')})")
    g.add_argument("--warmup", type=_non_negative_int, metavar="STEPS",
                   help=f"linear warm-up steps ({_default('warmup')})")
    g.add_argument("--schedule", choices=["constant", "cosine"],
                   help=f"after warm-up: constant, or cosine to 0 at the last step ({_default('schedule')})")
    g.add_argument("--weight-decay", type=float, help=f"AdamW weight decay ({_default('weight_decay')})")
    g.add_argument("--pair-update", choices=["dense", "sparse", "lazy"],
                   help="which pair-table rows a step updates: every row (dense), or only the rows the batch "
                        f"names (sparse, lazy; see manaka.Trainer) ({_default('pair_update')})")
    g.add_argument("--move-update", choices=["dense", "sparse", "lazy"],
                   help="which move-table rows a step updates: every row (dense), or only the labels of the "
                        f"batch's legal moves (sparse, lazy; see manaka.Trainer) ({_default('move_update')})")
    g.add_argument("--producers", type=_positive(int), default=4, help="C threads packing batches (default 4)")
    g.add_argument("--prefetch", type=_positive(int), default=8, help="batches packed ahead of the trainer (default 8)")
    g.add_argument("--threads", type=_positive(int), help="CPU threads of the model's ops (default: all cores)")
    g.add_argument("--seed", type=_seed, default=0,
                   help="model initialisation, data order and synthetic data (default 0)")
    g = p.add_argument_group("model (default: --preset shogi for shogi records, else small on the CPU, seed on the GPU)")
    g.add_argument("--preset", choices=sorted(PRESETS), help="small: learns within a minute on a CPU; "
                   "seed: the seed configuration of docs/design.md §5; shogi: the recipe measured on held-out "
                   "engine games (docs/shogi.md)")
    g.add_argument("--embed-dim", type=int, help="D, the embedding width")
    g.add_argument("--orders", type=int, help="K, power orders")
    g.add_argument("--pair-dim", type=int, help="P, the pair-table width")
    g.add_argument("--hidden", help="trunk widths, comma-separated (e.g. 512,512)")
    g.add_argument("--head-width", type=int, help="W, the policy head width")
    g.add_argument("--move-pairs", type=int, metavar="C", help="move classes of the move-pair table (a scalar per "
                   "token of the side to move and move class, added to the move's logit; 0: none, and no "
                   "relative part)")
    g.add_argument("--move-pair-board", metavar="W,H,K", help="the move-pair table's relative part: a board of W x H "
                   "squares and K kinds of board token (ModelConfig.board_width, board_height, board_kinds); "
                   "0,0,0: none")
    g.add_argument("--move-hidden", type=int, metavar="D", help="MoveHidden's units: a hidden layer per legal move "
                   "over the relative part's keys (needs --move-pair-board; 0: none)")
    g.add_argument("--move-shared", type=int, choices=[0, 1], metavar="0|1", help="1: the shared move embeddings, "
                   "rows shared by every move of a class and of a group added to the move table's (needs "
                   "--move-pairs; 0: none)")
    g.add_argument("--move-hidden-gate", type=int, choices=[0, 1], metavar="0|1", help="1: MoveHidden's units read "
                   "with a vector of the position (move_hidden_out + q move_hidden_gate) instead of one for all "
                   "positions (needs --move-hidden; 0: none)")
    g.add_argument("--value-hidden", type=int, metavar="Hv", help="units of a hidden layer in the value head "
                   "(0: the value logit is linear in the trunk's output)")
    g.add_argument("--value-power-sums", type=int, choices=[0, 1], metavar="0|1", help="1: the value head's hidden "
                   "layer reads the power sums (the features without the pair sums) instead of the trunk, so the "
                   "value never sees the pair table (needs --value-hidden; 0: the trunk)")
    g = p.add_argument_group("logging, checkpoints and the model file")
    g.add_argument("--log-every", type=_positive(int), default=25, help="log line every this many steps (default 25)")
    g.add_argument("--checkpoint", type=path_option, metavar="PATH",
                   help="checkpoint file (model, optimizer, schedule, data position), written at the end, every "
                        "--checkpoint-every steps and on Ctrl-C; an existing one is continued with --resume or "
                        "replaced with --force, never silently")
    g.add_argument("--checkpoint-every", type=_positive(int), metavar="STEPS", help="also checkpoint every this many "
                   "steps")
    g.add_argument("--resume", action="store_true", help="continue from --checkpoint (a missing one: start fresh)")
    g.add_argument("--force", action="store_true", help="replace an existing --checkpoint instead of refusing")
    g.add_argument("--save", type=path_option, metavar="PATH",
                   help="save the trained model here, replacing the file (mk.Model.load reads it); default: next "
                        "to --checkpoint (run.ckpt -> run.manaka), else model.manaka, under a free name "
                        "(run-1.manaka) rather than replacing a file")
    g.add_argument("--no-save", action="store_true", help="do not save the trained model")
    g.add_argument("--no-progress", action="store_true", help="no progress bar (log lines only)")
    g = p.add_argument_group("data-parallel training (several processes; needs PyTorch)")
    g.add_argument("--nproc", type=_positive(int), default=1, metavar="N",
                   help="train with N processes on this machine, each on its own share of every step (--batch-size "
                        "positions each, so a step is N x --batch-size), exchanging gradients over torch.distributed "
                        "(gloo on the CPU, NCCL on GPUs: one GPU each); every process holds the same model after "
                        "every step, and process 0 alone logs, evaluates, and writes the checkpoint and the model "
                        "(docs/design.md §8). Default 1")
    g.add_argument("--dist-timeout", type=_positive(float), default=300.0, metavar="SECONDS",
                   help="how long a process waits for the others in an exchange before failing with an error (a "
                        "process that died or hangs); default 300")
    return p


def _hidden(text: str) -> tuple:
    """--hidden W1,W2,... as ints (empty: no trunk layer); anything else is a ValueError naming
    the option (the widths' own rules are ModelConfig's)."""
    try:
        return tuple(int(h) for h in text.split(",") if h.strip())
    except ValueError:
        raise ValueError(f"--hidden: expected comma-separated integer widths (e.g. 512,512), got {text!r}") from None


def _board(text: str) -> tuple:
    """--move-pair-board W,H,K as three ints; anything else is a ValueError naming the option
    (the fields' own rules are ModelConfig's)."""
    parts = text.split(",")
    try:
        if len(parts) != 3:
            raise ValueError
        return tuple(int(x) for x in parts)
    except ValueError:
        raise ValueError(f"--move-pair-board: expected three integers W,H,K, got {text!r}") from None


def move_kinds_of(data) -> int:
    """ModelConfig.move_kinds for data whose labels may name move kinds: shogi records say
    so, and so does a Dataset folder they made (meta "move_kinds"; a folder saved before that
    entry existed, by its meta "moves", the encoding's name). Without it, a model of a
    kinds encoding's 7.3 M labels gets a move-table row per label: 28x larger and weaker."""
    kinds = getattr(data, "move_kinds", 0)
    if not kinds and isinstance(getattr(data, "meta", None), dict):
        from .shogi.position import MOVE_KINDS
        kinds = MOVE_KINDS.get(data.meta.get("moves"), 0)
    return kinds


def model_config(args, preset: dict, data) -> "mk.ModelConfig":
    pick = lambda name: getattr(args, name) if getattr(args, name) is not None else preset[name]
    hidden = preset["hidden"] if args.hidden is None else _hidden(args.hidden)
    board = preset["move_pair_board"] if args.move_pair_board is None else _board(args.move_pair_board)
    if args.move_pair_board is None and pick("move_pairs") == 0:
        board = (0, 0, 0)  # the relative part belongs to the table: --move-pairs 0 removes both
    move_hidden = pick("move_hidden")
    if args.move_hidden is None and board[2] == 0:
        move_hidden = 0  # MoveHidden reads the relative part's keys: no board, no layer
    gate = pick("move_hidden_gate")
    if args.move_hidden_gate is None and move_hidden == 0:
        gate = 0  # the gate reads MoveHidden's units: no layer, no gate
    move_shared = pick("move_shared")
    if args.move_shared is None and (pick("move_pairs") == 0 or data.num_moves % pick("move_pairs")):
        move_shared = 0  # the shared rows are keyed by the move-pair classes
    value_power_sums = pick("value_power_sums")
    if args.value_power_sums is None and pick("value_hidden") == 0:
        value_power_sums = 0  # the preset's reads a hidden layer --value-hidden 0 removed
    cfg = mk.ModelConfig(num_tokens=data.num_tokens, num_moves=data.num_moves, tokens_per_side=data.tokens_per_side,
                         embed_dim=pick("embed_dim"), orders=pick("orders"), pair_dim=pick("pair_dim"),
                         hidden=hidden, head_width=pick("head_width"), move_pairs=pick("move_pairs"),
                         board_width=board[0], board_height=board[1], board_kinds=board[2],
                         move_hidden=move_hidden, move_shared=move_shared, move_hidden_gate=gate,
                         move_kinds=move_kinds_of(data), value_hidden=pick("value_hidden"),
                         value_power_sums=value_power_sums)
    check_fits_in_memory(cfg, data)
    return cfg


def _sized_by(data) -> str:
    """What fixed the vocabularies: a dataset folder's meta.json, or the shogi encoding."""
    if getattr(data, "path", None):
        return os.path.join(data.path, "meta.json")
    if hasattr(data, "files"):
        return "the shogi encoding (docs/shogi.md)"
    return "the data"


def check_fits_in_memory(cfg: "mk.ModelConfig", data) -> None:
    """Refuses, before allocating, a model sized (by the data and the options) beyond this
    machine's memory: parameters, gradients and two AdamW moments, float32."""
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
        raise ValueError(f"the model sized by {_sized_by(data)} (num_tokens={cfg.num_tokens}, num_moves={cfg.num_moves}, "
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


def fail(message: str) -> int:
    print(f"python -m manaka.train: {message}", file=sys.stderr)
    return 2


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.resume and not args.checkpoint:
        return fail("--resume needs --checkpoint")
    if args.save and args.no_save:
        return fail("--save and --no-save contradict each other")
    # no held-out data to evaluate: the option was ignored without a word
    if args.eval_every is not None and (args.eval_data is None if args.data else args.eval_positions == 0):
        return fail("--eval-every needs held-out data: --eval-data" + ("" if args.data else " (or --eval-positions > 0)"))
    for option, path in (("--checkpoint", args.checkpoint), ("--save", args.save)):
        if path and os.path.isdir(path):  # found now, not when the run's end writes it
            return fail(f"{option} {path} is a folder; give a file path")
    clash = _output_clash(args)
    if clash:
        return fail(clash)
    if args.checkpoint and os.path.exists(args.checkpoint) and not (args.resume or args.force):
        # a finished run must not be lost to a new one that happens to use the same name
        return fail(f"the checkpoint {args.checkpoint} exists: continue it with --resume, or replace it with --force")
    if args.nproc > 1:
        return _spawn(args)
    args.stage = "before"  # before, in or after mk.fit: what an interrupt leaves saved
    # kill PID, or a job scheduler's time limit, ends the run as Ctrl-C does: at the end of
    # the step in progress, with the checkpoint saved there (status 143 instead of 130)
    interrupt.stop_on_sigterm()
    try:
        return _train(args)
    except KeyboardInterrupt:
        if args.stage == "before":
            print("python -m manaka.train: interrupted before training; nothing was saved", file=sys.stderr)
        elif args.stage == "after":  # mk.fit wrote the checkpoint at its end
            held = f"the checkpoint {args.checkpoint} holds the last step; " if args.checkpoint else ""
            print(f"python -m manaka.train: interrupted after training; {held}the model was not saved", file=sys.stderr)
        # in mk.fit: its line has said what it saved
        return 128 + (interrupt.last_signal() or signal.SIGINT)


def _input_files(path: str) -> list:
    """The files --data / --eval-data `path` may read: the file, a glob's, a folder's record
    files or a dataset folder's arrays and meta.json."""
    if os.path.isdir(path):
        read = (".hcpe", ".hcpe3", ".bin", ".psv", ".npy", "meta.json")
        return [os.path.join(path, n) for n in os.listdir(path) if n.lower().endswith(read)]
    if os.path.exists(path):
        return [path]
    return glob.glob(path) if any(ch in path for ch in "*?[") else []


def _output_clash(args) -> str:
    """Why the files this run writes (--checkpoint, --save) cannot be the ones named, or ""
    when they can: each in a folder that is one (or can be made) and is writable, the two
    must differ (the model written at the end would replace the
    checkpoint the run just wrote, whose log line then lies), and neither may be a file
    the run reads (--data, --eval-data), whatever --force or --save say; before anything
    is read or written."""
    outputs = [(o, p) for o, p in (("--checkpoint", args.checkpoint), ("--save", args.save)) if p]
    for option, path in outputs:
        # found now, not when the run's end writes it (the trained model would be lost)
        why = unwritable(path)
        if why:
            return f"{option} {path} cannot be written: {why}"
    real = lambda p: os.path.realpath(p)
    if len(outputs) == 2 and real(outputs[0][1]) == real(outputs[1][1]):
        return (f"--checkpoint {args.checkpoint} and --save {args.save} name the same file: the model would "
                "replace the checkpoint; give --save another path")
    for option, path in outputs:
        for source, data in (("--data", args.data), ("--eval-data", args.eval_data)):
            if data and any(real(f) == real(path) for f in _input_files(data)):
                return (f"{option} {path} is a file of {source} {data}: writing it would replace the data; "
                        "give another path (nothing was written)")
    return ""


def _spawn(args) -> int:
    """--nproc N: N processes of this command (spawned, each running _rank), one
    torch.distributed group over a file rendezvous; the exit status is the first failing
    process's (one that failed makes the others fail within --dist-timeout)."""
    import multiprocessing
    import tempfile

    try:
        import torch.distributed as dist
    except ImportError:
        return fail("--nproc needs PyTorch (pip install torch): its torch.distributed exchanges the gradients")
    if not dist.is_available() or not dist.is_gloo_available():
        return fail("--nproc needs torch.distributed with gloo, which this PyTorch lacks")
    args.device = choose_device(args.device)  # once, so that every process agrees
    if args.device == "cuda":
        import torch

        have = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if have < args.nproc:
            return fail(f"--nproc {args.nproc} on --device cuda needs a GPU per process; PyTorch sees {have}")
    ctx = multiprocessing.get_context("spawn")
    args.command_pid = os.getpid()  # each process ends with it: _end_with_the_command
    with tempfile.TemporaryDirectory(prefix="manaka-train-") as tmp:
        procs = [ctx.Process(target=_rank, args=(args, r, os.path.join(tmp, "rendezvous")), name=f"rank{r}")
                 for r in range(args.nproc)]
        for p in procs:
            p.start()
        failed_at = None
        try:
            _stop_ranks_on_sigterm(procs)
            while any(p.is_alive() for p in procs):
                for p in procs:
                    p.join(0.2)
                if failed_at is None and any(p.exitcode not in (None, 0) for p in procs):
                    failed_at = time.monotonic()  # the others fail within the timeout; then they are stopped
                if failed_at is not None and time.monotonic() - failed_at > args.dist_timeout + 30:
                    for p in procs:
                        if p.is_alive():
                            p.kill()
        except KeyboardInterrupt:  # the processes got it too (same terminal): let them save and end
            for p in procs:
                p.join(args.dist_timeout)
            return 130
        codes = [p.exitcode for p in procs]
    bad = [(r, c) for r, c in enumerate(codes) if c != 0]
    if bad:
        print(f"python -m manaka.train: process(es) {', '.join(f'{r} (exit {c})' for r, c in bad)} failed",
              file=sys.stderr)
        return bad[0][1] if bad[0][1] and bad[0][1] > 0 else 1
    return 0


def _stop_ranks_on_sigterm(procs) -> None:
    """SIGTERM to this command (kill PID, a job scheduler) stops its processes too, then
    ends it with status 143: they were left training on their own, writing the checkpoint,
    after the command had ended. (Ctrl-C reaches them from the terminal: see _spawn.)"""
    def stop(signum, frame):
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(30)
        print(f"python -m manaka.train: terminated; stopped the {len(procs)} processes (the checkpoint holds its last "
              "save, if any)", file=sys.stderr)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def _end_with_the_command(command_pid: int) -> None:
    """A process of --nproc gets SIGTERM (and ends) when the command that started it ends
    in any way, kill -9 included, which no handler of the command sees: before, its
    processes trained on as orphans. Linux's PR_SET_PDEATHSIG; elsewhere nothing changes."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
    if os.getppid() != command_pid:  # it ended before the request was made
        os._exit(128 + signal.SIGTERM)


def _rank(args, rank: int, rendezvous: str) -> None:
    """One process of --nproc: its torch.distributed rank, then the run on its shard; only
    rank 0 prints (the others' errors still go to stderr)."""
    _end_with_the_command(args.command_pid)
    import datetime

    import torch.distributed as dist

    if rank:
        sys.stdout = open(os.devnull, "w")
    # tqdm's default lock holds a multiprocessing semaphore, which this process's os._exit
    # below never releases: the parent's resource tracker then warned of "leaked semaphore
    # objects" after every run. The ranks share no progress bar: a thread lock does.
    import threading

    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())
    if args.device == "cuda":  # one GPU per process, chosen before CUDA starts
        os.environ["CUDA_VISIBLE_DEVICES"] = str(rank)
    backend = "nccl" if args.device == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"file://{rendezvous}", rank=rank, world_size=args.nproc,
                            timeout=datetime.timedelta(seconds=args.dist_timeout))
    args.stage = "before"
    try:
        code = _train(args, rank=rank, world=args.nproc, group=dist.group.WORLD)
    except KeyboardInterrupt:
        code = 130
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    try:
        dist.destroy_process_group()
    except Exception:  # a group whose peers are gone: the exit status says what happened
        pass
    # Everything is written: end without the interpreter's teardown, which after a gloo run
    # aborts now and then in C++ destructors ("terminate called without an active
    # exception"; 8 of 52 two-process runs of the test workers here), turning a finished run's
    # exit status into a failure.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _train(args, rank: int = 0, world: int = 1, group=None) -> int:
    device = choose_device(args.device)
    preset = PRESETS[args.preset or ("shogi" if args.data and _is_records(args.data)
                                     else "seed" if device == "cuda" else "small")]
    if args.threads:
        try:  # more than MK_MAX_THREADS: one line, not a traceback
            mk.set_num_threads(args.threads)
        except ValueError as e:
            return fail(f"--threads: {e}")
    elif world > 1:  # the processes share this machine's cores
        mk.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    time_limit, epochs = args.time_limit, args.epochs
    if args.steps is None and epochs is None and time_limit is None:
        epochs, time_limit = 1.0, 60.0
    by_time = args.steps is None and epochs is None  # a wall budget alone: as many epochs as fit

    try:  # a bad dataset, device or option is a one-line error, not a traceback
        t0 = time.perf_counter()
        held_out = None
        kind = "data"
        if args.data:
            kind = data_kind(args.data, "--data")
            if args.eval_data and data_kind(args.eval_data, "--eval-data") != kind:
                raise ValueError(f"--data {args.data} and --eval-data {args.eval_data} are different kinds of data")
            if kind == "data" and _record_options(args):
                raise ValueError("--value, --eval-scale, --on-bad and --moves apply to shogi records (.hcpe, .bin, "
                                 ".psv), not to a dataset folder")
        elif _record_options(args):
            raise ValueError("--value, --eval-scale, --on-bad and --moves apply to shogi records (--data with .hcpe, "
                             ".bin or .psv files)")
        recipe = RECIPES["shogi" if kind in ("hcpe", "hcpe3", "psv") else "data"]
        option = lambda name: getattr(args, name) if getattr(args, name) is not None else recipe[name]
        if args.data:
            records = dict(value=option("value"), on_bad=option("on_bad"), moves=option("moves")) if kind != "data" else {}
            # the recipe's mirror doubles the training records only: held-out data is scored as recorded
            scale = option("eval_scale") if kind != "data" else None
            data = open_records_scaled(args.data, kind, records, scale, args.eval_scale is None,
                                       mirror=kind != "data" and recipe["mirror"])
            if args.eval_data:  # the training records' scale (a fitted one included)
                held_out = open_data(args.eval_data, kind, **records, **_scale_of(data))
                _check_held_out(args, data, held_out)
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
        # data-parallel: each process its shard of every step (the last short step dropped, so
        # that every process has the same steps)
        loader = mk.Loader(data, batch_size=batch_size, producers=args.producers, prefetch=args.prefetch,
                           shuffle=True, seed=args.seed, rank=rank, world_size=world, drop_last=world > 1)
        total = None if by_time else args.steps if args.steps is not None else int(round(epochs * len(loader)))
        if args.epochs is not None and total == 0:  # "no step was run (--steps 0)" said a step count never given
            raise ValueError(f"--epochs {args.epochs:g} is less than half a step of the {len(loader):,} of an epoch: "
                             "nothing would be trained")
        schedule = option("schedule")
        if total is None and schedule == "cosine" and args.schedule is not None:
            raise ValueError("--schedule cosine decays to the last step, which a --time-limit alone does not fix: "
                             "give --steps or --epochs too")
        if schedule == "cosine" and args.schedule is None and (total is None or total <= option("warmup")):
            # the recipe's cosine needs a last step after the warm-up: a time budget has none
            schedule = "constant"
            why = ("a --time-limit alone does not fix" if total is None
                   else f"{total} steps do not pass the {option('warmup')} warm-up steps")
            print(f"schedule: constant (the recipe's cosine decays to a last step, which {why}; "
                  "give --steps or --epochs for it)")
        move_update = option("move_update")
        if group is not None and args.move_update is None and move_update != "dense":
            # the rows another rank's batch names are not this one's: a data-parallel step is dense
            print(f"move_update: dense (the recipe's {move_update!r} updates the rows one process's batch "
                  "names; a data-parallel run exchanges every rank's)")
            move_update = "dense"
        trainer = mk.Trainer(model, lr=args.lr or preset["lr"], weight_decay=option("weight_decay"),
                             eps=recipe["eps"], warmup_steps=option("warmup"), schedule=schedule, total_steps=total,
                             pair_update=option("pair_update"), move_update=move_update, process_group=group)
        shared = f" x {world} processes" if world > 1 else ""
        print(f"training: batch {batch_size}{shared}, {loader.producers} producers, {trainer!r}"
              + (f", until {format_duration(time_limit)} have passed" if by_time else ""))
        eval_every, eval_seconds = None, None
        if held_out is not None:
            if by_time and args.eval_every is None:
                eval_seconds = time_limit / 10
                print(f"held-out: {len(held_out):,} positions, evaluated about every "
                      f"{format_duration(eval_seconds)} and at the end")
            else:
                eval_every = held_out_every(args, total)
                print(f"held-out: {len(held_out):,} positions, evaluated "
                      + (f"every {eval_every} steps and " if eval_every else "") + "at the end")
    except (ValueError, TypeError, RuntimeError, OSError, MemoryError, OverflowError) as e:
        # MemoryError: a size the machine cannot allocate (e.g. --batch-size 2**40)
        return fail(str(e))
    try:  # a checkpoint of another run, a damaged one, an unwritable path, a bad shogi record: one line
        args.stage = "in"
        history = mk.fit(model, loader, steps=args.steps, epochs=None if by_time else epochs, trainer=trainer,
                         log_every=args.log_every, checkpoint=args.checkpoint,
                         checkpoint_every=args.checkpoint_every, resume=args.resume,
                         progress=not args.no_progress, time_limit=time_limit,
                         eval_data=held_out, eval_every=eval_every, eval_every_seconds=eval_seconds,
                         eval_batch_size=batch_size, keep_best=held_out is not None and recipe["keep_best"])
        args.stage = "after"
        if rank:  # rank 0 reports and saves for every process (they hold the same model)
            return 0
        baselines = None
        if args.data and held_out is not None and history.records:
            # counted on the training records as recorded (without the recipe's mirrors)
            counted = open_data(args.data, kind, **records) if getattr(data, "mirror", False) else data
            baselines = label_baselines(counted, held_out, batch_size=max(batch_size, 1024))
        summary(history, loader, data, held_out, model, batch_size, args.checkpoint, baselines)
        save_model(args, model, history)
    except (mk.FileFormatError, OSError, ExchangeFailed) as e:  # ExchangeFailed: --nproc lost a process
        return fail(str(e))
    except ValueError as e:  # shogi records are decoded while training; fit names data without a batch,
        # evaluate held-out data without a usable position
        if not str(e).startswith(("shogi:", "fit:", "evaluate:")):
            raise
        return fail(str(e))
    return 0


def save_model(args, model, history) -> None:
    """Saves the model where the user said (--save, replacing that file), or next to the
    checkpoint / in model.manaka under a name no file has (a file the user did not name is
    never replaced); nothing when no step was run and no path was named, or with --no-save."""
    step = int(history.last["step"]) if history.records else 0
    ran = step > history.start_step
    if args.no_save:
        return
    if args.save:
        path = args.save
    elif not ran:
        print("the model was not saved: no step was run (--save PATH saves it anyway)")
        return
    else:
        base = os.path.splitext(args.checkpoint)[0] if args.checkpoint else "model"
        path, k = base + ".manaka", 0
        while os.path.exists(path):
            k += 1
            path = f"{base}-{k}.manaka"
    model.save(path)
    print(f"saved the model (step {step}) to {path}")


def held_out_every(args, total: int):
    """--eval-every, or by default about 10 evaluations over the run's `total` steps, each on a
    logging step (a multiple of --log-every); None: only at the end."""
    if args.eval_every is not None:
        return args.eval_every or None
    return args.log_every * max(1, -(-total // (10 * args.log_every)))


def _suffixes(names, suffixes) -> int:
    return sum(1 for n in names if n.lower().endswith(suffixes))


def _record_kind(name: str) -> str:
    """"hcpe3", "hcpe" or "psv" for a record file's name, by its suffix, else ""."""
    lower = name.lower()
    if lower.endswith(".hcpe3"):
        return "hcpe3"
    if lower.endswith(".hcpe"):
        return "hcpe"
    return "psv" if lower.endswith((".bin", ".psv")) else ""


def _kind_of_matches(pattern: str, option: str) -> tuple:
    """(the record kind of every file a glob matches, "") or ("", the first match that is no
    record file), by the matches' names: by the pattern's, 'games/*' of HCPE files was "a file
    of an unknown kind (no suffix)". Matches that are records of several kinds: a ValueError
    naming one of each."""
    matches = sorted(glob.glob(pattern))
    kinds = {_record_kind(m) for m in matches}
    if "" in kinds:
        return "", next(m for m in matches if not _record_kind(m))
    if len(kinds) > 1:
        examples = ", ".join(f"{next(m for m in matches if _record_kind(m) == k)} ({k})" for k in sorted(kinds))
        raise ValueError(f"{option} {pattern}: the glob matches record files of several kinds ({examples}): "
                         "name one kind")
    return kinds.pop(), ""


def data_kind(path: str, option: str = "--data") -> str:
    """"data" (a dataset folder), "hcpe", "hcpe3" or "psv" (shogi records) for `path`; anything else
    is a ValueError saying what the path is and what is accepted."""
    accepted = f"{option} takes {ACCEPTED}"
    convert = f"convert CSA / KIF game records first: {CONVERT} {path}"
    if os.path.isdir(path):
        names = os.listdir(path)
        if "meta.json" in names:
            return "data"
        hcpe, psv = _suffixes(names, (".hcpe",)), _suffixes(names, (".bin", ".psv"))
        hcpe3 = _suffixes(names, (".hcpe3",))
        if hcpe3 and (hcpe or psv):
            raise ValueError(f"{option} {path}: the folder holds hcpe3 ({hcpe3}) and other record files: "
                             f"name one kind with a glob ({os.path.join(path, '*.hcpe3')})")
        if hcpe3:
            return "hcpe3"
        if hcpe and psv:
            raise ValueError(f"{option} {path}: the folder holds both HCPE ({hcpe}) and PSV ({psv}) files: "
                             f"name one kind with a glob ({os.path.join(path, '*.hcpe')})")
        if hcpe or psv:
            return "hcpe" if hcpe else "psv"
        games = _suffixes(names, GAME_RECORDS)
        if games:
            raise ValueError(f"{option} {path}: a folder of {games} CSA / KIF game record(s), which training does "
                             f"not read; {convert}")
        if "tokens.npy" in names:
            raise ValueError(f"{option} {path}: a dataset folder without its meta.json (written last by "
                             "Dataset.save: an unfinished or damaged dataset?)")
        raise ValueError(f"{option} {path}: a folder with no meta.json and no record file; {accepted}")
    if os.path.isfile(path) or any(ch in path for ch in "*?[") and glob.glob(path):
        kind, name = (_record_kind(path), path) if os.path.isfile(path) else _kind_of_matches(path, option)
        if kind:
            return kind
        what = path if name == path else f"{path} matches {name}"  # the file that is no record
        lower = name.lower()
        if lower.endswith(GAME_RECORDS):
            raise ValueError(f"{option} {what}: a CSA / KIF game record, which training does not read; {convert}")
        if os.path.basename(name) == "meta.json":
            raise ValueError(f"{option} {what}: give the dataset folder, {os.path.dirname(name) or '.'}, not its "
                             "meta.json")
        suffix = os.path.splitext(name)[1] or "no suffix"
        raise ValueError(f"{option} {what}: a file of an unknown kind ({suffix}); {accepted}")
    if any(ch in path for ch in "*?["):
        raise ValueError(f"{option} {path}: no file matches this glob; {accepted}")
    if os.path.exists(path):  # a FIFO, socket or device: it was reported as missing
        raise ValueError(f"{option} {path}: not a regular file or folder (a FIFO, socket or device); {accepted}")
    raise ValueError(f"{option} {path}: no such file or folder; {accepted}")


def _check_held_out(args, data, held_out) -> None:
    """Says so when --eval-data reads a file --data reads (a glob of --data that takes in the
    held-out file too): its figures, printed as held-out and choosing the kept step, are then
    partly the training positions' own. A note, not a refusal: the run is still what was asked."""
    from .fit import _data_files

    real = lambda d: {os.path.realpath(f) for f in _data_files(d)}
    shared = sorted(real(data) & real(held_out))
    if shared:
        print(f"note: --eval-data {args.eval_data} and --data {args.data} share {len(shared)} file(s) "
              f"({shared[0]}{', ...' if len(shared) > 1 else ''}): the held-out figures below include training "
              "positions, and are optimistic")


def _is_records(path: str) -> bool:
    """--data names shogi records (the shogi preset's data); a bad path is reported with its
    reason when the data is opened."""
    try:
        return data_kind(path) in ("hcpe", "hcpe3", "psv")
    except ValueError:
        return False


def open_data(path: str, kind: str, value="result", on_bad="raise", mirror: bool = False, moves: str = "dlshogi",
              eval_scale=EVAL_SCALE):
    """A dataset folder, or shogi records (a file, glob or folder) of `kind` (data_kind);
    `mirror` adds the records' left-right mirrors (shogi.open_hcpe's mirror=), `moves` is
    their move label encoding, `eval_scale` the evaluation's scale (a number or "fit")."""
    from . import shogi

    if kind == "hcpe3":  # dlshogi's games with visit counts: soft policy targets
        return shogi.open_hcpe3(path, value=value, on_bad=on_bad, moves=moves, eval_scale=eval_scale)
    if kind == "hcpe":
        return shogi.open_hcpe(path, value=value, on_bad=on_bad, mirror=mirror, moves=moves, eval_scale=eval_scale)
    if kind == "psv":
        return shogi.open_psv(path, value=value, on_bad=on_bad, mirror=mirror, moves=moves, eval_scale=eval_scale)
    return mk.Dataset.open(path)


def _record_options(args) -> bool:
    return any(getattr(args, k) is not None for k in ("value", "eval_scale", "on_bad", "moves"))


def _scale_of(data) -> dict:
    """open_data's eval_scale= for data read like `data` (records: the number they use)."""
    scale = getattr(data, "eval_scale", None)
    return {} if scale is None else {"eval_scale": scale}


def open_records_scaled(path: str, kind: str, records: dict, eval_scale, from_recipe: bool, mirror: bool):
    """open_data with `eval_scale`, saying in the log which scale the value target uses. The
    recipe's "fit" on records that cannot fit one (too few decisive games, evaluations that
    do not predict results) falls back to dlshogi's 756 and says so; an explicit
    --eval-scale fit is an error there."""
    if kind == "data":
        return open_data(path, kind)
    from .shogi.eval_scale import EvalScaleFitError

    try:  # a fit that fails has only memory-mapped the records (hcpe3: indexed them) so far
        data = open_data(path, kind, **records, mirror=mirror, eval_scale=eval_scale)
    except EvalScaleFitError as e:
        if not from_recipe:
            raise
        print(f"eval_scale: 756 (dlshogi's): the recipe's fit is not possible here: {e}")
        return open_data(path, kind, **records, mirror=mirror, eval_scale=EVAL_SCALE)
    if data.eval_scale is not None:
        how = "fitted to the training records' results" if eval_scale == "fit" else "given"
        print(f"value target: {records['value']!r} with sigmoid(eval / {data.eval_scale:g}), the scale {how}")
    return data


def label_baselines(train, held_out, batch_size: int, max_train: int = 1_000_000) -> dict:
    """The held-out top-1 accuracies of the chance and frequency baselines (mk.evaluate's),
    with the moves counted on at most `max_train` training positions (beyond it, the first
    of a shuffled epoch), through mk.Loader: records on_bad="skip" leaves out stay out."""
    from .evaluate import baselines, label_frequencies

    with mk.Loader(train, batch_size=batch_size, producers=2, shuffle=len(train) > max_train, seed=0) as loader:
        counted = label_frequencies(loader, max_positions=max_train)
    figures = baselines(held_out, counted, batch_size=batch_size)
    return {"chance": figures["chance"]["accuracy"], "frequency": figures["frequency"]["accuracy"],
            "train_positions": counted.positions}


def summary(history, loader, data, held_out, model, batch_size, checkpoint=None, baselines=None) -> None:
    step = int(history.last["step"]) if history.records else 0
    if step == history.start_step:
        if step == 0:
            print("no step was run (--steps 0): nothing was trained" + (", and no checkpoint written" if checkpoint else ""))
        else:
            print(f"no step was run: the checkpoint {checkpoint} is already at step {step}, the end of this run "
                  "(ask for more --steps to continue it)")
        return
    last = history.last
    # totals over the run's training time (evaluations excluded), not a mean of per-line rates
    print(f"\ndone: step {last['step']}, epoch {last['epoch']:.2f}, {format_duration(last['elapsed'])} | "
          f"{history.positions_per_second():,.0f} positions/s | data wait {100 * history.wait_share():.2f}% "
          f"of training time")
    print(f"last training batch: loss {last['loss']:.4f}, accuracy {last['accuracy']:.3f}")
    meta = (held_out or data).meta
    if held_out is not None:
        # fit evaluated the held-out data at the last step: its figures, not a second pass
        # (unless that step's record comes from a checkpoint of a run without held-out data)
        if "eval_loss" in last:
            r = {k: last[f"eval_{k}"] for k in ("loss", "policy_loss", "value_loss", "accuracy", "positions")}
        else:
            r = mk.evaluate(model, held_out, batch_size=batch_size)
        against = ""
        if baselines is not None:
            against = f" (chance {baselines['chance']:.3f}, frequency {baselines['frequency']:.3f})"
        print(f"held-out ({int(r['positions']):,} positions): loss {r['loss']:.4f} (policy {r['policy_loss']:.4f}, "
              f"value {r['value_loss']:.4f}), accuracy {r['accuracy']:.3f}{against}")
        if baselines is not None:
            print(f"  chance: a uniform pick among each position's legal moves; frequency: the legal move played "
                  f"most often in {baselines['train_positions']:,} training positions")
        kept = getattr(history, "kept", None)
        if kept is not None and kept is not history.last:
            print(f"kept the best held-out step {kept['step']} (the saved model): loss {kept['eval_loss']:.4f} "
                  f"(policy {kept['eval_policy_loss']:.4f}, value {kept['eval_value_loss']:.4f}), "
                  f"accuracy {kept['eval_accuracy']:.3f}")
    teacher = ("teacher_accuracy_ceiling", "teacher_policy_loss_floor", "teacher_value_loss_floor", "chance_accuracy")
    # synthetic data's figures; a dataset folder's meta.json may hold anything under these keys,
    # which must not fail the run's end before the model is saved
    if all(isinstance(meta.get(k), (int, float)) and not isinstance(meta.get(k), bool) for k in teacher):
        print(f"teacher's ceiling: accuracy {meta['teacher_accuracy_ceiling']:.3f}, policy loss floor "
              f"{meta['teacher_policy_loss_floor']:.4f}, value loss floor {meta['teacher_value_loss_floor']:.4f}; "
              f"chance accuracy {meta['chance_accuracy']:.3f}")
    if checkpoint:
        print(f"the checkpoint {checkpoint} holds step {step}")


if __name__ == "__main__":
    sys.exit(main())
