"""Writing a file so that a reader, a crash or ``kill -9`` never sees half of it.

The bytes go to ``.<name>.tmp-<pid>.<n>`` (n numbers this process's writes) in the
destination's folder, are flushed and fsynced, the temporary is renamed over the
destination (``os.replace``, atomic on POSIX), and the folder is fsynced so the rename
itself survives a power loss. The folder is
created when missing. A symbolic link is written through: its target gets the new bytes and
the link stays (renaming over the link would have left the target, which the link's user
reads, with the old content). A FIFO, device or socket at the destination is never replaced
(FileExistsError). A process killed mid-write leaves its temporary behind; the next
write of the same destination removes temporaries whose process is gone.
"""
from __future__ import annotations

import errno
import itertools
import os
import re
import stat
import tempfile
from contextlib import contextmanager
from typing import BinaryIO, Iterator, Optional

__all__ = ["atomic_write", "naming_the_file", "temporary_name", "unwritable"]


# Each write's own number within this process: two threads writing one destination at once
# (Model.save of two models to one path) shared ``.<name>.tmp-<pid>``, each truncating and
# writing the other's temporary (a file of both, which the CRC refused) and failing its rename
# with a FileNotFoundError once the other had moved it.
_writes = itertools.count()


# The errors of a write to a file (no filename in them): a full disk, a quota, a size limit, a
# failing device.
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)


def naming_the_file(error: OSError, path) -> OSError:
    """`error`, or where it is a write's error that names no file (a full disk...), the same
    error naming `path`, the file being written."""
    if error.filename is None and error.errno in _NO_ROOM:
        return type(error)(error.errno, f"cannot write {os.fsdecode(os.fspath(path))!r}: {error.strerror}")
    return error


def temporary_name(path: str, pid: int, write: Optional[int] = None) -> str:
    """``.<name>.tmp-<pid>``, or ``.<name>.tmp-<pid>.<write>`` for one write of several."""
    folder, base = os.path.split(os.path.abspath(path))
    return os.path.join(folder, f".{base}.tmp-{pid}" + ("" if write is None else f".{write}"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _remove_stale(path: str) -> None:
    """Removes temporaries of `path` left by processes that no longer exist."""
    folder, base = os.path.split(os.path.abspath(path))
    # ".tmp-<pid>.<write>" and ".tmp-<pid>" today; ".tmp<pid>" was written by earlier model files
    pattern = re.compile(re.escape(f".{base}.tmp") + r"-?(\d+)(?:\.\d+)?$")
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        m = pattern.match(name)
        if m and int(m.group(1)) != os.getpid() and not _alive(int(m.group(1))):
            try:
                os.remove(os.path.join(folder, name))
            except OSError:
                pass  # another writer removed it first, or we may not: not our file to fight over


def _fsync_dir(folder: str) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as e:  # some filesystems cannot fsync a directory
        if e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def _destination(path) -> str:
    """The file a write of `path` replaces: `path`, or the end of its chain of symbolic links."""
    path = os.fsdecode(os.fspath(path))  # a bytes path too (the temporaries' names are str)
    if not os.path.islink(path):
        return path
    try:
        return os.path.realpath(path, strict=True)
    except FileNotFoundError:  # a link to a file not yet made: it is made there
        return os.path.realpath(path)
    except OSError as e:  # a loop of links: no file to write
        raise OSError(e.errno, f"cannot write {path!r}: {e.strerror} (its symbolic links never reach a file)") from None


def _special(path: str) -> str:
    """"a FIFO" / "a device" / "a socket" when `path` is one (not a link to one), else "".
    os.replace would put the new file in its place: Model.save("/dev/null") run as root
    replaced the device node with a regular file."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return ""
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket" if stat.S_ISSOCK(mode) else ""


def _names_a_folder(path) -> bool:
    """Whether `path` ends with a separator ("runs/new/"): abspath drops it, so the file was
    to be written as "runs/new", and the rename onto "runs/new/" failed with "Not a directory"
    once the work was done."""
    text = os.fsdecode(os.fspath(path))
    return text.endswith(tuple(sep for sep in (os.sep, os.altsep) if sep)) and not os.path.isdir(text)


def _can_create_in(folder: str) -> bool:
    """Whether a file can be made in `folder`, found by making one (an unnamed one where the
    filesystem allows, removed at once): os.access says yes to root for any folder, /proc
    and a read-only mount's included, where the write then failed at the end."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


def unwritable(path) -> str:
    """Why atomic_write(path) could not write `path` for its folder, or "": the nearest of its
    folders that exists (atomic_write makes the others) is a file, or is not writable. For a
    caller that writes only at the end of long work, to refuse before the work is done."""
    if _names_a_folder(path):
        return "it ends with a path separator, which names a folder, not a file"
    try:
        path = _destination(path)
    except OSError:
        return "its symbolic links never reach a file (a loop)"
    folder = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        return f"{folder} is a file, not a folder"
    if not os.access(folder, os.W_OK | os.X_OK) or not _can_create_in(folder):
        return f"the folder {folder} is not writable"
    kind = _special(path)
    return f"it is {kind}, not a regular file (it is never replaced)" if kind else ""


@contextmanager
def atomic_write(path) -> Iterator[BinaryIO]:
    """``with atomic_write(path) as f: f.write(...)``: `path` holds the new bytes once the
    block ends, and its old content (or nothing) if the block raises."""
    if _names_a_folder(path):
        raise IsADirectoryError(errno.EISDIR, f"cannot write {os.fsdecode(os.fspath(path))!r}: it ends with a path "
                                              "separator, which names a folder, not a file")
    path = _destination(path)
    if not path:  # abspath("") is the working folder: its name would be written in its parent
        raise FileNotFoundError(errno.ENOENT, "cannot write '': the path is empty")
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise type(e)(e.errno, f"cannot create the folder {folder!r} to write {path!r}: {e.strerror}") from None
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, f"cannot write {path!r}: it is a directory")
    kind = _special(path)
    if kind:
        raise FileExistsError(errno.EEXIST, f"cannot write {path!r}: it is {kind}, not a regular file, "
                                            "and is never replaced")
    _remove_stale(path)
    tmp = temporary_name(path, os.getpid(), next(_writes))
    try:
        f = open(tmp, "wb")
    except OSError as e:  # the message names the file asked for, not our temporary
        raise type(e)(e.errno, f"cannot write {path!r}: cannot create a file in {folder!r}: {e.strerror}") from None
    try:
        with f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        _discard(tmp)
        raise naming_the_file(e, path) from None
    except BaseException:  # including KeyboardInterrupt: never leave our temporary behind
        _discard(tmp)
        raise
    _fsync_dir(folder)


def _discard(tmp: str) -> None:
    try:
        os.remove(tmp)
    except OSError:
        pass
