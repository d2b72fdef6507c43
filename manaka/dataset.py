"""Datasets in the on-disk format of docs/design.md §4: a folder of .npy files plus meta.json.

    tokens.npy          int16   [N, 2, T]   token ids per perspective, -1 = empty slot
    legal_offsets.npy   int64   [N + 1]     position i's legal moves are
    legal_moves.npy     int16|int32 [total]   legal_moves[legal_offsets[i]:legal_offsets[i+1]]
    target.npy          int32   [N]         index of the played move in that list
    value.npy           float32 [N]         game result for the side to move, in [0, 1]
    policy_target.npy   float32 [total]     optional soft targets, summing to 1 per position
    meta.json           {"version": 1, "num_tokens": V, "num_moves": M, "T": T, ...}

Files are memory-mapped, never loaded whole; :meth:`Dataset.open` validates everything
(manaka/validate.py) before any training starts.
"""
from __future__ import annotations

import errno
import json
import os
import zlib
from dataclasses import dataclass
from typing import Any, Dict, Optional

import numpy as np

from . import validate as _v
from .errors import DatasetError
from .mapped_files import file_inode, shorter_now
from .ops import _as_int

__all__ = ["Dataset", "Position"]


def _write_npy(f, array: np.ndarray) -> None:
    """np.save's bytes (a version 1.0 header, then the array in C order), every one through
    f.write: np.save's own ndarray.tofile dropped the error of a buffered write under 4 KB,
    and a full disk then left a short .npy file behind a save that had succeeded."""
    array = np.ascontiguousarray(array)
    np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(array))
    f.write(array.reshape(-1).view(np.uint8).data)


@dataclass(frozen=True)
class Position:
    """One position of a dataset, for inspection (``ds[i]``)."""

    index: int
    tokens: np.ndarray          # int16 [2, T], -1 = empty
    legal_moves: np.ndarray     # move ids [count]
    target: int                 # index into legal_moves
    value: float
    policy_target: Optional[np.ndarray] = None  # float32 [count]

    @property
    def played_move(self) -> int:
        """The move id of the target."""
        return int(self.legal_moves[self.target])

    def __repr__(self) -> str:
        present = [int((side >= 0).sum()) for side in self.tokens]
        soft = ""
        if self.policy_target is not None:
            top = int(np.argmax(self.policy_target))
            soft = f", soft targets (top move {int(self.legal_moves[top])} p={self.policy_target[top]:.3f})"
        return (f"Position(#{self.index}: {present[0]}+{present[1]} tokens, "
                f"{len(self.legal_moves)} legal moves, target={self.target} (move {self.played_move}), "
                f"value={self.value:.3f}{soft})")


def _fits(name: str, x: np.ndarray, lo: int, hi: int, what: str) -> None:
    """Refuses a value that would wrap when narrowed (the range checks come after)."""
    if x.size and (x.min() < lo or x.max() > hi):
        k = int(np.flatnonzero(((x < lo) | (x > hi)).reshape(-1))[0])
        raise ValueError(f"Dataset.from_arrays: {name} holds {x.reshape(-1)[k]} at flat position {k}, "
                         f"which does not fit {what}")


def _read_only(x: Optional[np.ndarray]) -> Optional[np.ndarray]:
    """A read-only view: the loader's C threads read these arrays while training runs."""
    if x is None or not x.flags.writeable:
        return x
    view = x.view()
    view.flags.writeable = False
    return view


def _int_arg(name: str, x: Any, dtype, lo: int, hi: int, what: str) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind not in "iu":
        raise TypeError(f"Dataset.from_arrays: {name} must have an integer dtype, got {x.dtype}")
    _fits(name, x, lo, hi, what)
    return np.ascontiguousarray(x, dtype=dtype)


def _float_arg(name: str, x: Any) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind not in "iuf":
        raise TypeError(f"Dataset.from_arrays: {name} must be numeric, got {x.dtype}")
    return np.ascontiguousarray(x, dtype=np.float32)


