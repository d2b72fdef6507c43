"""dlshogi HCPE and YaneuraOu PSV files as manaka datasets (docs/shogi.md).

Records are read memory-mapped and decoded in C by the Loader's producers
(csrc/shogi/records.c, shogi's row function in csrc/shogi/record_game.c over the record-file
row source of csrc/data/record_source.c): the position, its legal moves
(dlshogi labels, sorted), the tokens, the played move's index and the value.
"""
from __future__ import annotations

import glob
import os
from typing import Dict, List, Sequence, Tuple, Union

import numpy as np

from .. import _core
from . import fingerprint as _fingerprint
from .eval_scale import EVAL_SCALE, check_eval_scale, fit_eval_scale
from ..dataset import Dataset, Position
from ..mapped_files import file_inode, shorter_now
from .position import MOVE_ENCODINGS, MOVE_KINDS, NUM_TOKENS, TOKENS_PER_SIDE, check_moves, kinds_meta, num_labels

__all__ = ["HCPE", "PSV", "RECORD_BYTES", "expand_paths", "read_records", "decode", "value_weight",
           "open_hcpe", "open_psv", "open_records", "RecordFiles"]

HCPE, PSV = 0, 1
RECORD_BYTES = {HCPE: 38, PSV: 40}
_NAMES = {HCPE: "HCPE", PSV: "PSV", "hcpe3": "hcpe3"}  # "hcpe3": games (hcpe3.py), not records
_SUFFIX = {HCPE: (".hcpe",), PSV: (".bin", ".psv"), "hcpe3": (".hcpe3",)}


def expand_paths(paths, fmt: int) -> List[str]:
    """A list, a glob or a folder (its files with the format's suffix) -> sorted file paths.
    A path that exists is that file or folder, whatever characters its name holds
    (``run[1].hcpe`` is that file, not ``run1.hcpe``); only a path that does not exist is
    read as a glob."""
    if isinstance(paths, (str, bytes, os.PathLike)):
        paths = [paths]  # a bytes path is one path (iterated, it was a list of ints)
    try:
        paths = list(paths)
    except TypeError:
        paths = [paths]  # not iterable (None, 3): refused below, named
    bad = [p for p in paths if not isinstance(p, (str, bytes, os.PathLike))]
    if bad:
        raise TypeError(f"shogi: paths must be a path, a glob, a folder or a list of them, got "
                        f"{type(bad[0]).__name__} {bad[0]!r:.100}")
    out: List[str] = []
    for p in paths:
        p = os.fsdecode(os.fspath(p))
        if os.path.isdir(p):
            out += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(_SUFFIX[fmt]))
        elif os.path.isfile(p):
            out.append(p)
        elif any(ch in p for ch in "*?["):
            found = sorted(glob.glob(p))
            if not found:
                raise ValueError(f"shogi: no file matches {p!r}")
            out += found
        else:
            raise ValueError(f"shogi: {p!r} is neither a file, a folder nor a glob that matches")
    if not out:
        raise ValueError(f"shogi: no {_NAMES[fmt]} file in {paths!r}")
    for p in out:  # a folder's or a glob's entry: a FIFO would block its reader (a hang)
        if not os.path.isfile(p):
            raise ValueError(f"shogi: {p!r} is not a regular file (a folder, FIFO, socket or device)")
    return out


def value_weight(value: Union[str, float]) -> float:
    """value= -> the weight λ of the evaluation: "result" 0, "eval" 1, a float in [0, 1]
    the mix (1 - λ) result + λ sigmoid(eval / eval_scale)."""
    if value == "result":
        return 0.0
    if value == "eval":
        return 1.0
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= float(value) <= 1.0:
        return float(value)
    raise ValueError(f"shogi: value must be 'result', 'eval' or a mixing weight in [0, 1], got {value!r}")


def _check_on_bad(on_bad: str) -> None:
    if on_bad not in ("raise", "skip"):
        raise ValueError(f"shogi: on_bad must be 'raise' or 'skip', got {on_bad!r}")


def check_not_cut(path: str, size: int, inode: Tuple[int, int]) -> None:
    """A ValueError when `path` is still the file `inode` mapped at `size` bytes and is now
    shorter (manaka.mapped_files)."""
    now = shorter_now(path, size, inode)
    if now is not None:
        raise ValueError(f"shogi: {path} is shorter ({now:,} bytes) than when it was opened ({size:,} bytes): "
                         "it was cut while in use, and its records cannot be read")


