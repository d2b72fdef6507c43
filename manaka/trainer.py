"""AdamW and the training step (docs/design.md §1–§2); the arithmetic is in C (csrc/core/trainer.c)."""
from __future__ import annotations

import inspect
from typing import Dict, Mapping, Optional, Tuple

import numpy as np

from . import _core
from .batch import Batch
from .model import Model, real_arg
from .ops import _as_int

__all__ = ["Trainer", "Stats"]

_LAYOUT = _core.STATS


class Stats:
    """Results of one step: loss, policy_loss, value_loss, accuracy, lr (floats).

    They are computed in C into a small float32 buffer and become Python floats only when
    read. On a GPU backend the step reads nothing back: the buffer stays on the device
    (kept for the last 256 steps) and the first field read fetches it, which waits for
    that step to finish; a non-finite loss is reported then, as a FloatingPointError (its
    update was skipped on the device). Read a step's stats within 256 steps of it."""

    __slots__ = ("_buf", "_trainer", "step")

    def __init__(self, buffer: Optional[np.ndarray], step: int, trainer=None):
        self._buf = buffer       # host stats, or None until fetched from `trainer`
        self._trainer = trainer  # the _core.Trainer holding this step's stats on the device
        self.step = step  #: 1-based number of the step these stats belong to

    def _get(self, name: str) -> float:
        if self._buf is None:
            self._buf = self._trainer.read_stats(self.step)
            self._trainer = None
        return float(self._buf[_LAYOUT[name]])

    loss = property(lambda self: self._get("loss"), doc="policy_loss + value_weight * value_loss")
    policy_loss = property(lambda self: self._get("policy_loss"), doc="mean cross-entropy")
    value_loss = property(lambda self: self._get("value_loss"), doc="mean BCE of the value head")
    accuracy = property(lambda self: self._get("accuracy"), doc="fraction where argmax == target")
    lr = property(lambda self: self._get("lr"), doc="learning rate used by the step")

    def as_dict(self) -> Dict[str, float]:
        return {k: self._get(k) for k in ("loss", "policy_loss", "value_loss", "accuracy", "lr")}

    def __repr__(self) -> str:
        if self._buf is None:
            return f"Stats(step={self.step}, on the device: read a field to fetch it)"
        d = self.as_dict()
        return (f"Stats(step={self.step}, loss={d['loss']:.4f}, policy_loss={d['policy_loss']:.4f}, "
                f"value_loss={d['value_loss']:.4f}, accuracy={d['accuracy']:.3f}, lr={d['lr']:.3g})")


