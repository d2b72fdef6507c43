"""dlshogi's hcpe3 self-play files as a manaka dataset with soft policy targets (docs/shogi.md).

An hcpe3 file is a run of games of variable length: a 36-byte header (the starting
position's HCPE Huffman code, the number of moves, the result, the opponent), then per
position a 6-byte MoveInfo (the selected move, the eval, the number of candidates) and
that many 4-byte MoveVisits (a candidate move and its visit count). The layout is
csrc/shogi/hcpe3.h's; :data:`GAME_DTYPE`, :data:`MOVE_INFO_DTYPE` and
:data:`MOVE_VISITS_DTYPE` are dlshogi's numpy dtypes of its three parts.

At open, C code (csrc/shogi/hcpe3.c) walks every game once, replays it with the legal
selected moves, checks each record and keeps, per record (a position with candidates;
index = (game, ply)), the position as an HCPE record and the offset of its candidate list.
The Loader's producers then decode a record like an HCPE record and make its soft policy
target from the candidates: each legal move's visits over all the candidates' visits.
The value is the game's result (or the eval mixed in, ``value=``) as for HCPE.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Union

import numpy as np

from .. import _core
from ..dataset import Dataset, Position
from .position import kinds_meta
from .eval_scale import EVAL_SCALE, check_eval_scale
from ..mapped_files import file_inode
from .records import HCPE, RecordFiles, _check_on_bad, _scale_text, expand_paths, resolve_eval_scale, value_weight

__all__ = ["open_hcpe3", "Hcpe3Files", "GAME_DTYPE", "MOVE_INFO_DTYPE", "MOVE_VISITS_DTYPE"]

GAME_DTYPE = np.dtype([("hcp", np.uint8, 32), ("moveNum", "<u2"), ("result", np.uint8), ("opponent", np.uint8)])
MOVE_INFO_DTYPE = np.dtype([("selectedMove16", "<u2"), ("eval", "<i2"), ("candidateNum", "<u2")])
MOVE_VISITS_DTYPE = np.dtype([("move16", "<u2"), ("visitNum", "<u2")])


def _read_bytes(path: str) -> np.ndarray:
    size = os.path.getsize(path)
    return np.memmap(path, np.uint8, "r", shape=(size,)) if size else np.zeros(0, np.uint8)


class Hcpe3Files(RecordFiles):
    """hcpe3 files as one dataset: ``len(ds)`` records (positions with candidates),
    ``ds[i]`` a :class:`manaka.Position` with its ``policy_target``, and the Loader, fit and
    evaluate accept it (its batches carry ``policy_target``).

    Faults are found at open: a game cut short by the end of its file, a starting position
    that is not valid, a result out of range, a selected move that is not legal, a
    candidate that is not a legal move, candidates with no visits. With ``on_bad="raise"``
    the first is a ValueError naming the file, the record, the game and the ply; with
    ``on_bad="skip"`` the records it spoils are left out (a bad start or result: the game's;
    an illegal selected move: the rest of the game; a bad candidate list: that record; a
    game cut short: the game) and counted in ``meta["skipped"]``.

    ``game[i]``/``ply[i]`` via :meth:`where`. Memory: 58 bytes per record are kept in RAM (the
    position as an HCPE record, the candidate list's offset, the game and the ply); the
    files themselves are memory-mapped.
    """

    def __init__(self, paths, value: Union[str, float] = "result", on_bad: str = "raise", moves: str = "dlshogi",
                 eval_scale: Union[float, str] = EVAL_SCALE):
        _check_on_bad(on_bad)
        scale = check_eval_scale(eval_scale)
        self._take_moves(moves)
        self.format, self.value, self.on_bad = HCPE, value, on_bad
        self.mirror = False  # a mirrored row's candidates would need mirroring too: not offered
        self.eval_weight = value_weight(value)
        self.files = expand_paths(paths, "hcpe3")
        self._arrays, self._raw, self._info, self._game, self._ply = [], [], [], [], []
        self._sizes, self._inodes = [], []  # each file's bytes and inode when opened (its identity)
        self.cut_short, skipped = 0, 0
        for path in self.files:
            raw = _read_bytes(path)
            hcpe, info, game, ply, bad, n, fault = _core.shogi_hcpe3_index(raw, on_bad == "skip")
            if fault is not None:
                code, record, g, p = fault
                raise ValueError(f"shogi: {path}: record {record} (game {g}, ply {p}): "
                                 f"{_core.shogi_hcpe3_reason(code)} (on_bad='skip' leaves such records out)")
            skipped += bad
            self._arrays.append(np.ascontiguousarray(hcpe[:n]))
            self._raw.append(raw)
            self._sizes.append(len(raw))
            self._inodes.append(file_inode(path))
            self._info.append(np.ascontiguousarray(info[:n]))
            self._game.append(game[:n].copy())
            self._ply.append(ply[:n].copy())
        self._starts = np.cumsum([0] + [len(a) for a in self._arrays])
        if self._starts[-1] == 0:
            raise ValueError(f"shogi: no usable hcpe3 record in {self.files!r}")
        self.eval_scale = resolve_eval_scale(scale, self.eval_weight, self._arrays, HCPE, self.files)
        keep = [i for i, a in enumerate(self._arrays) if len(a)]
        soft = [(self._raw[i], self._info[i]) for i in keep]
        self._row_source = _core.GameRecords(_core.shogi_game(HCPE, self.eval_weight, False, self._encoding, soft,
                                                              self._scale),
                                             [self._arrays[i] for i in keep], [self.files[i] for i in keep], on_bad == "skip")
        self.skipped = skipped
        self.meta = {"shogi_format": "hcpe3", "value": value if isinstance(value, str) else float(value),
                     "files": len(self.files), "skipped": skipped, "moves": self.moves}
        if self.eval_scale is not None:
            self.meta["eval_scale"] = self.eval_scale

    def where(self, i: int):
        """(file, game, ply) of dataset index i."""
        f = int(np.searchsorted(self._starts, i, side="right")) - 1
        k = int(i - self._starts[f])
        return self.files[f], int(self._game[f][k]), int(self._ply[f][k])

    def _policy(self, f: int, rows: np.ndarray, labels: np.ndarray, offsets: np.ndarray):
        side = (self._arrays[f][rows, 0] & 1).astype(np.uint8)
        return _core.shogi_hcpe3_policy(self._raw[f], self._info[f][rows], side, labels.astype(np.int32),
                                        offsets.astype(np.int64))

    def __getitem__(self, i: int) -> Position:
        pos = super().__getitem__(i)
        i = int(i) % len(self)
        f = int(np.searchsorted(self._starts, i, side="right")) - 1
        k = i - int(self._starts[f])
        policy, status = self._policy(f, np.array([k]), pos.legal_moves, np.array([0, len(pos.legal_moves)]))
        if status[0]:
            path, g, p = self.where(i)
            raise ValueError(f"shogi: {path}: record {k} (game {g}, ply {p}): {_core.shogi_hcpe3_reason(int(status[0]))}")
        return dataclasses.replace(pos, policy_target=policy)

    def to_dataset(self) -> Dataset:
        """Every record decoded now into an in-memory Dataset with policy_target."""
        parts = []
        for f, (path, records) in enumerate(zip(self.files, self._arrays)):
            if not len(records):
                continue
            tokens, offsets, labels, target, val, status = _core.shogi_rows(HCPE, records, self.eval_weight, False,
                                                                            self._encoding, self._scale)
            policy, pstatus = self._policy(f, np.arange(len(records)), labels, offsets)
            status = np.where(status != 0, status, pstatus)
            bad = np.nonzero(status)[0]
            if len(bad):  # the index checked every record: only a file changed since reaches here
                i = int(bad[0])
                raise ValueError(f"shogi: {path}: record {i}: {_core.shogi_hcpe3_reason(int(status[i]))} "
                                 "(the file changed since it was opened?)")
            parts.append((tokens, np.diff(offsets), labels, target, val, policy))
        counts = np.concatenate([p[1] for p in parts])
        offsets = np.zeros(len(counts) + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        return Dataset.from_arrays(tokens=np.concatenate([p[0] for p in parts]), legal_offsets=offsets,
                                   legal_moves=np.concatenate([p[2] for p in parts]),
                                   target=np.concatenate([p[3] for p in parts]),
                                   value=np.concatenate([p[4] for p in parts]),
                                   policy_target=np.concatenate([p[5] for p in parts]),
                                   num_tokens=self.num_tokens, num_moves=self.num_moves,
                                   meta={**self.meta, **kinds_meta(self.move_kinds)})

    def __repr__(self) -> str:
        return (f"shogi.Hcpe3Files({len(self):,} records in {len(self.files)} file(s), value={self.value!r}"
                f"{_scale_text(self.eval_scale)}, "
                f"on_bad={self.on_bad!r}, skipped={self.skipped})")


def open_hcpe3(paths, value: Union[str, float] = "result", on_bad: str = "raise",
               moves: str = "dlshogi", eval_scale: Union[float, str] = EVAL_SCALE) -> Hcpe3Files:
    """dlshogi hcpe3 files (a list, a glob or a folder of ``*.hcpe3``) as one dataset with
    soft policy targets (visit counts), labels in encoding `moves` and the evaluation read
    as sigmoid(eval / eval_scale) (RecordFiles): see :class:`Hcpe3Files`."""
    return Hcpe3Files(paths, value, on_bad, moves, eval_scale)
