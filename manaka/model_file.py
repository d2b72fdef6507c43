"""manaka's single-file format for models and checkpoints.

Layout (all little-endian):
    8 bytes   magic b"MANAKA\\x00\\x01"
    u64       header length H
    H bytes   JSON header: {"kind", "meta", "tensors": [{"name", "shape", "offset", "nbytes"}],
              "data_bytes", "crc32"}
    padding   to a multiple of 64 bytes
    data      float32 tensors back to back (offsets relative to the start of data)

A file is written to a temporary file in the same directory, flushed to disk, then moved
over the target with os.replace, so a reader never sees a half-written file. A reader
checks the magic, the header, the exact file size (truncation) and a CRC-32 of the data
(corruption) before returning anything.
"""
from __future__ import annotations

import json
import os
import struct
import zlib
from typing import Dict, Iterable, Tuple

import numpy as np

MAGIC = b"MANAKA\x00\x01"
_ALIGN = 64

__all__ = ["write", "read"]


def _pad(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def write(path: str, kind: str, meta: dict, tensors: Iterable[Tuple[str, np.ndarray]]) -> None:
    """Writes float32 `tensors` (name, array) with a JSON-serialisable `meta`, atomically."""
    arrays = [(name, np.ascontiguousarray(arr, dtype="<f4")) for name, arr in tensors]
    entries, offset, crc = [], 0, 0
    for name, arr in arrays:
        entries.append({"name": name, "shape": list(arr.shape), "offset": offset, "nbytes": arr.nbytes})
        offset += _pad(arr.nbytes)
        crc = zlib.crc32(b"\0" * (_pad(arr.nbytes) - arr.nbytes), zlib.crc32(arr.data, crc))
    header = json.dumps({"kind": kind, "meta": meta, "tensors": entries, "data_bytes": offset,
                         "crc32": crc}).encode()
    start = _pad(len(MAGIC) + 8 + len(header))
    path = os.fspath(path)
    tmp = os.path.join(os.path.dirname(os.path.abspath(path)),
                       f".{os.path.basename(path)}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(MAGIC + struct.pack("<Q", len(header)) + header)
            f.write(b"\0" * (start - f.tell()))
            for name, arr in arrays:
                f.write(arr.data)
                f.write(b"\0" * (_pad(arr.nbytes) - arr.nbytes))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def read(path: str, kind: str) -> Tuple[dict, Dict[str, np.ndarray]]:
    """(meta, {name: float32 array}) of a file written by :func:`write` with this `kind`.

    Raises ValueError saying what is wrong for a foreign, truncated or corrupt file."""
    path = os.fspath(path)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(len(MAGIC) + 8)
        if len(head) < len(MAGIC) + 8 or head[:len(MAGIC)] != MAGIC:
            raise ValueError(f"{path!r} is not a manaka file (bad magic bytes)")
        (length,) = struct.unpack("<Q", head[len(MAGIC):])
        if length > size:
            raise ValueError(f"{path!r} is truncated: its header claims {length} bytes, the file has {size}")
        try:
            header = json.loads(f.read(length).decode())
            entries, data_bytes, crc = header["tensors"], int(header["data_bytes"]), int(header["crc32"])
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
            raise ValueError(f"{path!r} has a corrupt header: {e}") from None
        if header.get("kind") != kind:
            raise ValueError(f"{path!r} holds a {header.get('kind')!r}, not a {kind!r}")
        start = _pad(len(MAGIC) + 8 + length)
        if size != start + data_bytes:
            what = "truncated" if size < start + data_bytes else "longer than its header says"
            raise ValueError(f"{path!r} is {what}: expected {start + data_bytes} bytes, found {size}")
        out, check, offset = {}, 0, 0
        f.seek(start)
        for e in entries:  # back to back, in order: the checksum covers every data byte
            shape = tuple(int(d) for d in e["shape"])
            arr = np.empty(shape, dtype="<f4")
            if arr.nbytes != e["nbytes"] or e["offset"] != offset or offset + _pad(arr.nbytes) > data_bytes:
                raise ValueError(f"{path!r} has a corrupt header: tensor {e['name']!r} does not fit")
            pad = bytearray(_pad(arr.nbytes) - arr.nbytes)
            if f.readinto(memoryview(arr).cast("B")) != arr.nbytes or f.readinto(pad) != len(pad):
                raise ValueError(f"{path!r} is truncated inside tensor {e['name']!r}")
            check = zlib.crc32(pad, zlib.crc32(arr.data, check))
            offset += _pad(arr.nbytes)
            out[e["name"]] = arr.astype(np.float32, copy=False)
        if check != crc:
            raise ValueError(f"{path!r} is corrupt: the data checksum does not match its header")
    return header["meta"], out