def _check_format(fmt) -> int:
    """`fmt` as HCPE (0) or PSV (1): 2 was a KeyError, "hcpe" or 2**70 an unnamed TypeError
    or OverflowError."""
    import numbers

    if isinstance(fmt, bool) or not isinstance(fmt, numbers.Integral):
        raise TypeError(f"shogi: fmt must be shogi.HCPE (0) or shogi.PSV (1), got {type(fmt).__name__} {fmt!r:.50}")
    if int(fmt) not in (HCPE, PSV):
        raise ValueError(f"shogi: fmt must be shogi.HCPE (0) or shogi.PSV (1), got {fmt}")
    return int(fmt)


def read_records(path: str, fmt: int, on_bad: str = "raise") -> Tuple[np.ndarray, int]:
    """(records uint8 [N, record bytes] memory-mapped and read-only, trailing bytes
    ignored). A size that is not a multiple of the record size is an error unless
    on_bad="skip". The mapping keeps no file descriptor (any number of files can be
    open at once)."""
    _check_on_bad(on_bad)
    fmt = _check_format(fmt)
    width = RECORD_BYTES[fmt]
    records, size = _core.map_records(os.fspath(path), width, "shogi")
    extra = size % width
    if extra and on_bad == "raise":
        raise ValueError(f"shogi: {path}: {size} bytes is not a whole number of {width}-byte {_NAMES[fmt]} "
                         f"records (record {size // width} is cut short; on_bad='skip' ignores it)")
    return records, extra


def decode(records: np.ndarray, fmt: int):
    """(board [N, 81], hand [N, 2, 7], side [N], move16 [N], eval [N], result [N], status [N])
    of `records`, uint8 [N, record bytes] (as read_records gives them)."""
    fmt = _check_format(fmt)
    want = f"uint8 [N, {RECORD_BYTES[fmt]}] (one row a record)"
    # NumPy's own words named neither the argument nor the shape wanted ("object of too small
    # depth", "Cannot cast array data from dtype('int32')")
    if isinstance(records, np.ndarray) and records.dtype != np.uint8:
        raise TypeError(f"shogi: decode: records must be {want}, got dtype {records.dtype}")
    try:
        ndim = np.ndim(records)
    except ValueError as e:  # a ragged list
        raise TypeError(f"shogi: decode: records must be {want}: {e}") from None
    if ndim != 2:
        raise ValueError(f"shogi: decode: records must be {want}, got {ndim} dimension(s)")
    return _core.shogi_decode(fmt, records)


