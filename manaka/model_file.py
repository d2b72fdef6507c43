"""manaka's single-file container for models and checkpoints (docs/design.md, File formats).

Layout of version 2 (all little-endian):
    8 bytes   magic b"MANAKA\\x00\\x02"
    u64       header length H
    u32       CRC-32 of the header bytes
    4 bytes   zero
    H bytes   JSON header: {"kind", "meta", "tensors": [{"name", "dtype", "shape", "offset",
              "nbytes"}], "data_bytes", "crc32"}
    zeros     to a multiple of 64 bytes
    data      the tensors back to back, each padded with zeros to a multiple of 64 bytes
              (offsets relative to the start of data); crc32 is the CRC-32 of all of it

Version 1 (magic b"MANAKA\\x00\\x01", no header CRC, float32 only) is still read.

Nothing in a file is executed: the header is JSON, the data raw numbers. A reader checks
the magic, the header's checksum, every tensor's dtype, shape, offset and size against
the header and the header against the file's real size, all before allocating anything
(so a crafted 256-byte file cannot make it allocate gigabytes), then the data's checksum.
Every failure is one exception type, chosen by the caller (ModelFileError,
CheckpointError), whose message names the file and what is wrong.

Files are written with manaka.atomic_file: a reader sees the old file or the new one.
"""
from __future__ import annotations

import json
import os
import stat
import struct
import zlib
from typing import Dict, Iterable, Tuple, Type

import numpy as np

from .atomic_file import atomic_write
from .errors import FileFormatError

MAGIC_V1 = b"MANAKA\x00\x01"
MAGIC = b"MANAKA\x00\x02"
_ALIGN = 64
_MAX_HEADER = 64 << 20  # a header is names and shapes: far below this for any real file
# The largest product of a shape's non-zero dimensions (in bytes) any real tensor has, far
# below what NumPy can describe (2**63): [0, 2**62] holds no byte but is not an array.
_MAX_EXTENT = 1 << 48
# dtypes a tensor may have: what models (float32) and checkpoints (also counters) hold
DTYPES = ("<f4", "<f8", "<i4", "<i8", "|u1", "<u4", "<u8")

__all__ = ["write", "read", "refuse_special", "MAGIC", "DTYPES"]


