"""Memory-mapped files cut in place under their map: reading the lost pages is a SIGBUS, which
kills the process (the Loader's producers catch it; a read in Python cannot). Datasets and
shogi record files note each file's inode and mapped size when opened and ask `shorter_now`
before a Python read. A file replaced by another (renamed over, as Dataset.save and convert
do) or removed is no fault: the map holds the one that was opened."""
import os
from typing import Optional, Tuple


def file_inode(path: str) -> Tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def shorter_now(path: str, size: int, inode: Tuple[int, int]) -> Optional[int]:
    """`path`'s size in bytes when it is still the file `inode` and now holds fewer than
    `size` bytes (cut in place); else None."""
    try:
        st = os.stat(path)
    except OSError:  # removed: its pages live as long as the map
        return None
    return st.st_size if (st.st_dev, st.st_ino) == tuple(inode) and st.st_size < size else None
