"""dlshogi HCPE and YaneuraOu PSV files as manaka datasets (docs/shogi.md).

Records are read memory-mapped and decoded in C (csrc/shogi/records.c): the position,
its legal moves (dlshogi labels, sorted), the tokens, the played move's index and the
value. Bad data is an error naming the file and the record, or with ``on_bad="skip"`` is
counted (``dataset.meta["skipped"]``) and left out.
"""
from __future__ import annotations

import glob
import os
from typing import Dict, List, Sequence, Tuple, Union

import numpy as np

from .. import _core
from ..dataset import Dataset
from .position import NUM_LABELS, NUM_TOKENS

__all__ = ["HCPE", "PSV", "RECORD_BYTES", "expand_paths", "read_records", "decode", "value_weight",
           "open_hcpe", "open_psv", "open_records"]

HCPE, PSV = 0, 1
RECORD_BYTES = {HCPE: 38, PSV: 40}
_NAMES = {HCPE: "HCPE", PSV: "PSV"}
_SUFFIX = {HCPE: (".hcpe",), PSV: (".bin", ".psv")}


def expand_paths(paths, fmt: int) -> List[str]:
    """A list, a glob or a folder (its files with the format's suffix) -> sorted file paths."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: List[str] = []
    for p in paths:
        p = os.fspath(p)
        if os.path.isdir(p):
            out += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(_SUFFIX[fmt]))
        elif any(ch in p for ch in "*?["):
            found = sorted(glob.glob(p))
            if not found:
                raise ValueError(f"shogi: no file matches {p!r}")
            out += found
        elif os.path.isfile(p):
            out.append(p)
        else:
            raise ValueError(f"shogi: {p!r} is neither a file, a folder nor a glob that matches")
    if not out:
        raise ValueError(f"shogi: no {_NAMES[fmt]} file in {paths!r}")
    return out


def value_weight(value: Union[str, float]) -> float:
    """value= -> the weight λ of the evaluation: "result" 0, "eval" 1, a float in [0, 1]
    the mix (1 - λ) result + λ sigmoid(eval / 756)."""
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


def read_records(path: str, fmt: int, on_bad: str = "raise") -> Tuple[np.ndarray, int]:
    """(records uint8 [N, record bytes] memory-mapped, trailing bytes ignored). A size that
    is not a multiple of the record size is an error unless on_bad="skip"."""
    _check_on_bad(on_bad)
    size, width = os.path.getsize(path), RECORD_BYTES[fmt]
    extra = size % width
    if extra and on_bad == "raise":
        raise ValueError(f"shogi: {path}: {size} bytes is not a whole number of {width}-byte {_NAMES[fmt]} "
                         f"records (record {size // width} is cut short; on_bad='skip' ignores it)")
    n = size // width
    if n == 0:
        return np.zeros((0, width), np.uint8), extra
    return np.memmap(path, np.uint8, "r", shape=(n, width)), extra


def decode(records: np.ndarray, fmt: int):
    """(board [N, 81], hand [N, 2, 7], side [N], move16 [N], eval [N], result [N], status [N])."""
    return _core.shogi_decode(fmt, records)


def open_records(paths, fmt: int, value: Union[str, float] = "result", on_bad: str = "raise") -> Dataset:
    """Every record of `paths` (a list, a glob or a folder) as one manaka.Dataset."""
    _check_on_bad(on_bad)
    weight = value_weight(value)
    files = expand_paths(paths, fmt)
    parts, skipped, sources = [], 0, []
    for path in files:
        records, extra = read_records(path, fmt, on_bad)
        skipped += extra > 0
        tokens, offsets, labels, target, val, status = _core.shogi_rows(fmt, records, weight)
        bad = np.nonzero(status)[0]
        if len(bad) and on_bad == "raise":
            i = int(bad[0])
            raise ValueError(f"shogi: {path}: record {i}: {_core.shogi_reason(int(status[i]))} "
                             f"({len(bad)} bad record(s) in this file; on_bad='skip' leaves them out)")
        keep = status == 0
        skipped += int((~keep).sum())
        counts = np.diff(offsets)[keep]
        labels = labels[np.repeat(keep, np.diff(offsets))]
        parts.append((tokens[keep], counts, labels, target[keep], val[keep]))
        sources.append({"file": path, "records": int(len(records)), "bad": int(len(bad)) + (extra > 0)})
    tokens = np.concatenate([p[0] for p in parts])
    counts = np.concatenate([p[1] for p in parts])
    if len(tokens) == 0:
        raise ValueError(f"shogi: no usable record in {files!r}")
    offsets = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    meta = {"shogi_format": _NAMES[fmt], "value": value if isinstance(value, str) else float(value),
            "skipped": skipped, "files": sources}
    return Dataset.from_arrays(tokens=tokens, legal_offsets=offsets, legal_moves=np.concatenate([p[2] for p in parts]),
                               target=np.concatenate([p[3] for p in parts]), value=np.concatenate([p[4] for p in parts]),
                               num_tokens=NUM_TOKENS, num_moves=NUM_LABELS, meta=meta)


def open_hcpe(paths, value: Union[str, float] = "result", on_bad: str = "raise") -> Dataset:
    """dlshogi HCPE files (38-byte records) as one Dataset: see :func:`open_records`."""
    return open_records(paths, HCPE, value, on_bad)


def open_psv(paths, value: Union[str, float] = "result", on_bad: str = "raise") -> Dataset:
    """YaneuraOu PackedSfenValue files (40-byte records) as one Dataset."""
    return open_records(paths, PSV, value, on_bad)
