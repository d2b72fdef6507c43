"""mk.fit: the training loop, with logging, a progress bar, checkpoints and exact resume.

The loop does no per-step host work beyond taking the next batch and calling
``trainer.step``: the loss is read back (a device synchronisation on a GPU) only on
logging steps. The log line (docs/design.md §4) shows at a glance whether the pipeline keeps up:

    [3m12s] step=15026 loss=1.4250 acc=0.145 lr=2.43e-04 | 812k pos/s | q=[7/8] wait=0.3% | epoch 0.41 ETA 8m40s

``wait`` is the share of wall time the loop spent waiting for the loader since the last
line; ``q`` is how many batches were ready ahead of the consumer at that moment. With
``eval_data``, every ``eval_every`` steps and at the end the line also shows the held-out
loss and accuracy (``eval_loss=1.5031 eval_acc=0.131``), which History keeps beside the
training metrics.
"""
from __future__ import annotations

import errno
import os
import sys
import time
from typing import Any, Callable, Dict, Iterator, List, Optional

import numpy as np

from .atomic_file import unwritable
from .errors import CheckpointError, CheckpointMismatch
from .interrupt import StepGuard

__all__ = ["fit", "History", "format_duration"]


def _checkpoint():
    """manaka.checkpoint, imported at the first use rather than by ``import manaka``: imported
    beforehand, ``python -m manaka.checkpoint`` would run a second copy of it and runpy
    warns that it "may result in unpredictable behaviour"."""
    from . import checkpoint

    return checkpoint

METRICS = ("loss", "policy_loss", "value_loss", "accuracy", "lr")
# mk.evaluate's metrics on the held-out data, as History fields (eval_loss, ...).
EVAL_METRICS = ("loss", "policy_loss", "value_loss", "accuracy")


def format_duration(seconds: float) -> str:
    """3m12s, 1h04m, 42s, 0.5s."""
    if seconds != seconds or seconds == float("inf"):
        return "?"
    if seconds < 10:
        return f"{seconds:.1f}s"
    s = int(round(seconds))
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _rate(x: float) -> str:
    return f"{x / 1e6:.2f}M" if x >= 1e6 else f"{x / 1e3:.0f}k" if x >= 1e3 else f"{x:.0f}"


class History:
    """Metrics of each logged step: ``history["loss"]`` is an array over logged steps.

    Each record holds step, epoch, elapsed (s), loss, policy_loss, value_loss, accuracy,
    lr, positions_per_s and wait_share (0..1) since the previous line, positions and
    wait_seconds since the run's start, and queue_depth. The records of the steps where
    fit evaluated ``eval_data`` also hold eval_loss, eval_policy_loss, eval_value_loss,
    eval_accuracy (mk.evaluate's mean over every held-out position), eval_positions and
    eval_seconds; elsewhere ``history["eval_loss"]`` is NaN, and :meth:`series` picks the
    steps that have a field.
    """

    def __init__(self, records: Optional[List[Dict[str, float]]] = None):
        self.records: List[Dict[str, float]] = list(records or [])
        # With fit(keep_best=True): the record of the evaluation whose parameters the model
        # holds at the end (the lowest held-out loss), else None.
        self.kept: Optional[Dict[str, float]] = None
        self.start_step = 0  # the step this call of fit started at (the checkpoint's, when resumed)

    def append(self, record: Dict[str, float]) -> None:
        self.records.append(record)

    def __getitem__(self, key: str) -> np.ndarray:
        return np.array([r.get(key, np.nan) for r in self.records], dtype=float)

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self):
        return iter(self.records)

    def series(self, key: str):
        """(steps, values) of the records that hold `key`, e.g. ``history.series("eval_accuracy")``
        for a held-out curve: two float arrays of equal length."""
        rows = [r for r in self.records if key in r]
        return (np.array([r["step"] for r in rows], dtype=float), np.array([r[key] for r in rows], dtype=float))

    def training_time(self) -> float:
        """Seconds of training up to the last logged step, resumed parts included: the
        elapsed wall time less the time spent evaluating held-out data (a record's elapsed
        is taken before its own evaluation, so that one is not in it)."""
        if not self.records:
            return 0.0
        return self.last["elapsed"] - sum(r.get("eval_seconds", 0.0) for r in self.records[:-1])

    def positions_per_second(self) -> float:
        """Positions trained over :meth:`training_time`: the run's real mean rate (the mean
        of the per-line rates would weigh a short fast interval like a long slow one).
        NaN without the count (a history of an older manaka)."""
        seconds = self.training_time()
        if "positions" not in self.last or seconds <= 0:
            return float("nan")
        return self.last["positions"] / seconds

    def wait_share(self) -> float:
        """The share of :meth:`training_time` spent waiting for the loader (NaN as above)."""
        seconds = self.training_time()
        if "wait_seconds" not in self.last or seconds <= 0:
            return float("nan")
        return self.last["wait_seconds"] / seconds

    @property
    def last(self) -> Dict[str, float]:
        return self.records[-1] if self.records else {}

    def __repr__(self) -> str:
        if not self.records:
            return "History(empty)"
        r = self.last
        held = "".join(f" eval_{short}={r[f'eval_{key}']:{fmt}}" for short, key, fmt in
                       (("loss", "loss", ".4f"), ("acc", "accuracy", ".3f")) if f"eval_{key}" in r)
        return (f"History({len(self)} logged steps, last: step={r['step']} loss={r.get('loss', float('nan')):.4f} "
                f"acc={r.get('accuracy', float('nan')):.3f}{held})")