class RecordFiles:
    """Shogi record files as one dataset, decoded by the Loader's producers (no conversion).

    ``len(ds)`` is the number of records, ``ds[i]`` a :class:`manaka.Position` (decoded on
    the spot), and :class:`manaka.Loader`, :func:`manaka.fit` and :func:`manaka.evaluate`
    accept it: the C producers decode each record, generate its legal moves and encode it
    straight into the batch. A bad record (a Huffman code that is not a position, an
    illegal position, a recorded move that is not legal there, a result out of range) is a
    ValueError naming the file and the record when a batch reaches it, or with
    ``on_bad="skip"`` is left out of its batch and counted in ``loader.stats["skipped"]``.
    ``to_dataset()`` decodes everything into an in-memory :class:`manaka.Dataset`.

    ``mirror=True`` adds the left-right mirror of every record (files 1..9 read as 9..1, on
    the board and in the recorded move: a symmetry of shogi's rules, so the mirrored
    position is as legal, its move as good, its evaluation and result the same): rows
    ``[0, n)`` are the records, rows ``[n, 2n)`` their mirrors, made by the producers.

    ``moves`` is the move label encoding (manaka.shogi.MOVE_ENCODINGS): "dlshogi" (2,187
    labels) or the richer "capture" and "capture-defended", whose labels also say what a
    move captures and whether its destination is defended; ``num_moves`` follows it.

    ``eval_scale`` is s in the evaluation's win probability sigmoid(eval / s) (value= "eval"
    or a mix): a positive number (dlshogi's 756, the default) or "fit", the s that best
    predicts these records' own game results (manaka/shogi/eval_scale.py). ``eval_scale``
    the attribute is the number used (None with value="result", which reads no evaluation).
    """

    num_tokens, tokens_per_side = NUM_TOKENS, TOKENS_PER_SIDE

    def _take_moves(self, moves: str) -> None:
        """The move encoding (checked) and what follows from it: the label count, the
        move kinds (ModelConfig.move_kinds of a model reading these records) and the C
        core's encoding number."""
        self.moves = check_moves(moves)
        self.num_moves = num_labels(moves)
        self.move_kinds = MOVE_KINDS.get(moves, 0)
        self._encoding = MOVE_ENCODINGS[moves]

    def __init__(self, paths, fmt: int, value: Union[str, float] = "result", on_bad: str = "raise",
                 mirror: bool = False, moves: str = "dlshogi", eval_scale: Union[float, str] = EVAL_SCALE):
        _check_on_bad(on_bad)
        scale = check_eval_scale(eval_scale)
        self._take_moves(moves)
        if not isinstance(mirror, bool):
            raise TypeError(f"shogi: mirror must be True or False, got {mirror!r}")
        fmt = _check_format(fmt)
        self.format, self.value, self.on_bad, self.mirror = fmt, value, on_bad, mirror
        self.eval_weight = value_weight(value)
        self.files = expand_paths(paths, fmt)
        self._arrays, self.cut_short = [], 0
        self._sizes, self._inodes = [], []  # each file's bytes and inode when opened (its identity)
        for path in self.files:
            records, extra = read_records(path, fmt, on_bad)
            self._arrays.append(np.ascontiguousarray(records) if len(records) == 0 else records)
            self._sizes.append(len(records) * RECORD_BYTES[fmt] + extra)
            self._inodes.append(file_inode(path))
            self.cut_short += extra > 0
        self._starts = np.cumsum([0] + [len(a) for a in self._arrays])
        if self._starts[-1] == 0:
            raise ValueError(f"shogi: no record in {self.files!r}")
        self.eval_scale = resolve_eval_scale(scale, self.eval_weight, self._arrays, fmt, self.files)
        keep = [(a, f) for a, f in zip(self._arrays, self.files) if len(a)]
        self._row_source = _core.GameRecords(_core.shogi_game(fmt, self.eval_weight, mirror, self._encoding, None,
                                                              self._scale),
                                             [a for a, _ in keep], [f for _, f in keep], on_bad == "skip")
        self.meta = {"shogi_format": _NAMES[fmt], "value": value if isinstance(value, str) else float(value),
                     "files": len(self.files), "cut_short_files": self.cut_short,
                     "bytes_per_position": RECORD_BYTES[fmt], "mirror": mirror, "moves": self.moves}
        if self.eval_scale is not None:
            self.meta["eval_scale"] = self.eval_scale

    @property
    def _scale(self) -> float:  # what the C rows divide the eval by (unused with value="result")
        return EVAL_SCALE if self.eval_scale is None else self.eval_scale

    def __len__(self) -> int:
        return int(self._starts[-1]) * (2 if self.mirror else 1)

    def _unmirrored(self, i: int) -> Tuple[int, bool]:
        n = int(self._starts[-1])
        return (i - n, True) if i >= n else (i, False)

    @property
    def identity(self) -> dict:
        """What identifies these records in a checkpoint: file names and sizes, a CRC-32 of
        sampled records, value and on_bad (manaka/shogi/fingerprint.py). Computed once."""
        if "_identity" not in self.__dict__:
            self._identity = _fingerprint.identity(self)
        return self._identity

    @property
    def fingerprint(self) -> str:
        """A short string of :attr:`identity`: mk.fit refuses to resume a checkpoint of
        records with another fingerprint (as Dataset.fingerprint for dataset folders)."""
        return _fingerprint.fingerprint(self.identity)

    def identity_differences(self, saved: dict):
        """What differs between an identity `saved` by a checkpoint and these records."""
        return _fingerprint.differences(saved, self.identity)

    def locate(self, i: int) -> Tuple[str, int]:
        """(file, record index in it) of dataset index i (a mirrored row: its record's)."""
        i, _ = self._unmirrored(i)
        f = int(np.searchsorted(self._starts, i, side="right")) - 1
        return self.files[f], int(i - self._starts[f])

    def check_files(self) -> None:
        """A ValueError naming a file that is shorter than when it was opened (the same file,
        cut in place by another process): its records are memory-mapped, and reading the lost
        pages is a SIGBUS, which kills the process (the Loader's producers catch it; a read in
        Python cannot). A file replaced by another (renamed over) or removed is no fault: the
        map holds the one that was opened."""
        for path, size, inode in zip(self.files, self._sizes, self._inodes):
            check_not_cut(path, size, inode)

    def record(self, i: int) -> np.ndarray:
        """The record bytes of dataset index i (a mirrored row: its record's, unmirrored)."""
        i, _ = self._unmirrored(i)
        f = int(np.searchsorted(self._starts, i, side="right")) - 1
        return np.asarray(self._arrays[f][i - self._starts[f]])

    def __getitem__(self, i: int) -> Position:
        n = len(self)
        if not isinstance(i, (int, np.integer)):
            raise TypeError(f"shogi: record indices must be integers, got {type(i).__name__}")
        if i < -n or i >= n:
            raise IndexError(f"record {i} is out of range for {n} records")
        i = int(i) % n
        f = int(np.searchsorted(self._starts, self._unmirrored(i)[0], side="right")) - 1
        check_not_cut(self.files[f], self._sizes[f], self._inodes[f])  # its file only: one stat
        tokens, offsets, labels, target, value, status = _core.shogi_rows(self.format, self.record(i)[None],
                                                                           self.eval_weight, self._unmirrored(i)[1],
                                                                           self._encoding, self._scale)
        if status[0]:
            path, k = self.locate(i)
            raise ValueError(f"shogi: {path}: record {k}: {_core.shogi_reason(int(status[0]))}")
        return Position(i, tokens[0].copy(), labels.copy(), int(target[0]), float(value[0]), None)

    def to_dataset(self) -> Dataset:
        """Every record decoded now into an in-memory Dataset (bad records: per on_bad)."""
        self.check_files()
        parts, skipped = [], self.cut_short
        for mirrored, path, records in [(m, p, r) for m in ([False, True] if self.mirror else [False])
                                        for p, r in zip(self.files, self._arrays)]:
            tokens, offsets, labels, target, val, status = _core.shogi_rows(self.format, records, self.eval_weight,
                                                                            mirrored, self._encoding, self._scale)
            bad = np.nonzero(status)[0]
            if len(bad) and self.on_bad == "raise":
                i = int(bad[0])
                raise ValueError(f"shogi: {path}: record {i}: {_core.shogi_reason(int(status[i]))} "
                                 f"({len(bad)} bad record(s) in this file; on_bad='skip' leaves them out)")
            keep = status == 0
            skipped += int((~keep).sum())
            parts.append((tokens[keep], np.diff(offsets)[keep], labels[np.repeat(keep, np.diff(offsets))],
                          target[keep], val[keep]))
        counts = np.concatenate([p[1] for p in parts])
        if len(counts) == 0:
            raise ValueError(f"shogi: no usable record in {self.files!r}")
        offsets = np.zeros(len(counts) + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        return Dataset.from_arrays(tokens=np.concatenate([p[0] for p in parts]), legal_offsets=offsets,
                                   legal_moves=np.concatenate([p[2] for p in parts]),
                                   target=np.concatenate([p[3] for p in parts]),
                                   value=np.concatenate([p[4] for p in parts]), num_tokens=NUM_TOKENS,
                                   num_moves=self.num_moves, meta={**self.meta, "skipped": skipped, **kinds_meta(self.move_kinds)})

    def __repr__(self) -> str:
        return (f"shogi.RecordFiles({int(self._starts[-1]):,} {_NAMES[self.format]} records in {len(self.files)} file(s), "
                f"value={self.value!r}{_scale_text(self.eval_scale)}, on_bad={self.on_bad!r}, "
                f"{RECORD_BYTES[self.format]} bytes/position"
                f"{', and their left-right mirrors' if self.mirror else ''})")


def resolve_eval_scale(scale, eval_weight: float, arrays, fmt: int, files) -> Union[float, None]:
    """check_eval_scale's `scale` as the number the rows use: "fit" fitted to `arrays`; None
    when eval_weight is 0 (no evaluation is read)."""
    if eval_weight == 0.0:
        return None
    if scale == "fit":
        return fit_eval_scale([a for a in arrays if len(a)], fmt, f"the records of {files!r}")
    return scale


def _scale_text(eval_scale) -> str:
    return "" if eval_scale is None or eval_scale == EVAL_SCALE else f", eval_scale={eval_scale:g}"


def open_records(paths, fmt: int, value: Union[str, float] = "result", on_bad: str = "raise",
                 mirror: bool = False, moves: str = "dlshogi",
                 eval_scale: Union[float, str] = EVAL_SCALE) -> RecordFiles:
    """Every record of `paths` (a list, a glob or a folder) as one dataset (with
    mirror=True, followed by their left-right mirrors), labels in encoding `moves`, the
    evaluation read as sigmoid(eval / eval_scale): see RecordFiles."""
    return RecordFiles(paths, fmt, value, on_bad, mirror, moves, eval_scale)


def open_hcpe(paths, value: Union[str, float] = "result", on_bad: str = "raise", mirror: bool = False,
              moves: str = "dlshogi", eval_scale: Union[float, str] = EVAL_SCALE) -> RecordFiles:
    """dlshogi HCPE files (38-byte records) as one Dataset: see :func:`open_records`."""
    return open_records(paths, HCPE, value, on_bad, mirror, moves, eval_scale)


def open_psv(paths, value: Union[str, float] = "result", on_bad: str = "raise", mirror: bool = False,
             moves: str = "dlshogi", eval_scale: Union[float, str] = EVAL_SCALE) -> RecordFiles:
    """YaneuraOu PackedSfenValue files (40-byte records) as one Dataset."""
    return open_records(paths, PSV, value, on_bad, mirror, moves, eval_scale)
