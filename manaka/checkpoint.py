"""Checkpoints of a training run: model, optimizer, schedule position and loader position.

A checkpoint is one pickle file written atomically: to a temporary file in the same folder,
flushed and fsynced, then moved over the target with os.replace. An interruption (Ctrl-C,
a crash) leaves either the previous checkpoint or the new one, never a partial file.
Pickle, because state dicts hold NumPy arrays and small scalars, which it restores bit for
bit; only load checkpoints you wrote yourself (pickle runs code from the file).
"""
from __future__ import annotations

import os
import pickle
from typing import Any, Dict

FORMAT = "manaka-checkpoint"
VERSION = 1


def save(path: str, state: Dict[str, Any]) -> str:
    """Writes `state` to `path` atomically. Returns the path."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{os.path.basename(path)}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            pickle.dump({"format": FORMAT, "version": VERSION, **state}, f, protocol=pickle.HIGHEST_PROTOCOL)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:  # including KeyboardInterrupt: never leave the temporary behind
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def load(path: str) -> Dict[str, Any]:
    """Reads a checkpoint written by :func:`save`."""
    with open(path, "rb") as f:
        state = pickle.load(f)
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"{path}: not a manaka checkpoint")
    if state.get("version") != VERSION:
        raise ValueError(f"{path}: checkpoint version {state.get('version')} is not supported (this manaka reads {VERSION})")
    return state