def _read(stats: Any, name: str) -> float:
    """A metric of a trainer's step stats: an attribute, a method, or a mapping entry."""
    value = stats.get(name) if isinstance(stats, dict) else getattr(stats, name, None)
    if callable(value):
        value = value()
    return float("nan") if value is None else float(value)


def _default_trainer(model, total_steps: Optional[int], loader=None):
    """(Trainer(model) with its defaults, or for shogi records the shogi recipe's settings
    (manaka/shogi/recipe.py: measured on held-out engine games); a line for the log when the
    recipe's schedule could not be used, else None)."""
    from . import Trainer  # the model engineer's class (docs/design.md §2)
    from .shogi.recipe import is_records, trainer_settings

    if loader is not None and is_records(loader):
        settings = trainer_settings()
        note = None
        if settings["schedule"] == "cosine" and (total_steps is None or total_steps <= settings["warmup_steps"]):
            # the cosine decays to a last step after the warm-up: a run bounded by time only,
            # or shorter than the warm-up, has none
            settings["schedule"] = "constant"
            note = ("schedule: constant (the shogi recipe's cosine decays to a last step, which "
                    + ("a time limit alone does not fix" if total_steps is None
                       else f"{total_steps} steps do not pass the {settings['warmup_steps']} warm-up steps")
                    + "; give steps or epochs for it)")
        return Trainer(model, total_steps=total_steps, **settings), note
    return Trainer(model, total_steps=total_steps), None


def _config_of(model) -> Optional[dict]:
    config = getattr(model, "config", None)
    return config.to_dict() if hasattr(config, "to_dict") else None


def _dataset_of(loader) -> Optional[dict]:
    """What identifies the training data in a checkpoint: its size, folder and fingerprint,
    and for shogi records their identity (files, sizes, sampled records, options)."""
    ds = getattr(loader, "dataset", None)
    if ds is None or not hasattr(ds, "fingerprint"):
        return None
    out = {"positions": len(ds), "path": getattr(ds, "path", None), "fingerprint": ds.fingerprint}
    if hasattr(ds, "identity"):
        out["identity"] = ds.identity
    return out


def _saved_config(d):
    """A checkpoint's model_config as this manaka's ModelConfig, so a field added since it
    was written (move_pairs) takes its default; None where it is not one."""
    from .model import ModelConfig

    try:
        return ModelConfig(**{**d, "hidden": tuple(d["hidden"])})
    except Exception:
        return None


def _describe_config(d: dict) -> str:
    config = _saved_config(d)
    return str(d) if config is None else str(config)  # a config this manaka cannot build: as saved