class Trainer:
    """AdamW training of a :class:`Model`, one :meth:`step` per batch.

    AdamW has PyTorch's semantics (``torch.optim.AdamW``): decoupled weight decay applied
    first (``p *= 1 - lr * weight_decay``), then Adam with bias correction; tensors whose
    name ends in ``bias`` get no weight decay.

    Learning rate of the step with 0-based index s: ``lr * (s + 1) / warmup_steps`` while
    ``s < warmup_steps`` (linear warm-up from 0), then ``lr`` ("constant") or
    ``min_lr + (lr - min_lr) * (1 + cos(pi * p)) / 2`` with
    ``p = min(1, (s - warmup_steps) / (total_steps - warmup_steps))`` ("cosine", which
    requires ``total_steps > warmup_steps``).

    A step checks the batch first (ValueError naming the field and position, nothing
    changed), then runs forward, loss, backward and AdamW in C without the GIL. A non-finite
    loss raises FloatingPointError naming the step, and the update is not applied.

    The pair table's gradient is never materialised by a step: it is accumulated group by
    group and fed straight to AdamW (bitwise the same result as the unfused update), which
    saves two passes over its 176 MB at the seed shapes. Use ``model.loss_and_grad`` to see
    gradients.

    ``pair_state_dtype="bf16"`` keeps the pair table's two AdamW moments in bfloat16
    (2 x 88 MB instead of 2 x 176 MB at the seed shapes, and ~16 instead of ~24 bytes moved
    per pair-table parameter per step); every other tensor keeps float32 moments. Each
    update is computed in float32 and rounded back stochastically (an unbiased rounding
    from a hash of the step number and the element index, so a run is reproducible and
    the same on the CPU and the GPU). :meth:`state_dict` returns the moments as float32
    either way, so a state saved with one setting loads into a trainer with the other:
    bf16 -> float32 is exact, float32 -> bf16 rounds each moment to the nearest bf16. The
    setting belongs to the trainer and is not changed by :meth:`load_state_dict`.

    ``pair_update`` chooses which pair-table rows a step updates (docs/design.md, "Sparse
    pair-table update"). ``"dense"`` (default): every row, every step, exactly AdamW.
    ``"sparse"`` and ``"lazy"``: only the rows some pair of the batch names (a few percent
    of the table on real games), so the step's cost no longer grows with the table. Each
    row carries the step it was last brought up to date; when a batch names it again,
    before the forward pass reads it, it is caught up over the steps it missed exactly as
    the dense update would have treated it with zero gradient: moments times
    ``beta1**k``, ``beta2**k``, the weight decay of every missed step (schedule included).
    ``"sparse"`` also applies the drift the decaying moments would have moved the
    parameter by, in closed form (exact for the schedule, the bias corrections and the
    decay; the one approximation is where ``eps`` sits, within a documented bound of the
    dense result); ``"lazy"`` leaves that drift out, as ``torch.optim.SparseAdam`` does
    (which, unlike ``"lazy"``, also freezes the moments of rows it does not touch and has no
    weight decay). Every read of the model's parameters (``parameters()``,
    ``state_dict()``, ``save``, ``forward``, ``loss_and_grad``) and of this trainer's state
    first catches every row up (:meth:`flush`), so what is read is what the semantics say;
    a flush changes later steps by float rounding only, and two runs that flush at the same
    steps (a checkpointed run and its resumption) give the same bits.

    ``move_update`` is the same choice for the policy head's move table (``move_table``,
    one row per move label): a batch names the rows of its legal moves' labels, ~10 % of
    them for 512 engine positions with shogi's richest move encoding, whose dense AdamW
    is then most of the step's optimizer time (docs/design.md, "Sparse move-table
    update"). The same semantics, catch-up and flushes as ``pair_update``; a data-parallel
    trainer (``process_group``) needs ``move_update="dense"``, since another rank's batch
    names rows this one's does not.

    ``process_group`` (a ``torch.distributed`` ProcessGroup; torch is imported only then)
    makes the trainer one rank of a data-parallel run (:mod:`manaka.distributed_trainer`,
    docs/design.md §8): each rank steps on its own batch (``mk.Loader(rank=, world_size=)``),
    the ranks exchange the dense gradients (all-reduced) and the pair-table rows their
    batches name (all-gathered, summed in rank order), and each applies the same AdamW
    update: every rank holds the same bits after every step, those of one process on the
    ranks' concatenated batches up to the order of the float sums. Stats are the ranks'
    mean. Every rank must start from the same model and trainer state (checked here: a
    ValueError otherwise); a rank that dies or stalls makes the others' step raise a
    RuntimeError within the process group's timeout. :attr:`last_exchange` has the bytes
    each step sent.
    """

    def __init__(self, model: Model, lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01, warmup_steps: int = 0,
                 schedule: str = "constant", total_steps: Optional[int] = None,
                 min_lr: float = 0.0, value_weight: float = 1.0, pair_state_dtype: str = "float32",
                 pair_update: str = "dense", process_group=None, move_update: str = "dense"):
        if not isinstance(model, Model):
            raise TypeError(f"Trainer: model must be a manaka.Model, got {type(model).__name__}")
        self.model = model
        if process_group is not None and move_update != "dense":
            raise ValueError(f"Trainer: move_update={move_update!r} cannot be used with a process_group "
                             "(another rank's batch names move-table rows this one's does not); "
                             "use move_update='dense'")
        self._core = _core.Trainer(model._core, pair_state_dtype=pair_state_dtype,
                                   pair_update=pair_update, move_update=move_update,
                                   **self._hyper(lr, betas, eps, weight_decay, warmup_steps,
                                                 schedule, total_steps, min_lr, value_weight))
        self._exchange = None
        if process_group is not None:  # torch is imported only here
            from .distributed_trainer import Exchange

            self._exchange = Exchange(self, process_group)

    @staticmethod
    def _hyper(lr, betas, eps, weight_decay, warmup_steps, schedule, total_steps, min_lr,
               value_weight) -> dict:
        """The hyperparameters as the core takes them. Only Python's conversions are here
        (betas to a pair, each rate a real number: real_arg); the core converts the step counts and the schedule's
        name, and every rule is C's (mk_trainer_config_check, csrc/core/trainer.c)."""
        try:
            beta1, beta2 = betas
        except (TypeError, ValueError):
            raise ValueError(f"Trainer: betas must be a pair of floats, got {betas!r}") from None
        real = lambda name, v: real_arg("Trainer", name, v)
        return dict(lr=real("lr", lr), beta1=real("betas[0]", beta1), beta2=real("betas[1]", beta2),
                    eps=real("eps", eps), weight_decay=real("weight_decay", weight_decay),
                    warmup_steps=warmup_steps, schedule=schedule, total_steps=total_steps,
                    min_lr=real("min_lr", min_lr), value_weight=real("value_weight", value_weight))

    def step(self, batch: Batch) -> Stats:
        """One AdamW step on `batch`; returns its :class:`Stats`.

        On a CUDA model the batch may hold GPU arrays, read in place after a check on the
        device (one small device -> host read; see :meth:`Model._read`)."""
        if self._core.pair_update != "dense" or self._core.move_update != "dense":
            self.model._own_pair_table(self)
        if self._exchange is not None:
            return self._exchange.step(batch)
        # The core returns the step's own number, read while it still held the model: reading
        # step_count here instead could see another thread's later step (or a loaded state),
        # and a device Stats would then fetch that step's stats.
        buf, step = self.model._read("Trainer.step", batch, True, self._core.step)
        return Stats(buf, step) if buf is not None else Stats(None, step, self._core)

    @property
    def step_count(self) -> int:
        """Number of steps applied so far."""
        return self._core.step_count

    @property
    def lr(self) -> float:
        """Learning rate the next step will use."""
        return self._core.lr_at(self._core.step_count)

    def lr_at(self, step: int) -> float:
        """Learning rate of the step with 0-based index `step` (as float32)."""
        # an int in int64's range: 1.5 and 2**70 were C's errors, naming nothing
        step = _as_int("Trainer.lr_at", "step", step)
        if not 0 <= step < 2**63:
            raise ValueError(f"Trainer.lr_at: step must be in [0, 2**63), got {step}")
        return self._core.lr_at(step)

    @property
    def pair_state_dtype(self) -> str:
        """Storage of the pair table's AdamW moments: "float32" or "bf16"."""
        return self._core.pair_state_dtype

    @property
    def pair_update(self) -> str:
        """Which pair-table rows a step updates: "dense", "sparse" or "lazy"."""
        return self._core.pair_update

    @property
    def move_update(self) -> str:
        """Which move-table rows a step updates: "dense", "sparse" or "lazy"."""
        return self._core.move_update

    @property
    def process_group(self):
        """The ``torch.distributed`` group this trainer exchanges gradients over (None:
        one process)."""
        return None if self._exchange is None else self._exchange.group

    @property
    def rank(self) -> int:
        """This process's rank in :attr:`process_group` (0 without one)."""
        return 0 if self._exchange is None else self._exchange.rank

    @property
    def world_size(self) -> int:
        """Processes in :attr:`process_group` (1 without one)."""
        return 1 if self._exchange is None else self._exchange.world

    @property
    def last_exchange(self) -> dict:
        """Bytes this rank sent in the last step's exchange, by part (stats, dense, rows,
        sent; received_rows), the pair-table rows each rank's batch named (rows_per_rank),
        and the step's seconds in backward, exchange and apply (seconds). Empty without a
        process group or before a step."""
        if self._exchange is None or not self._exchange.last_bytes:
            return {}
        return {**self._exchange.last_bytes, "rows_per_rank": list(self._exchange.last_rows),
                "seconds": dict(self._exchange.last_seconds)}

    def any_rank(self, flag: bool) -> bool:
        """True if `flag` is true on any rank of :attr:`process_group` (a collective: every
        rank must call it); `flag` itself without a group."""
        return bool(flag) if self._exchange is None else self._exchange.any(bool(flag))

    def flush(self) -> None:
        """Catches every row of the pair table and the move table up to the current step
        (``pair_update`` / ``move_update`` "sparse" or "lazy"; a no-op when both are
        "dense"). Reads of the model and of :meth:`state_dict` do it themselves."""
        self._core.flush()

    @property
    def hyperparameters(self) -> dict:
        """lr, betas, eps, weight_decay, warmup_steps, schedule, total_steps, min_lr, value_weight."""
        return self._core.config()

    def state_dict(self) -> dict:
        """Everything needed to resume training exactly: step count, hyperparameters
        (schedule included), pair_state_dtype, and both AdamW moments of every parameter
        (float32 copies, whatever the storage)."""
        names = list(self.model.shapes)
        self.flush()  # reading the pair table's moments flushes too; the parameters as well
        return {
            "step_count": self.step_count,
            "hyperparameters": self.hyperparameters,
            "pair_state_dtype": self.pair_state_dtype,
            "exp_avg": {n: self._core.read_moment(0, n) for n in names},
            "exp_avg_sq": {n: self._core.read_moment(1, n) for n in names},
        }

    def load_state_dict(self, state: dict) -> None:
        """Restores a :meth:`state_dict`, all or nothing: everything is checked, and the model
        acquired, before anything changes (a bad state, or a step running on another thread,
        raises and leaves hyperparameters, moments and step count as they were).

        The trainer keeps its own pair_state_dtype: moments saved with the other one are
        converted (exactly to float32, to the nearest value in bf16)."""
        if not isinstance(state, Mapping):  # a str or None was "missing string indices must be integers"
            raise TypeError(f"Trainer.load_state_dict: state must be a mapping (Trainer.state_dict()'s dict), "
                            f"got {type(state).__name__}")
        missing = [key for key in ("hyperparameters", "step_count", "exp_avg", "exp_avg_sq") if key not in state]
        if missing:
            raise ValueError(f"Trainer.load_state_dict: not a trainer state: missing {missing}")
        if not isinstance(state["hyperparameters"], Mapping):
            raise ValueError(f"Trainer.load_state_dict: hyperparameters must be a dict, "
                             f"got {type(state['hyperparameters']).__name__}")
        h = dict(state["hyperparameters"])
        step_count = state["step_count"]
        moments = [state["exp_avg"], state["exp_avg_sq"]]
        saved_dtype = state.get("pair_state_dtype", "float32")  # states from before the option
        # every name of hyperparameters, no other: _hyper(**h) refused one with a TypeError
        # about _hyper's own arguments
        names = list(inspect.signature(self._hyper).parameters)
        if set(h) != set(names):
            raise ValueError(f"Trainer.load_state_dict: hyperparameters must name {names}: missing "
                             f"{[n for n in names if n not in h]}, unexpected {[n for n in h if n not in names]}")
        hyper = self._hyper(**h)
        shapes = self.model.shapes
        checked = ([], [])
        for kind, moment in enumerate(moments):
            if not isinstance(moment, Mapping):  # a list failed in sorted(), None in set()
                raise ValueError(f"Trainer.load_state_dict: {('exp_avg', 'exp_avg_sq')[kind]} must be a dict "
                                 f"{{name: array}}, got {type(moment).__name__}")
            if set(moment) != set(shapes):
                raise KeyError(f"Trainer.load_state_dict: moment names {sorted(set(moment) ^ set(shapes))} "
                               "do not match the model")
            for name, shape in shapes.items():
                try:  # e.g. a torch tensor of a dtype NumPy has not (bfloat16)
                    arr = np.asarray(moment[name])
                except (TypeError, ValueError, RuntimeError) as e:
                    raise TypeError(f"Trainer.load_state_dict: {name} cannot be read as a NumPy array "
                                    f"({type(moment[name]).__name__}: {e})") from None
                if arr.shape != tuple(shape) or arr.dtype.kind != "f":
                    raise ValueError(f"Trainer.load_state_dict: {name} has shape {arr.shape} and dtype "
                                     f"{arr.dtype}, expected {tuple(shape)} float")
                arr = np.ascontiguousarray(arr, dtype=np.float32)
                if not np.isfinite(arr).all() or (kind == 1 and (arr < 0).any()):
                    raise ValueError(f"Trainer.load_state_dict: a moment of {name} holds an invalid value")
                checked[kind].append((name, arr))
        # All or nothing, in C: it checks everything again and takes the model before writing
        # anything, so a failure (another thread's step holding the model, say) changes nothing.
        self._core.load(self.model._core, checked[0], checked[1], step_count,
                        pair_state_dtype=saved_dtype, **hyper)

    def profile(self, enable: bool = True) -> None:
        """Turns on (and resets) per-phase timing in C; it synchronises between phases."""
        self._core.profile(bool(enable))

    def phase_times(self) -> dict:
        """Seconds spent in forward, backward, optimizer (and its pair_table part) since
        :meth:`profile` was turned on, and the number of steps measured."""
        return self._core.times()

    def __repr__(self) -> str:
        h = self.hyperparameters
        return (f"manaka.Trainer(step_count={self.step_count}, lr={h['lr']:g}, betas={h['betas']}, "
                f"eps={h['eps']:g}, weight_decay={h['weight_decay']:g}, warmup_steps={h['warmup_steps']}, "
                f"schedule={h['schedule']!r}, total_steps={h['total_steps']}, min_lr={h['min_lr']:g}, "
                f"value_weight={h['value_weight']:g}, pair_state_dtype={self.pair_state_dtype!r}, "
                f"pair_update={self.pair_update!r}, move_update={self.move_update!r})")