def _pad(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _le(arr: np.ndarray) -> np.ndarray:
    dtype = arr.dtype.newbyteorder("<") if arr.dtype.byteorder not in "<|" else arr.dtype
    out = np.ascontiguousarray(arr, dtype=dtype)
    if out.dtype.str not in DTYPES:
        raise TypeError(f"model_file.write: dtype {arr.dtype} cannot be stored (one of {', '.join(DTYPES)})")
    return out


def write(path, kind: str, meta: dict, tensors: Iterable[Tuple[str, np.ndarray]]) -> None:
    """Writes `tensors` (name, array of a dtype in DTYPES) and a JSON-serialisable `meta`,
    atomically; the folder is created when missing."""
    arrays = [(str(name), _le(np.asarray(arr))) for name, arr in tensors]
    entries, offset, crc = [], 0, 0
    for name, arr in arrays:
        entries.append({"name": name, "dtype": np.dtype(arr.dtype).str, "shape": list(arr.shape),
                        "offset": offset, "nbytes": arr.nbytes})
        offset += _pad(arr.nbytes)
        crc = zlib.crc32(bytes(_pad(arr.nbytes) - arr.nbytes), zlib.crc32(arr.reshape(-1).view(np.uint8), crc))
    header = json.dumps({"kind": kind, "meta": meta, "tensors": entries, "data_bytes": offset,
                         "crc32": crc}).encode()
    prefix = MAGIC + struct.pack("<QI4x", len(header), zlib.crc32(header))
    start = _pad(len(prefix) + len(header))
    with atomic_write(path) as f:
        f.write(prefix + header + bytes(start - len(prefix) - len(header)))
        for _, arr in arrays:
            f.write(arr.reshape(-1).view(np.uint8).data)
            f.write(bytes(_pad(arr.nbytes) - arr.nbytes))


def _int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _plan(header: dict, fail) -> list:
    """(name, dtype, shape, nbytes) of every tensor, checked against the header alone."""
    entries, data_bytes = header.get("tensors"), header.get("data_bytes")
    if not isinstance(entries, list) or not _int(data_bytes) or data_bytes < 0 or not _int(header.get("crc32")):
        fail("has a corrupt header: tensors, data_bytes or crc32 is missing or of the wrong type")
    plan, offset, names = [], 0, set()
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or not isinstance(e.get("name"), str):
            fail(f"has a corrupt header: tensor entry {i} is not a named tensor")
        name, dtype, shape = e["name"], e.get("dtype", "<f4"), e.get("shape")
        if name in names:
            fail(f"has a corrupt header: tensor {name!r} appears twice")
        names.add(name)
        if dtype not in DTYPES:
            fail(f"has a corrupt header: tensor {name!r} has dtype {dtype!r} (one of {', '.join(DTYPES)} expected)")
        if not isinstance(shape, list) or len(shape) > 8 or not all(_int(d) and d >= 0 for d in shape):
            fail(f"has a corrupt header: tensor {name!r} has shape {shape!r}")
        nbytes, extent = np.dtype(dtype).itemsize, np.dtype(dtype).itemsize
        for d in shape:  # Python ints: no wrap-around, whatever the header claims
            nbytes *= d
            extent *= max(d, 1)
        if extent > _MAX_EXTENT:  # NumPy refuses such a shape even with a zero dimension
            fail(f"has a corrupt header: tensor {name!r} has shape {shape} (beyond any array's size)")
        if e.get("nbytes") != nbytes or e.get("offset") != offset or offset + _pad(nbytes) > data_bytes:
            fail(f"has a corrupt header: tensor {name!r} (shape {shape}, {nbytes} bytes at offset "
                 f"{e.get('offset')!r}) does not fit the {data_bytes} data bytes it declares")
        plan.append((name, np.dtype(dtype), tuple(shape), nbytes))
        offset += _pad(nbytes)
    if offset != data_bytes:
        fail(f"has a corrupt header: its tensors take {offset} bytes, it declares {data_bytes}")
    return plan


def refuse_special(path, error: Type[FileFormatError] = FileFormatError) -> None:
    """`error` naming `path` when it is a FIFO, socket or device: open() of a FIFO blocks
    until a writer comes (a hang), a device reads forever. A missing file or a folder is left
    to open() (its OSError)."""
    mode = os.stat(path).st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise error(os.fspath(path), "is not a regular file (a FIFO, socket or device)")


def read(path, kind: str, error: Type[FileFormatError] = FileFormatError) -> Tuple[dict, Dict[str, np.ndarray]]:
    """(meta, {name: array}) of a file written by :func:`write` with this `kind`.

    Raises `error` (a FileFormatError) naming the file and what is wrong for a foreign,
    truncated or corrupt file; OSError if it cannot be opened."""
    path = os.fspath(path)

    def fail(message):
        raise error(path, message)

    refuse_special(path, error)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(len(MAGIC) + 8)
        if len(head) < len(MAGIC) + 8 or head[:len(MAGIC)] not in (MAGIC, MAGIC_V1):
            if head[:1] == b"\x80":
                fail("is a pickle, not a manaka file (old checkpoints were pickles: "
                     "see python -m manaka.checkpoint convert)")
            fail("is not a manaka file (bad magic bytes)")
        version = 2 if head[:len(MAGIC)] == MAGIC else 1
        (length,) = struct.unpack("<Q", head[len(MAGIC):])
        if version == 2:
            extra = f.read(8)
            if len(extra) < 8:
                fail(f"is truncated: {size} bytes, shorter than the fixed part of the header")
            header_crc, reserved = struct.unpack("<I4s", extra)
            if reserved != bytes(4):
                fail("has a corrupt header: its reserved bytes are not zero")
        prefix = f.tell()
        if length > size - prefix or length > _MAX_HEADER:
            fail(f"is truncated or corrupt: its header claims {length} bytes, the file has {size}")
        raw = f.read(length)
        if version == 2 and zlib.crc32(raw) != header_crc:
            fail("has a corrupt header: its checksum does not match")
        try:
            header = json.loads(raw.decode())
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            fail(f"has a corrupt header: {type(e).__name__}: {e}")
        if not isinstance(header, dict) or not isinstance(header.get("meta"), dict):
            fail("has a corrupt header: not a JSON object with a meta object")
        if header.get("kind") != kind:
            fail(f"holds a {header.get('kind')!r}, not a {kind!r}")
        plan = _plan(header, fail)
        start = _pad(prefix + length)
        if size != start + header["data_bytes"]:
            what = "truncated" if size < start + header["data_bytes"] else "longer than its header says"
            fail(f"is {what}: expected {start + header['data_bytes']} bytes, found {size}")
        if version == 2 and f.read(start - prefix - length) != bytes(start - prefix - length):
            fail("is corrupt: the padding after its header is not zero")
        f.seek(start)
        out, check = {}, 0
        for name, dtype, shape, nbytes in plan:  # sizes are checked: each allocation fits the file
            buf = np.empty(nbytes, np.uint8)
            pad = bytearray(_pad(nbytes) - nbytes)
            if f.readinto(memoryview(buf)) != nbytes or f.readinto(pad) != len(pad):
                fail(f"is truncated inside tensor {name!r}")
            check = zlib.crc32(pad, zlib.crc32(buf, check))
            out[name] = buf.view(dtype).reshape(shape).astype(dtype.newbyteorder("="), copy=False)
        if check != header["crc32"]:
            fail("is corrupt: the data checksum does not match its header")
    return header["meta"], out