class Dataset:
    """Positions with their legal moves and targets (docs/design.md §4).

    Build one with :meth:`from_arrays`, :meth:`open` (a saved folder, memory-mapped) or
    :meth:`synthetic` (positions labelled by a fixed random teacher network). ``len(ds)``
    is the number of positions, ``ds[i]`` a readable :class:`Position`, and
    ``ds.meta`` the meta.json dictionary (including extra keys such as
    ``teacher_accuracy_ceiling`` for synthetic data). Hand it to :class:`manaka.Loader`.
    """

    def __init__(self, arrays: Dict[str, Optional[np.ndarray]], meta: Dict[str, Any],
                 path: Optional[str] = None, source: str = "Dataset", names=None):
        rule = _v.Rule(source, names or {}, path)
        dims = _v.check_meta(meta, rule)
        _v.check_shapes(arrays, dims, rule)
        self._stats = _v.check_values(arrays, dims, rule)
        arrays = {k: _read_only(v) for k, v in arrays.items()}
        self.tokens = arrays["tokens"]
        self.legal_offsets = arrays["legal_offsets"]
        self.legal_moves = arrays["legal_moves"]
        self.target = arrays["target"]
        self.value = arrays["value"]
        self.policy_target = arrays.get("policy_target")
        self.meta = dict(meta)
        self.path = path
        self._fingerprint: Optional[str] = None

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_arrays(cls, *, tokens, legal_offsets, legal_moves, target, value,
                    policy_target=None, num_tokens: int, num_moves: int,
                    meta: Optional[Dict[str, Any]] = None) -> "Dataset":
        """A dataset from in-memory arrays (any integer / float dtypes; converted to the format's).

        Args:
            tokens: ``[N, 2, T]`` token ids, -1 for an empty slot, below ``num_tokens``.
            legal_offsets: ``[N + 1]``, starting at 0, strictly increasing.
            legal_moves: ``[legal_offsets[-1]]`` move ids below ``num_moves``.
            target: ``[N]`` index of the played move within each position's legal list.
            value: ``[N]`` result in [0, 1] for the side to move.
            policy_target: optional ``[legal_offsets[-1]]`` soft targets summing to 1 per position.
            num_tokens, num_moves: the vocabularies (V and M of docs/design.md).
            meta: extra keys for meta.json (JSON-serialisable).

        Raises:
            ValueError / TypeError naming the argument, the first bad position and the rule.
        """
        # ints only: int() read 20.7 as 20, "20" as 20 and True as 1 (check_meta rules the range)
        num_tokens = _as_int("Dataset.from_arrays", "num_tokens", num_tokens)
        num_moves = _as_int("Dataset.from_arrays", "num_moves", num_moves)
        move_dtype = np.int16 if num_moves <= 32768 else np.int32
        arrays = {
            "tokens": _int_arg("tokens", tokens, np.int16, -32768, 32767, "int16 token ids"),
            # A private copy: offsets steer every read of the producer threads, so a caller
            # changing its array later must not be able to send them out of bounds.
            "legal_offsets": np.array(_int_arg("legal_offsets", legal_offsets, np.int64, -2**63, 2**63 - 1, "int64")),
            "legal_moves": _int_arg("legal_moves", legal_moves, move_dtype, np.iinfo(move_dtype).min,
                                    np.iinfo(move_dtype).max, f"{np.dtype(move_dtype).name} move ids"),
            "target": _int_arg("target", target, np.int32, -2**31, 2**31 - 1, "int32"),
            "value": _float_arg("value", value),
            "policy_target": None if policy_target is None else _float_arg("policy_target", policy_target),
        }
        T = arrays["tokens"].shape[2] if arrays["tokens"].ndim == 3 else 1  # shape errors come next
        full_meta = {"version": _v.FORMAT_VERSION, "num_tokens": num_tokens,
                     "num_moves": num_moves, "T": int(T), **(meta or {})}
        return cls(arrays, full_meta, source="Dataset.from_arrays")

    @classmethod
    def open(cls, path: str) -> "Dataset":
        """Memory-maps the dataset folder at `path` and validates all of it.

        Raises:
            :class:`manaka.DatasetError` (a ValueError) naming the folder, the file, the
            first bad position and the rule broken; nothing else for a damaged folder.
        """
        path = os.fspath(path)
        source = f"Dataset.open({path!r})"

        def fail(message):
            raise DatasetError(path, f"{source}: {message}", named=True)

        if not os.path.isdir(path):
            fail("not a directory")
        def regular(file, name):
            # a FIFO would block open() until a writer came (a hang), a device read forever
            if os.path.exists(file) and not os.path.isfile(file):
                fail(f"{name}: not a regular file (a folder, FIFO, socket or device)")

        meta_path = os.path.join(path, "meta.json")
        regular(meta_path, "meta.json")
        try:
            with open(meta_path) as f:
                meta = json.load(f)
        except FileNotFoundError:
            fail("meta.json: missing")
        except (OSError, ValueError, RecursionError) as e:
            fail(f"meta.json: not valid JSON ({type(e).__name__}: {e})")
        arrays: Dict[str, Optional[np.ndarray]] = {}
        for name in _v.FILES:
            file = os.path.join(path, name + ".npy")
            regular(file, name + ".npy")
            if not os.path.exists(file):
                if name == "policy_target":
                    arrays[name] = None
                    continue
                fail(f"{name}.npy: missing")
            try:
                arrays[name] = np.load(file, mmap_mode="r", allow_pickle=False)
            except Exception as e:  # a corrupt header raises ValueError, SyntaxError, tokenize.TokenError...
                fail(f"{name}.npy: cannot be read (truncated or not a .npy file: {type(e).__name__}: {e})")
        names = {name: name + ".npy" for name in _v.FILES}
        names["meta"] = "meta.json"
        ds = cls(arrays, meta, path=path, source=source, names=names)
        # each mapped file's (path, bytes mapped, inode): see _check_files
        ds._mapped = [(a.filename, a.offset + a.nbytes, file_inode(a.filename)) for a in arrays.values()
                      if isinstance(a, np.memmap) and a.filename]
        return ds

    def _check_files(self) -> None:
        """A DatasetError naming a file that is shorter than its memory map (manaka.mapped_files)."""
        for file, size, inode in getattr(self, "_mapped", ()):
            now = shorter_now(file, size, inode)
            if now is not None:
                raise DatasetError(self.path, f"{self.path!r}: {os.path.basename(file)} is shorter ({now:,} bytes) "
                                              f"than its memory map ({size:,} bytes): it was cut while in use",
                                   named=True)

    @classmethod
    def synthetic(cls, n: int, cfg: Any = None, seed: int = 0, **options) -> "Dataset":
        """`n` positions labelled by a fixed random teacher network: see :func:`manaka.synthetic.make`."""
        from .synthetic import make
        return make(n, cfg, seed, **options)

    def save(self, path: str) -> str:
        """Writes the dataset as a folder of .npy files plus meta.json. Returns the path.

        A dataset already in `path` is replaced, never mixed with this one: every file is
        first written whole to a temporary beside it (``.<name>.tmp-<pid>.<n>``), then the old
        meta.json is removed, the arrays are renamed over the old ones (an old
        policy_target.npy this dataset lacks is removed) and meta.json comes last. So a
        failure or Ctrl-C while writing leaves the old dataset as it was, a folder with a
        meta.json is always complete, and a dataset saved over the folder it was opened
        from (its arrays memory-mapped from the files being replaced) is read whole first."""
        from .atomic_file import _writes, naming_the_file, temporary_name

        path = os.fspath(path)
        if os.path.exists(path) and not os.path.isdir(path):  # makedirs said only "File exists"
            raise FileExistsError(errno.EEXIST, f"Dataset.save: {path!r} is a file, not a folder: a dataset is a "
                                                "folder of .npy files (give a folder's path)")
        os.makedirs(path, exist_ok=True)
        meta = os.path.join(path, "meta.json")
        files = {name: os.path.join(path, name + ".npy") for name in _v.FILES if getattr(self, name) is not None}
        temps = []
        try:
            for name, file in [*files.items(), ("meta", meta)]:
                temps.append(temporary_name(file, os.getpid(), next(_writes)))  # its own, whoever else writes
                try:
                    with open(temps[-1], "wb") as f:
                        if name == "meta":
                            f.write(json.dumps(self.meta, indent=1).encode())
                        else:
                            _write_npy(f, np.asarray(getattr(self, name)))
                        f.flush()
                        os.fsync(f.fileno())
                except OSError as e:
                    raise naming_the_file(e, file) from None
            if os.path.lexists(meta):
                os.remove(meta)
            for tmp, file in zip(temps, files.values()):
                os.replace(tmp, file)
            for name in _v.FILES:  # an array of the old dataset that this one does not have
                stale = os.path.join(path, name + ".npy")
                if name not in files and os.path.lexists(stale):
                    os.remove(stale)
            os.replace(temps[-1], meta)
        except BaseException:  # including KeyboardInterrupt: no temporary is left behind
            for tmp in temps:
                try:
                    os.remove(tmp)
                except OSError:
                    pass
            raise
        return path

    @property
    def fingerprint(self) -> str:
        """A CRC-32 of the vocabularies, T and every array, with the position count: two
        datasets with the same fingerprint hold the same positions (checkpoints record it,
        and resuming on another dataset is refused). Computed once, reading every file."""
        if self._fingerprint is None:
            self._check_files()
            crc = zlib.crc32(json.dumps([self.num_tokens, self.num_moves, self.tokens_per_side]).encode())
            for name in _v.FILES:
                arr = getattr(self, name)
                if arr is None:
                    continue
                crc = zlib.crc32(f"{name}:{arr.dtype.str}:{arr.shape}".encode(), crc)
                flat = arr.reshape(-1)
                step = max(1, (16 << 20) // max(1, arr.itemsize))
                for a in range(0, flat.shape[0], step):  # chunks: a memory map is never read whole
                    crc = zlib.crc32(np.ascontiguousarray(flat[a:a + step]).view(np.uint8), crc)
            self._fingerprint = f"{len(self)}-{crc:08x}"
        return self._fingerprint

    # ------------------------------------------------------------------ inspection
    def __len__(self) -> int:
        return self.tokens.shape[0]

    def __getitem__(self, i: int) -> Position:
        n = len(self)
        if not isinstance(i, (int, np.integer)):
            raise TypeError(f"Dataset indices must be integers, got {type(i).__name__}")
        if i < -n or i >= n:
            raise IndexError(f"position {i} is out of range for a dataset of {n}")
        i = int(i) % n
        self._check_files()
        a, b = int(self.legal_offsets[i]), int(self.legal_offsets[i + 1])
        pol = None if self.policy_target is None else np.array(self.policy_target[a:b])
        return Position(i, np.array(self.tokens[i]), np.array(self.legal_moves[a:b]),
                        int(self.target[i]), float(self.value[i]), pol)

    @property
    def num_tokens(self) -> int:
        return self.meta["num_tokens"]

    @property
    def num_moves(self) -> int:
        return self.meta["num_moves"]

    @property
    def tokens_per_side(self) -> int:
        return self.meta["T"]

    @property
    def move_kinds(self) -> int:
        """ModelConfig.move_kinds of a model reading these labels: F > 0 when each label
        names a move and one of F kinds of it (meta "move_kinds", written by shogi records'
        to_dataset), else 0."""
        return int(self.meta.get("move_kinds", 0))

    @property
    def max_legal(self) -> int:
        """The largest legal-move count of any position."""
        return self._stats["max_legal"]

    @property
    def mean_legal(self) -> float:
        return self._stats["mean_legal"]

    def __repr__(self) -> str:
        soft = ", soft targets" if self.policy_target is not None else ""
        where = f", path={self.path!r}" if self.path else ""
        return (f"Dataset({len(self):,} positions, T={self.tokens_per_side}, num_tokens={self.num_tokens}, "
                f"num_moves={self.num_moves}, legal moves {self.mean_legal:.1f} avg / {self.max_legal} max"
                f"{soft}{where})")