def _check_resume(path: str, state: dict, model, loader, total: int, bounded: bool) -> int:
    """The checkpoint's step, after refusing (CheckpointMismatch, one line) a checkpoint that
    does not belong to this run. Nothing is changed yet."""
    missing = [k for k in ("step", "model", "trainer", "loader") if k not in state]
    if missing:
        raise CheckpointError(path, f"is not a training checkpoint of mk.fit: missing {missing}")
    step = state["step"]
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise CheckpointError(path, f"holds an invalid step {step!r:.50}")
    history = state.get("history")
    if history is not None and not (isinstance(history, list) and all(
            isinstance(r, dict) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in r.values())
            for r in history)):
        raise CheckpointError(path, "holds a history that is not a list of records of numbers")
    if bounded and step > total:
        raise CheckpointMismatch(path, f"is at step {step}, beyond the end of this run (step {total}); "
                                       f"ask for at least {step} steps to continue it")
    _check_schedule_end(path, state["trainer"], total, bounded)
    saved, mine = state.get("model_config"), _config_of(model)
    known = _saved_config(saved) if saved is not None else None
    if known is not None:
        saved = known.to_dict()  # the defaults of fields it predates filled in
    if saved is not None and mine is not None and saved != mine:
        raise CheckpointMismatch(path, f"holds a model with {_describe_config(saved)}, but this run's "
                                       f"model has {_describe_config(mine)}")
    saved, mine = state.get("dataset"), _dataset_of(loader)
    if isinstance(saved, dict) and mine is not None and saved.get("fingerprint") != mine["fingerprint"]:
        ds = loader.dataset
        if isinstance(saved.get("identity"), dict) and hasattr(ds, "identity_differences"):
            try:
                differ = "; ".join(ds.identity_differences(saved["identity"]))
            except (TypeError, ValueError, KeyError, IndexError):  # a damaged identity: say so plainly
                differ = "its record identity does not match, or is damaged"
            raise CheckpointMismatch(path, f"was trained on other records than this run's ({differ})")
        def where(d: dict) -> str:  # an in-memory dataset (synthetic, from_arrays) has no folder
            return f"at {d['path']!r}" if d.get("path") is not None else "in memory"

        raise CheckpointMismatch(path, f"was trained on another dataset ({saved.get('positions')} positions "
                                       f"{where(saved)}, fingerprint {saved.get('fingerprint')}) than this "
                                       f"run's ({mine['positions']} positions {where(mine)}, fingerprint "
                                       f"{mine['fingerprint']})")
    return step


def _check_schedule_end(path: str, trainer_state, total: int, bounded: bool) -> None:
    """Refuses to resume a cosine schedule past its last step: the trainer restores the
    checkpoint's schedule, so the steps after it ran at min_lr (0 by default), training
    nothing, while the run said it trained them."""
    hyper = trainer_state.get("hyperparameters") if isinstance(trainer_state, dict) else None
    if not isinstance(hyper, dict) or hyper.get("schedule") != "cosine":
        return
    end = hyper.get("total_steps")
    if isinstance(end, int) and (not bounded or total > end):
        goes_to = f"goes on to step {total}" if bounded else "is bounded by time alone"
        raise CheckpointMismatch(path, f"holds a cosine schedule that ends at step {end} (the learning rate stays "
                                       f"at min_lr {hyper.get('min_lr')} after it), and this run {goes_to}: its "
                                       f"steps past {end} would not train; ask for at most {end} steps to continue "
                                       "it, or start a new run")


def _replaced_hyperparameters(asked, restored) -> Optional[str]:
    """The log line naming the trainer's hyperparameters that resuming replaced with the
    checkpoint's (a run's --lr or --warmup changed since: it trains at the checkpoint's), or
    None. total_steps counts only for a cosine schedule (a constant one never reads it)."""
    if not isinstance(asked, dict) or not isinstance(restored, dict):
        return None
    counts = lambda name: name != "total_steps" or "cosine" in (asked.get("schedule"), restored.get("schedule"))
    changed = [f"{name} {restored[name]} (this run's: {asked.get(name)})" for name in restored
               if counts(name) and restored[name] != asked.get(name)]
    if not changed:
        return None
    return "resumed with the checkpoint's hyperparameters, not this run's: " + ", ".join(changed)


def _restore(path: str, state: dict, model, trainer, loader) -> None:
    """Loads model, trainer and loader state, all or nothing: if one refuses its part, the
    ones already loaded get their previous state back."""
    undo = []
    try:
        for part, key in ((model, "model"), (trainer, "trainer"), (loader, "loader")):
            before = part.state_dict()
            part.load_state_dict(state[key])
            undo.append((part, before))
    except (KeyError, ValueError, TypeError) as e:
        for part, before in reversed(undo):
            part.load_state_dict(before)
        raise CheckpointMismatch(path, f"cannot be restored into this run ({key}): {type(e).__name__}: {e}") from None


def _eval_loader(eval_data, batch_size: int):
    """The loader fit evaluates `eval_data` with: the caller's own Loader (one epoch from its
    position each time), else one made here as mk.evaluate makes it (in order, one
    producer), kept for the whole run so that each evaluation does not build a new one."""
    from .loader import Loader

    if isinstance(eval_data, Loader):
        return eval_data
    if not hasattr(eval_data, "__len__"):
        raise TypeError(f"fit: eval_data must be a manaka.Dataset, shogi records or a manaka.Loader, "
                        f"got {type(eval_data).__name__}")
    if len(eval_data) == 0:
        raise ValueError("fit: eval_data holds no position")
    try:
        return Loader(eval_data, batch_size=batch_size, producers=1, prefetch=2, shuffle=False)
    except TypeError as e:
        raise TypeError(f"fit: eval_data: {e}") from None


