"""What identifies a set of shogi record files, for checkpoints (``RecordFiles.identity``).

A checkpoint of ``mk.fit`` records its training data, and resuming on other data is
refused: the data order is a function of the loader's seed and the positions, so another
set of records would silently continue a different run. Record files are too large to hash
whole at every start, so the identity is: the format, the record count, each file's name
(without its folder, so that a moved folder still resumes) and size, a CRC-32 of sampled
records (4096 spread evenly, plus each file's first and last), and the value and on_bad
options (the targets and the skipped records depend on them).
"""
from __future__ import annotations

import json
import os
import zlib
from typing import List

import numpy as np

from .eval_scale import EVAL_SCALE

__all__ = ["identity", "fingerprint", "differences", "SAMPLES"]

SAMPLES = 4096


def _sample_indices(counts: List[int]) -> np.ndarray:
    """Dataset indices of the sampled records: evenly spread, and each file's ends."""
    n = int(sum(counts))
    picks = set(np.linspace(0, n - 1, min(n, SAMPLES)).astype(np.int64).tolist())
    start = 0
    for c in counts:
        if c:
            picks.update((start, start + c - 1))
        start += c
    return np.array(sorted(picks), np.int64)


def identity(ds) -> dict:
    """The identity of a ``shogi.RecordFiles`` (see the module's docstring): of the records
    it opened. The sizes are the files' when opened and the sampled indices its own records':
    the files' sizes now (a file appended to since, a training file selfplay still writes)
    sampled records it does not hold, and an hcpe3 file's bytes / 38 (its games are of any
    length) indices past its last record: an IndexError at fit's first checkpoint, after
    the training."""
    from .records import RECORD_BYTES

    width = RECORD_BYTES[ds.format]
    sizes = list(ds._sizes)
    ds.check_files()  # a cut mapping reads as SIGBUS, which kills the process
    counts = [len(a) for a in ds._arrays]
    legacy = [s // width for s in sizes]  # the sampling checkpoints were saved with, where it fits
    crc = 0
    picks = _sample_indices(legacy if sum(legacy) <= sum(counts) and ds.meta["shogi_format"] == "hcpe3" else counts)
    for i in picks:
        crc = zlib.crc32(np.ascontiguousarray(ds.record(int(i))).tobytes(), zlib.crc32(int(i).to_bytes(8, "little"), crc))
    out = {"format": ds.meta["shogi_format"], "records": len(ds),
           "files": [[os.path.basename(f), s] for f, s in zip(ds.files, sizes)],
           "sampled": len(picks), "sample_crc32": f"{crc:08x}",
           "value": ds.meta["value"], "on_bad": ds.on_bad}
    if getattr(ds, "mirror", False):  # only when set: identities saved before mirror= stay valid
        out["mirror"] = True
    scale = getattr(ds, "eval_scale", None)
    if scale is not None and scale != EVAL_SCALE:  # only when not dlshogi's 756, the scale before eval_scale=
        out["eval_scale"] = scale
    return out


def fingerprint(ident: dict) -> str:
    """A short string of an identity: the record count and a CRC-32 of the rest."""
    return f"{ident['records']}-{zlib.crc32(json.dumps(ident, sort_keys=True).encode()):08x}"


def differences(saved: dict, mine: dict) -> List[str]:
    """What differs between the identity `saved` in a checkpoint and this run's, in words."""
    out = []
    for key, what in (("format", "format"), ("value", "value="), ("on_bad", "on_bad=")):
        if saved.get(key) != mine.get(key):
            out.append(f"{what} {saved.get(key)!r} then, {mine.get(key)!r} now")
    if saved.get("eval_scale", EVAL_SCALE) != mine.get("eval_scale", EVAL_SCALE):
        out.append(f"eval_scale= {saved.get('eval_scale', EVAL_SCALE)!r} then, {mine.get('eval_scale', EVAL_SCALE)!r} now")
    if saved.get("mirror", False) != mine.get("mirror", False):
        out.append(f"mirror= {saved.get('mirror', False)!r} then, {mine.get('mirror', False)!r} now")
    old, new = saved.get("files") or [], mine.get("files") or []
    if len(old) != len(new):
        out.append(f"{len(old)} file(s) then, {len(new)} now")
    for k, (a, b) in enumerate(zip(old, new)):
        if list(a) != list(b):
            out.append(f"file {k + 1} was {a[0]} ({a[1]:,} bytes), is {b[0]} ({b[1]:,} bytes)")
            break
    if not out and saved.get("sample_crc32") != mine.get("sample_crc32"):
        out.append(f"the same file names and sizes, but other records (a CRC-32 of {mine.get('sampled')} "
                   "sampled records differs)")
    if not out and saved != mine:
        out.append("the record count or sampling differs")
    return out
