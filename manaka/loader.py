"""mk.Loader: C producer threads that pack a Dataset's positions into mk.Batch objects.

The producers (csrc/data/loader.c) read the memory-mapped arrays directly and fill a bounded
queue of reusable buffers; Python only wraps each finished batch (no Python work per
position). See :class:`Loader` for the guarantees.
"""
from __future__ import annotations

import os
import time
from typing import Dict, Iterator, Mapping, Optional

import numpy as np

from . import _core
from .batch import Batch
from .dataset import Dataset
from .errors import DatasetError

__all__ = ["Loader"]


class Loader:
    """Iterates a :class:`manaka.Dataset` in batches packed by C producer threads.

    ``for batch in loader`` yields one epoch of :class:`manaka.Batch` objects: every
    position exactly once, in a seeded order (a permutation of (seed, epoch): it differs
    between epochs and between seeds, and is identical for the same seed). Batch n of an
    epoch always holds the same positions, whatever the number of producers. Legal lists
    are padded to the batch's own largest count (legal = -1, policy_target = 0 there).

    Buffer reuse: batches live in ``prefetch + 1`` reusable C buffers. A yielded batch is
    valid until the next one is requested; after that its arrays are overwritten by a later
    batch (they never dangle: the memory lives as long as any view of it). To keep a batch,
    pass ``copy=True`` (each batch is copied out, costing a memcpy) or copy it yourself.
    The arrays are read-only views: the model reads the batch where its producer packed and
    checked it, without converting or checking it again (docs/design.md, "The loader's
    batch"). To change a batch, copy its arrays (or use ``copy=True``): it is then checked
    like any other.

    Position: the loader remembers where it is (``epoch``, ``batch_index``). A new
    iteration continues from there: breaking out of a loop and iterating again resumes the
    same epoch; finishing an epoch moves to the next. One iteration runs at a time: making a
    new iterator (``iter(loader)``) supersedes every older one, whose next ``next()`` is a
    RuntimeError (``zip(loader, loader)`` fails at once), and an iterator starts where the
    loader is at its first ``next()``. ``state_dict()`` /
    ``load_state_dict()`` save and restore this position (mk.fit checkpoints it).

    Producers run below the caller's OS priority (``Loader.NICE``, Linux): they are
    background work kept ahead by the queue and never take a core from the training step.
    Their buffers come from an allocation hook in the C loader (csrc/data/loader.h), where a GPU
    model will plug page-locked memory for asynchronous host-to-device copies.

    The files of an opened dataset are read in place (memory maps): rewriting them while a
    loader runs (another process regenerating the data) ends the iteration with a
    :class:`manaka.DatasetError` naming the folder, never a crash; batches packed before the
    change was seen may hold a mix of old and new data. To replace a dataset under a running
    loader safely, write the new files under temporary names and rename them over the old
    ones: the loader keeps reading the old contents until it is opened again.

    Shards (data-parallel training): ``rank=r, world_size=n`` gives this process a disjoint
    share of every epoch, the n shares together holding every position exactly once. Every
    rank computes the same seeded permutation of the whole dataset (it does not depend on
    n); global step k covers its positions ``[k*n*batch_size, (k+1)*n*batch_size)`` and rank
    r's batch k is the r-th run of ``batch_size`` positions of it. So concatenating the
    ranks' batch k in rank order, then the steps in order, gives the unsharded order back,
    and one process on the concatenated batches sees what the n ranks saw together. The
    last, short global step (R = N mod n*batch_size positions) is split in rank order, the
    first R mod n ranks taking ceil(R/n) positions and the others floor(R/n); with
    ``drop_last`` it is dropped whole. Every rank has the same number of batches (DDP needs
    equal step counts), so 0 < R < n without ``drop_last`` is refused with a ValueError.
    ``set_epoch``, ``state_dict`` and resuming work per rank as unsharded (``rank`` is not
    saved, so rank 0's state resumes every rank; a state saved with another ``world_size``
    resumes at the same position of the epoch when that falls on one of this loader's
    steps: :meth:`load_state_dict`). Shogi
    record files: a batch whose records were all bad is skipped on its rank only, so keep
    such files out of a data-parallel run.

    Threads stop at the end of each epoch, on ``close()``, when a ``with`` block ends,
    when the consuming loop raises, and on Ctrl-C (waits wake every 50 ms to let Python
    raise KeyboardInterrupt).

    Args:
        dataset: a :class:`manaka.Dataset`.
        batch_size: positions per batch.
        producers: C threads packing batches (more is not automatically better: 1-4).
        prefetch: batches that may be ready ahead of the consumer.
        shuffle: False keeps dataset order.
        seed: the shuffle's seed (>= 0).
        drop_last: skip the last, short batch of each epoch.
        copy: yield batches that own their memory (safe to keep).
        rank: this process's shard, in ``[0, world_size)``.
        world_size: processes sharing each epoch (1: unsharded).
    """

    # Producers run this much below the caller's priority (Linux nice): they are background
    # work kept ahead by the queue, and must not take a core from the training step.
    NICE = 10
    # The C core counts epochs in int64; a position beyond this (only a crafted checkpoint
    # holds one) is refused here rather than overflowing when the next epoch starts.
    MAX_EPOCH = 2**62

    def __init__(self, dataset: Dataset, batch_size: int = 1024, producers: int = 4, prefetch: int = 8,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False, copy: bool = False,
                 rank: int = 0, world_size: int = 1):
        # Record files (manaka.shogi.RecordFiles, or any object whose `_row_source` offers a
        # row source capsule as `_row_source_capsule`: csrc/python/common/row_source_capsule.h)
        # hand the producers a row source instead of arrays: they make the rows themselves.
        source = getattr(dataset, "_row_source", None)
        if not isinstance(dataset, Dataset) and source is None:
            raise TypeError(f"Loader: dataset must be a manaka.Dataset or shogi records, got {type(dataset).__name__}")
        # `high`: what the C core can receive (its own checks bound batch_size further by the
        # batch buffer's size); beyond it the conversion's OverflowError
        # would not name the argument.
        for name, value, low, high in (("batch_size", batch_size, 1, 2**63 - 1), ("producers", producers, 1, 256),
                                       ("prefetch", prefetch, 1, 1024), ("seed", seed, 0, 2**63 - 1),
                                       ("world_size", world_size, 1, 2**63 - 1)):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
                raise TypeError(f"Loader: {name} must be an int, got {type(value).__name__}")
            if value < low:
                raise ValueError(f"Loader: {name} must be >= {low}, got {value}")
            if value > high:
                raise ValueError(f"Loader: {name} must be <= {high}, got {value}")
        for name, value in (("shuffle", shuffle), ("drop_last", drop_last), ("copy", copy)):
            # bool() would take any object: shuffle="no" shuffled, copy=None did not copy
            if not (isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, np.integer)) and value in (0, 1))):
                raise TypeError(f"Loader: {name} must be True or False, got {value!r}")
        if not isinstance(rank, (int, np.integer)) or isinstance(rank, bool):
            raise TypeError(f"Loader: rank must be an int, got {type(rank).__name__}")
        if not 0 <= rank < world_size:
            raise ValueError(f"Loader: rank must be in [0, world_size - 1 = {world_size - 1}], got {rank}")
        self.rank, self.world_size = int(rank), int(world_size)
        self.dataset = dataset
        self.batch_size, self.producers, self.prefetch = int(batch_size), int(producers), int(prefetch)
        self.shuffle, self.seed, self.drop_last, self.copy = bool(shuffle), int(seed), bool(drop_last), bool(copy)
        arrays = ((source, None, None, None, None, None) if source is not None else
                  (dataset.tokens, dataset.legal_offsets, dataset.legal_moves, dataset.target, dataset.value,
                   dataset.policy_target))
        self._source = source
        # The vocabularies the dataset was validated against: every packed batch is checked
        # against them by its producer, so that the model need not scan it again (a row
        # source knows its own).
        vocab = (0, 0) if source is not None else (dataset.num_tokens, dataset.num_moves)
        self._core = _core.Loader(
            *arrays, self.batch_size, self.producers, self.prefetch, self.shuffle,
            self.seed, self.drop_last, self.NICE, *vocab, rank=self.rank, world_size=self.world_size)
        self.epoch, self.batch_index = 0, 0
        # Dataset indices of the last batch's rows (recycled with its buffers unless copy=True).
        self.last_indices: Optional[np.ndarray] = None
        self._run = 0      # iterations made (iter()); the newest alone may take batches
        self._started = 0  # the iteration whose producers run
        self._producers_pid: Optional[int] = None  # the process whose threads they are, while they run
        self._wait = 0.0
        self._closed = False

    # ------------------------------------------------------------------ iteration
    def __len__(self) -> int:
        """Batches per epoch."""
        return self._core.num_batches

    @property
    def num_batches(self) -> int:
        return self._core.num_batches

    def __iter__(self) -> Iterator[Batch]:
        if self._closed:
            raise RuntimeError("Loader: iterating a closed loader")
        self._check_process()
        self._position()
        # A newer iteration supersedes every older one from the moment it is made, started
        # or not: counted when the generator first ran, two iterators made before either
        # started (zip(loader, loader)) both began at the same position, the same batch
        # yielded twice.
        self._run += 1
        return self._epoch(self._run)

    def _check_process(self):
        """Refuses a loader whose producers run in another process: a child of fork() has none
        of its parent's threads, so it waited forever for their next batch."""
        if self._producers_pid not in (None, os.getpid()):
            raise RuntimeError(f"Loader: its producer threads run in process {self._producers_pid}, of which "
                               "this process is a fork() (which copies no thread): make a new mk.Loader here")

    def _position(self):
        """(epoch, first batch) where an iteration starts now."""
        if self.batch_index >= self.num_batches:
            self.epoch, self.batch_index = self.epoch + 1, 0
        if not 0 <= self.epoch <= self.MAX_EPOCH:  # set by hand: the C core's int64 must not overflow
            raise ValueError(f"Loader: epoch must be in 0..2**62, got {self.epoch}")
        return self.epoch, self.batch_index

    def _epoch(self, run: int) -> Iterator[Batch]:
        # A newer iteration restarts the producers; an older, unfinished generator must then
        # neither take its batches nor stop its threads when it is collected. The position
        # is read when the generator starts: another iteration may have moved it since.
        if run != self._run:
            raise RuntimeError("Loader: this iteration was superseded by a newer one")
        self._check_process()
        epoch, first = self._position()
        self._core.start(epoch, first)
        self._started, self._producers_pid = run, os.getpid()
        try:
            while not self._closed:
                if run != self._run:
                    raise RuntimeError("Loader: this iteration was superseded by a newer one")
                self._check_process()
                start = time.perf_counter()
                try:
                    item = self._core.next(Batch)
                except RuntimeError:
                    if self._closed:  # close() from another thread stopped the producers: the epoch ends
                        break
                    raise
                except ValueError as e:
                    # Arrays: the producers found the files changed under them (rewritten by
                    # another process); the epoch ends. Name the dataset's folder.
                    if self._source is None and getattr(self.dataset, "path", None):
                        raise DatasetError(self.dataset.path, f"{self.dataset.path!r}: {e}", named=True) from None
                    raise
                if item is None:
                    break
                _, index, batch, positions = item
                if len(batch) == 0:  # every record of the batch was bad and skipped
                    self.batch_index = index + 1
                    if self.batch_index >= self.num_batches:
                        self.epoch, self.batch_index = epoch + 1, 0
                    continue
                if self.copy:  # the caller's own, writable arrays: an ordinary batch
                    positions = positions.copy()
                    batch = Batch(*(None if a is None else a.copy() for a in (
                        batch.tokens, batch.legal, batch.counts, batch.target, batch.value, batch.policy_target)))
                self.last_indices = positions
                self._wait += time.perf_counter() - start
                self.batch_index = index + 1
                if self.batch_index >= self.num_batches:
                    self.epoch, self.batch_index = epoch + 1, 0
                yield batch
        finally:
            # the producers are this iteration's (none newer started), and this process's
            if self._started == run and self._producers_pid == os.getpid():
                self._core.stop()
                self._producers_pid = None

    # ------------------------------------------------------------------ position
    def state_dict(self) -> Dict[str, int]:
        """Where the next iteration starts, plus the settings that fix the order."""
        return {"epoch": self.epoch, "batch_index": self.batch_index, "seed": self.seed,
                "batch_size": self.batch_size, "shuffle": int(self.shuffle), "drop_last": int(self.drop_last),
                "world_size": self.world_size}

    def load_state_dict(self, state: Dict[str, int]) -> None:
        """Restores a position saved by :meth:`state_dict` (the order settings must match).

        A state saved with another ``world_size`` or ``batch_size`` (a data-parallel run
        resumed on another number of processes) is taken when its position falls on a step
        boundary of this loader: the epoch's order does not depend on them, so the state is
        ``batch_index * world_size * batch_size`` positions into its epoch, and this loader
        continues from the same position (a ValueError when that is not a multiple of this
        loader's ``world_size * batch_size``). ``drop_last`` may differ too: it only decides
        whether an epoch's last, short step is trained on (``python -m manaka.train
        --nproc`` drops it)."""
        if not isinstance(state, Mapping):
            raise TypeError(f"Loader.load_state_dict: state must be a mapping (Loader.state_dict()'s dict), "
                            f"got {type(state).__name__}")
        for key in ("seed", "shuffle"):
            if key in state and int(state[key]) != int(getattr(self, key)):
                raise ValueError(f"Loader.load_state_dict: {key} = {state[key]} was saved, but this loader has "
                                 f"{key} = {getattr(self, key)}: the batch order would differ")
        for key in ("epoch", "batch_index"):
            # int() would take 1.5, "3" or True as positions: a bad state must not move the loader
            if not isinstance(state[key], (int, np.integer)) or isinstance(state[key], bool):
                raise TypeError(f"Loader.load_state_dict: {key} must be an int, got {type(state[key]).__name__}")
        epoch, index = int(state["epoch"]), int(state["batch_index"])
        saved = {key: int(state.get(key, getattr(self, key))) for key in ("batch_size", "world_size")}
        if saved["batch_size"] < 1 or saved["world_size"] < 1:
            raise ValueError(f"Loader.load_state_dict: the state's batch_size and world_size must be >= 1, got {saved}")
        was, step = saved["batch_size"] * saved["world_size"], self.batch_size * self.world_size
        if was != step and index > 0:
            n, dropped = len(self.dataset), int(state.get("drop_last", self.drop_last))
            done = index * was
            if index >= (n // was if dropped else -(-n // was)):  # the saved epoch had ended
                index = self.num_batches
            elif done % step:
                raise ValueError(
                    f"Loader.load_state_dict: the state is {done} positions into epoch {epoch} (batch {index} of "
                    f"world_size {saved['world_size']} x batch_size {saved['batch_size']}), not a multiple of this "
                    f"loader's world_size {self.world_size} x batch_size {self.batch_size} = {step}: the batch order "
                    "would differ")
            else:
                index = done // step
        if not 0 <= epoch <= self.MAX_EPOCH or not 0 <= index <= self.num_batches:
            raise ValueError(f"Loader.load_state_dict: position (epoch {epoch}, batch {index}) is out of range "
                             f"(epochs 0..2**62, {self.num_batches} batches per epoch)")
        self.epoch, self.batch_index = epoch, index

    def set_epoch(self, epoch: int) -> None:
        """Starts the next iteration at the beginning of `epoch`."""
        self.load_state_dict({"epoch": epoch, "batch_index": 0})

    @property
    def epoch_fraction(self) -> float:
        """Epochs completed, fractionally (e.g. 2.41)."""
        return self.epoch + self.batch_index / max(1, self.num_batches)

    # ------------------------------------------------------------------ stats and lifetime
    @property
    def stats(self) -> Dict[str, float]:
        """batches, positions, queue_depth / queue_capacity (ready ahead of the consumer now),
        wait_seconds (consumer time spent waiting in C), consumer_seconds (the same plus the
        Python wrapping of each batch), running_threads."""
        s = dict(self._core.stats())
        s["consumer_seconds"] = self._wait
        return s

    def close(self) -> None:
        """Stops and joins the producer threads. Idempotent, and safe from any thread: a loop
        iterating the loader in another thread then ends (no more batches, no error)."""
        self._closed = True
        self._core.stop()

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        core = getattr(self, "_core", None)
        if core is not None:
            core.stop()

    def __repr__(self) -> str:
        shard = f", rank={self.rank}, world_size={self.world_size}" if self.world_size > 1 else ""
        return (f"Loader({len(self.dataset):,} positions{shard}, batch_size={self.batch_size}, producers={self.producers}, "
                f"prefetch={self.prefetch}, shuffle={self.shuffle}, seed={self.seed}, epoch={self.epoch}, "
                f"batch {self.batch_index}/{self.num_batches})")