def _check_run_length(steps, epochs, time_limit, log_every, checkpoint_every) -> None:
    """The types and ranges of fit's counts and budgets, named: a time_limit of NaN never ran
    out (a run bounded by time alone trained forever), epochs NaN or infinite failed in
    int(), a float step count or a str was taken or failed in a comparison."""
    import math
    import numbers

    for name, value in (("steps", steps), ("log_every", log_every), ("checkpoint_every", checkpoint_every)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
            raise TypeError(f"fit: {name} must be an int, got {type(value).__name__}")
    for name, value, rule in (("epochs", epochs, "a finite number >= 0"), ("time_limit", time_limit,
                                                                            "a finite number of seconds > 0")):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"fit: {name} must be {rule} (or None), got {type(value).__name__}")
        if not math.isfinite(value) or value < 0 or (name == "time_limit" and value == 0):
            raise ValueError(f"fit: {name} must be {rule} (or None), got {value}")


def _data_files(data) -> List[str]:
    """The files `data` (a Loader, a Dataset, shogi records) reads: record files'
    ``files``, a dataset folder's arrays and meta.json; none for data held in memory."""
    data = getattr(data, "dataset", data)
    files = list(getattr(data, "files", None) or [])
    folder = getattr(data, "path", None)
    if isinstance(folder, (str, os.PathLike)) and os.path.isdir(folder):
        files += [os.path.join(folder, name) for name in os.listdir(folder)
                  if name.endswith(".npy") or name == "meta.json"]
    return files


def _check_checkpoint_path(checkpoint, loader, eval_data) -> None:
    """A checkpoint path fit may write, refused before any step: a path (TypeError), and not
    a file the run reads, which the checkpoint would replace (ValueError; the command line
    refuses the same for --checkpoint, whatever --force says), nor one that cannot be written
    (an OSError)."""
    if not isinstance(checkpoint, (str, bytes, os.PathLike)):
        raise TypeError(f"fit: checkpoint must be a path, got {type(checkpoint).__name__}")
    path = os.fsdecode(os.fspath(checkpoint))
    real = os.path.realpath(path)
    for name, data in (("the training data", loader), ("eval_data", eval_data)):
        if data is not None and any(os.path.realpath(f) == real for f in _data_files(data)):
            raise ValueError(f"fit: checkpoint {path!r} is a file of {name}: writing it would replace the data; "
                             "give another path (nothing was written)")
    # found now, not when the first checkpoint is written (after the training it was to keep)
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, f"fit: checkpoint {path!r} is a directory; give the file to write")
    why = unwritable(path)
    if why:
        raise OSError(f"fit: checkpoint {path!r} cannot be written: {why}")


def _check_trainer(trainer, model) -> None:
    """A trainer fit can step: one with step() (TypeError), and of this model when it says
    which it trains (ValueError): another model's trainer trained that one and left this
    one as it was."""
    if not callable(getattr(trainer, "step", None)):
        raise TypeError(f"fit: trainer must be a manaka.Trainer (anything with step(batch)), "
                        f"got {type(trainer).__name__}")
    if getattr(trainer, "model", model) is not model:
        raise ValueError("fit: trainer trains another model than the one given (trainer.model is not model): "
                         "build it with mk.Trainer(model, ...)")


def fit(model, loader, steps: Optional[int] = None, epochs: Optional[float] = None, trainer=None,
        log_every: int = 100, checkpoint: Optional[str] = None, checkpoint_every: Optional[int] = None,
        resume: bool = False, progress: bool = True, log: Optional[Callable[[str], None]] = None,
        time_limit: Optional[float] = None, eval_data=None, eval_every: Optional[int] = None,
        eval_batch_size: int = 1024, eval_every_seconds: Optional[float] = None,
        keep_best: Optional[bool] = None) -> History:
    """Trains `model` on the batches of `loader`; returns the :class:`History` of logged steps.

    Args:
        model: a :class:`manaka.Model` (anything with state_dict / load_state_dict).
        loader: a :class:`manaka.Loader` (its position is part of the checkpoint); a Dataset
            is refused with a TypeError saying to wrap it in one.
        steps: total optimizer steps of the run (counted from the start, also when resuming).
        epochs: or a number of epochs (may be fractional); with neither, one epoch (or, with a
            `time_limit`, as many steps and epochs as fit in it).
        trainer: a :class:`manaka.Trainer` of `model` (another model's is a ValueError);
            default ``Trainer(model, total_steps=...)``, or
            for shogi records (``shogi.open_hcpe`` / ``open_psv``) the shogi recipe's
            optimizer settings (``manaka.shogi.recipe``, docs/shogi.md "The default recipe").
        log_every: read back the loss and print a log line every this many steps (and at the end).
        checkpoint: path of the checkpoint file; written at the end, every `checkpoint_every`
            steps, on Ctrl-C and when taking a batch raises (a bad record: the steps before it
            are kept; the error is raised after) (not when the call ran no step). An existing file is replaced
            unless `resume` continues it (``python -m manaka.train`` refuses that without --force);
            a file of the training data or of `eval_data` is refused (ValueError), as is a
            path that cannot be written (OSError), before any step.
        resume: continue from `checkpoint` if it exists (model, optimizer, schedule and loader
            position restored): a resumed CPU run ends bitwise equal to an uninterrupted one.
            A checkpoint of another model config, another dataset (``Dataset.fingerprint``,
            or for shogi records ``RecordFiles.fingerprint``: the files, their sizes, sampled
            records, value and on_bad), a step beyond `steps`, or a cosine schedule that ends
            before this run does (its steps past the end would train at min_lr) is refused with
            :class:`manaka.CheckpointMismatch` before anything changes; a damaged one with
            :class:`manaka.CheckpointError`. A missing one: the log says the run starts at step 0.
        progress: show a tqdm progress bar (a widget in notebooks).
        log: where log lines go (default: above the progress bar, or stdout).
        time_limit: stop after this many seconds of this call (the step in progress finishes;
            the last step is logged and checkpointed as at the end).
        eval_data: held-out data, anything :func:`manaka.evaluate` takes (a Dataset, shogi
            records, a Loader other than `loader`: ValueError): evaluated every `eval_every` steps (or `eval_every_seconds`)
            and at the last step, its loss and accuracy shown in the log line and kept in the
            History (eval_loss, eval_accuracy, ...; the values mk.evaluate gives for the model
            at that step, with the trainer's value_weight). Those steps are always logged. The
            time spent evaluating is left out of the log line's pos/s and wait share.
        eval_every: evaluate every this many steps; None: only at the end.
        eval_every_seconds: or evaluate at the first step after each this many seconds of
            this call's training (evaluations excluded; for a run bounded by `time_limit`
            alone, whose step count is unknown).
        eval_batch_size: positions per evaluation batch (the values do not depend on it
            beyond float rounding).
        keep_best: (default: True for shogi records with `eval_data`, else False) with
            `eval_data`, the model ends with the parameters of the evaluation
            with the lowest held-out loss instead of the last step's (a longer run then
            never ends worse on held-out data than its best point); the log says which
            step it kept, ``history.kept`` is that step's record. The checkpoint still
            holds the last step's state, so that a resumed run continues exactly (the
            best point of the resumed part is kept from then on).

    An epoch of the loader that yields no batch at all (every record skipped as bad by
    ``on_bad="skip"``) is a ValueError naming the data, not an endless loop.

    With a data-parallel trainer (``Trainer(model, process_group=pg)``; ``python -m
    manaka.train --nproc N``) every rank calls fit with its own shard of the data
    (``Loader(rank=trainer.rank, world_size=trainer.world_size)``, checked); rank 0 alone
    logs, shows the bar, evaluates `eval_data` (so `keep_best` applies to rank 0's model) and
    writes the checkpoint, which every rank then resumes from, on any number of ranks
    (:meth:`Loader.load_state_dict`). The log's pos/s counts every rank's positions.

    Ctrl-C is held back until the step in progress has finished (a second Ctrl-C does not
    wait); the loader's threads are stopped, the checkpoint (if any) is saved at that step,
    one log line says what was saved, and KeyboardInterrupt is re-raised. The model holds
    the parameters of the last finished step.
    """
    from .loader import Loader

    if not isinstance(loader, Loader):
        raise TypeError(f"fit: loader must be a manaka.Loader, got {type(loader).__name__}"
                        + (" (wrap the data in one: mk.Loader(data, batch_size=1024))" if hasattr(loader, "__len__") else ""))
    _check_run_length(steps, epochs, time_limit, log_every, checkpoint_every)
    if log_every < 1:
        raise ValueError(f"fit: log_every must be >= 1, got {log_every}")
    from .shogi.position import check_encoding
    check_encoding(model, loader, "fit")
    if eval_data is not None:
        if eval_data is loader:  # each evaluation restarted it: the training loop's next batch was a RuntimeError
            raise ValueError("fit: eval_data is the training loader itself; give the held-out data (a Dataset, "
                             "shogi records, or a Loader of its own)")
        check_encoding(model, eval_data, "fit: eval_data")
    if checkpoint_every is not None and checkpoint_every < 1:
        raise ValueError(f"fit: checkpoint_every must be >= 1, got {checkpoint_every}")
    if (resume or checkpoint_every) and not checkpoint:
        raise ValueError("fit: resume and checkpoint_every need a checkpoint path")
    if checkpoint:
        _check_checkpoint_path(checkpoint, loader, eval_data)
    if trainer is not None:
        _check_trainer(trainer, model)
    if eval_every is not None and (not isinstance(eval_every, int) or isinstance(eval_every, bool) or eval_every < 1):
        raise ValueError(f"fit: eval_every must be an int >= 1 (or None: only at the end), got {eval_every!r}")
    if eval_every_seconds is not None and not (isinstance(eval_every_seconds, (int, float)) and eval_every_seconds > 0):
        raise ValueError(f"fit: eval_every_seconds must be a number > 0 (or None), got {eval_every_seconds!r}")
    for name, value in (("eval_every", eval_every), ("eval_every_seconds", eval_every_seconds)):
        if value is not None and eval_data is None:
            raise ValueError(f"fit: {name} needs eval_data")
    if keep_best and eval_data is None:
        raise ValueError("fit: keep_best needs eval_data")
    if keep_best is None:
        from .shogi.recipe import RECIPE, is_records
        keep_best = eval_data is not None and is_records(loader) and bool(RECIPE["keep_best"])
    per_epoch = len(loader)
    if per_epoch < 1:
        raise ValueError("fit: the loader yields no batch (dataset smaller than a batch with drop_last?)")
    if steps is not None:
        if steps < 0:
            raise ValueError(f"fit: steps must be >= 0, got {steps}")
        total = int(steps)
    elif epochs is None and time_limit is not None:
        total = sys.maxsize  # bounded by time only
    else:
        total = int(round((1.0 if epochs is None else float(epochs)) * per_epoch))
    bounded = total != sys.maxsize
    schedule_note = None
    if trainer is None:
        trainer, schedule_note = _default_trainer(model, total if bounded else None, loader)
    # The held-out loss weighs the value loss as the training loss does.
    value_weight = float(getattr(trainer, "hyperparameters", {}).get("value_weight", 1.0))
    # A data-parallel trainer (Trainer(process_group=...)): every rank runs this loop on its
    # shard; rank 0 alone logs, evaluates and writes the checkpoint (every rank holds the
    # same parameters), and the ranks agree on when a time limit ends the run.
    rank, world = int(getattr(trainer, "rank", 0)), int(getattr(trainer, "world_size", 1))
    if world == 1 and loader.world_size > 1:
        raise ValueError(f"fit: the loader is shard {loader.rank} of {loader.world_size}, but the trainer has no "
                         "process group: every process would train its own model on its shard; pass "
                         "trainer=mk.Trainer(model, process_group=...)")
    if world > 1 and (loader.rank, loader.world_size) != (rank, world):
        raise ValueError(f"fit: the loader is shard {loader.rank} of {loader.world_size}, but the trainer is rank "
                         f"{rank} of {world}: build the loader with rank=trainer.rank, world_size=trainer.world_size")
    lead = rank == 0
    held_loader = None if eval_data is None or not lead else _eval_loader(eval_data, eval_batch_size)

    history, step, saved_step, replaced_note = History(), 0, None, None
    if resume and os.path.exists(checkpoint):
        state = _checkpoint().load(checkpoint)
        step = _check_resume(checkpoint, state, model, loader, total, bounded)
        asked = getattr(trainer, "hyperparameters", None)
        _restore(checkpoint, state, model, trainer, loader)
        replaced_note = _replaced_hyperparameters(asked, getattr(trainer, "hyperparameters", None))
        history = History(state.get("history"))
        saved_step = step
    history.start_step = step

    from tqdm.auto import tqdm

    class Bar(tqdm):
        monitor_interval = 0  # no tqdm monitor thread: fit leaves no thread behind

    # tqdm's own remaining-time estimate is left out of the bar: it knows only the step count,
    # not the time limit, so it disagreed with the log line's. The bar shows eta() instead.
    progress = progress and lead
    bar = Bar(total=total if bounded else None, initial=step, unit="step", disable=not progress, dynamic_ncols=True,
              leave=True, file=sys.stderr, bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}, {rate_fmt}{postfix}]")
    say = log or (bar.write if progress else print)
    if not lead:
        say = lambda line: None  # noqa: E731  (rank 0 logs for every rank)
    if schedule_note:
        say(schedule_note)
    if replaced_note:
        say(replaced_note)
    if resume and saved_step is None:
        say(f"no checkpoint at {checkpoint} yet: this run starts at step 0 and will write it")

    def save() -> None:
        nonlocal saved_step
        if not lead:  # rank 0 writes the checkpoint of every rank's (identical) state
            saved_step = step
            return
        _checkpoint().save(checkpoint, {"step": step, "model": model.state_dict(), "trainer": trainer.state_dict(),
                                        "loader": loader.state_dict(), "history": history.records,
                                        "model_config": _config_of(model), "dataset": _dataset_of(loader)})
        saved_step = step

    start = time.perf_counter()
    before = history.last if history.records else {}
    # elapsed: the run's wall time; a record's is taken before its own evaluation
    elapsed_before = before.get("elapsed", 0.0) + before.get("eval_seconds", 0.0)
    # cumulative over the run, resumed parts included (the summary's rates are totals over time)
    positions_before, wait_before = before.get("positions", 0), before.get("wait_seconds", 0.0)
    mark_time, mark_step, mark_positions, mark_wait = start, step, 0, 0.0
    positions = 0
    wait = 0.0
    batches: Optional[Iterator] = None
    batches_this_epoch, from_epoch_start = 0, False
    stats = None
    first_step, shown = step, ""  # shown: the last log line's loss and accuracy, for the bar
    best_record, best_state = None, None  # keep_best: the lowest held-out loss so far
    # eval_every_seconds counts training time (this call's, evaluations excluded): however
    # long an evaluation takes, a time budget holds at most about budget / interval of them
    next_eval_at = eval_every_seconds
    evaluating = 0.0  # seconds this call spent evaluating

    def eta(now: float) -> float:
        """Seconds left: the steps left at this call's mean rate, capped by the time limit.
        The one estimate that both the log line and the bar show."""
        done = step - first_step
        left = (total - step) * (now - start) / done if bounded and done > 0 else float("inf")
        if time_limit is not None:
            left = min(left, max(0.0, time_limit - (now - start)))
        return left

    def evaluate_held_out() -> Dict[str, float]:
        from .evaluate import evaluate

        t = time.perf_counter()
        r = evaluate(model, held_loader, value_weight=value_weight)
        held = {f"eval_{name}": float(r[name]) for name in EVAL_METRICS}
        held["eval_positions"] = int(r["positions"])
        held["eval_seconds"] = time.perf_counter() - t
        return held

    def emit(now: float, held: Optional[Dict[str, float]] = None) -> None:
        """Logs the step; `now` was taken before any evaluation, whose time (in `held`) is
        then left out of the next interval's rate as well."""
        nonlocal mark_time, mark_step, mark_positions, mark_wait, shown
        interval = max(now - mark_time, 1e-9)
        record = {"step": step, "epoch": loader.epoch_fraction, "elapsed": elapsed_before + now - start}
        for name in METRICS:
            record[name] = _read(stats, name)
        record["positions_per_s"] = (positions - mark_positions) / interval
        record["wait_share"] = (wait - mark_wait) / interval
        record["positions"] = positions_before + positions
        record["wait_seconds"] = wait_before + wait
        ls = loader.stats
        record["queue_depth"] = ls["queue_depth"]
        record.update(held or {})
        history.append(record)
        evaluated = (f"eval_loss={record['eval_loss']:.4f} eval_acc={record['eval_accuracy']:.3f} "
                     if held else "")
        say(f"[{format_duration(record['elapsed'])}] step={step} loss={record['loss']:.4f} "
            f"acc={record['accuracy']:.3f} {evaluated}lr={record['lr']:.2e} | {_rate(record['positions_per_s'])} pos/s | "
            f"q=[{ls['queue_depth']}/{ls['queue_capacity']}] wait={100 * record['wait_share']:.1f}% | "
            f"epoch {record['epoch']:.2f} ETA {format_duration(eta(now))}")
        shown = f"loss={record['loss']:.4f}, acc={record['accuracy']:.3f}, "
        if held:
            shown += f"eval_acc={record['eval_accuracy']:.3f}, "
        mark_time, mark_step, mark_positions, mark_wait = now + (held or {}).get("eval_seconds", 0.0), step, positions, wait

    guard = StepGuard()
    taking, position = False, None  # while taking a batch: the loader's position before it
    try:
        with guard:
            while step < total:
                t = time.perf_counter()
                if batches is None:
                    from_epoch_start = loader.batch_index in (0, per_epoch)  # a whole epoch follows
                    batches, batches_this_epoch = iter(loader), 0
                position, taking = (loader.epoch, loader.batch_index), True
                batch = next(batches, None)
                if batch is None:  # end of an epoch: the loader moves to the next one
                    taking, batches = False, None
                    if batches_this_epoch == 0 and from_epoch_start:
                        raise ValueError(f"fit: a whole epoch of {_describe_data(loader)} yielded no batch: "
                                         f"every position was skipped as bad ({loader.stats.get('skipped', '?')} "
                                         "skipped); check the data, or open it with on_bad='raise' to see why")
                    continue
                guard.stepping, taking = True, False  # from here until the step is counted
                wait += time.perf_counter() - t
                stats = trainer.step(batch)
                step += 1
                positions += len(batch) * world  # every rank's (the shards are equal but for a last step)
                batches_this_epoch += 1
                guard.stepping = False
                guard.check()  # a Ctrl-C during the step: raised now, between steps
                now = time.perf_counter()
                out_of_time = time_limit is not None and now - start >= time_limit
                if time_limit is not None and world > 1:  # every rank stops at the same step
                    out_of_time = trainer.any_rank(out_of_time)
                last = step == total or out_of_time
                trained = now - start - evaluating
                due = ((eval_every is not None and step % eval_every == 0)
                       or (next_eval_at is not None and trained >= next_eval_at))
                evaluate_now = held_loader is not None and (last or due)
                if evaluate_now and next_eval_at is not None:
                    while next_eval_at <= trained:
                        next_eval_at += eval_every_seconds
                if step % log_every == 0 or last or evaluate_now:
                    held = evaluate_held_out() if evaluate_now else None
                    evaluating += (held or {}).get("eval_seconds", 0.0)
                    emit(now, held)
                    if keep_best and evaluate_now and (best_record is None
                                                       or history.last["eval_loss"] < best_record["eval_loss"]):
                        best_record, best_state = history.last, None if last else model.state_dict()
                if out_of_time:
                    bar.total = step  # the run ends here: the bar ends at 100%, not at the epoch's share
                if progress:
                    bar.set_postfix_str(shown + f"ETA {format_duration(eta(now))}", refresh=False)
                bar.update(1)
                if checkpoint_every and step % checkpoint_every == 0:
                    save()
                if out_of_time:
                    break
            if checkpoint and step != first_step:
                save()
            if best_state is not None:  # the best evaluation was not the last: its parameters
                model.load_state_dict(best_state)
            if best_record is not None:
                history.kept = best_record
                if best_record is not history.last:
                    say(f"keep_best: the model holds step {best_record['step']}'s parameters (held-out loss "
                        f"{best_record['eval_loss']:.4f}, accuracy {best_record['eval_accuracy']:.3f}), not the last "
                        f"step {history.last['step']}'s ({history.last['eval_loss']:.4f}, "
                        f"{history.last['eval_accuracy']:.3f})")
    except KeyboardInterrupt:
        torn = guard.stepping
        if taking:  # the batch taken (if it was) is not trained on: the loader gives it again
            loader.load_state_dict({"epoch": position[0], "batch_index": position[1]})
        say(_interrupted(step, first_step, checkpoint, saved_step, torn, save))
        raise
    except Exception:
        # raised while taking a batch (a bad record, a data file changed under the loader):
        # the state is the last finished step, which the checkpoint keeps as a Ctrl-C does,
        # rather than losing every step of the run
        if taking and checkpoint:
            loader.load_state_dict({"epoch": position[0], "batch_index": position[1]})
            say(_interrupted(step, first_step, checkpoint, saved_step, False, save,
                             what=f"stopped by an error in the data at step {step}"))
        raise
    finally:
        if batches is not None:
            batches.close()  # stops and joins the producer threads
        if held_loader is not None and held_loader is not eval_data:
            held_loader.close()
        bar.close()
    return history


def _interrupted(step: int, first_step: int, checkpoint, saved_step, torn: bool, save, what: str = "") -> str:
    """Saves the checkpoint of an interrupted run where the state is a finished step, and
    says truthfully what the checkpoint file holds."""
    what = what or f"interrupted at step {step}"
    if torn:
        reason = "the interrupt came inside a step, which may be half applied: not saved"
    elif not checkpoint:
        reason = "no checkpoint path was given"
    elif step == saved_step:
        return f"{what}; the checkpoint {checkpoint} holds step {step}"
    elif step == first_step:
        reason = "no step was run"
    else:
        try:
            save()
            return f"{what}; saved the checkpoint {checkpoint} at step {step}"
        except KeyboardInterrupt:  # a second Ctrl-C: the atomic writer left the old file as it was
            reason = "interrupted again while saving the checkpoint: not saved"
        except Exception as e:  # a full disk, an unwritable folder: say so, keep the interrupt
            reason = f"could not save the checkpoint {checkpoint}: {type(e).__name__}: {e}"
    if checkpoint and saved_step is not None:
        return f"{what}: {reason}; the checkpoint {checkpoint} holds step {saved_step}"
    return f"{what}: {reason}; nothing was saved"


def _describe_data(loader) -> str:
    ds = getattr(loader, "dataset", None)
    return repr(ds) if ds is not None else repr(loader)
