"""Checkpoints of a training run: model, optimizer, schedule position, loader position.

A checkpoint is a nested dictionary (``fit`` writes step, model, trainer, loader, history,
model_config, dataset) stored in the checksummed container of model files
(manaka/model_file.py, kind ``"checkpoint"``): every NumPy array becomes a tensor of the
file, everything else (ints, floats, strings, lists, dictionaries with string keys) goes
into its JSON header, where each array is replaced by ``{"__tensor__": name}``. Reading
runs no code, checks every size against the file before allocating, and raises
:class:`manaka.CheckpointError` naming the file and what is wrong. Writing is atomic
(manaka/atomic_file.py).

Checkpoints of manaka before this format were pickles, which run code when read; they
are refused. To convert one you trust:

    python -m manaka.checkpoint convert OLD NEW --trust-pickle
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Dict

import numpy as np

from . import model_file
from .errors import CheckpointError

FORMAT = "manaka-checkpoint"
VERSION = 2
KIND = "checkpoint"
_TENSOR = "__tensor__"
CONVERT = "python -m manaka.checkpoint convert OLD NEW --trust-pickle"
# A training state nests a few levels (trainer/exp_avg/pair_table); a header nested far
# deeper is crafted, and must not reach Python's recursion limit.
MAX_DEPTH = 64

__all__ = ["save", "load", "convert", "FORMAT", "VERSION"]


def _encode(value: Any, name: str, tensors: list, depth: int = 0):
    """The JSON form of `value`; its arrays are appended to `tensors` under their path."""
    if depth > MAX_DEPTH:
        raise ValueError(f"checkpoint.save: the state nests deeper than {MAX_DEPTH} levels at {name!r:.200}")
    if isinstance(value, np.ndarray):
        tensors.append((name, value))
        return {_TENSOR: name}
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str) or k == _TENSOR:
                raise TypeError(f"checkpoint.save: key {k!r} at {name or 'the top'} must be a string other than {_TENSOR!r}")
            out[k] = _encode(v, f"{name}/{k}" if name else k, tensors, depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [_encode(v, f"{name}/{i}", tensors, depth + 1) for i, v in enumerate(value)]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"checkpoint.save: {name or 'the state'} is a {type(value).__name__}, which a checkpoint "
                    "cannot hold (arrays, numbers, strings, lists and dictionaries only)")


def _decode(value: Any, tensors: Dict[str, np.ndarray], used: set, path: str, depth: int = 0):
    if depth > MAX_DEPTH and isinstance(value, (dict, list)):
        raise CheckpointError(path, f"has a corrupt header: its state nests deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        if set(value) == {_TENSOR}:
            name = value[_TENSOR]
            if not isinstance(name, str) or name not in tensors or name in used:
                raise CheckpointError(path, f"has a corrupt header: it refers to tensor {name!r:.100}, "
                                            "which the file does not hold once")
            used.add(name)
            return tensors[name]
        return {k: _decode(v, tensors, used, path, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v, tensors, used, path, depth + 1) for v in value]
    return value


def save(path, state: Dict[str, Any]) -> str:
    """Writes `state` (a dictionary; see the module's docstring) to `path` atomically,
    creating its folder when missing. Returns the path."""
    if not isinstance(state, dict):
        raise TypeError(f"checkpoint.save: state must be a dict, got {type(state).__name__}")
    tensors: list = []
    tree = _encode(state, "", tensors)
    model_file.write(path, KIND, {"format": FORMAT, "version": VERSION, "state": tree}, tensors)
    return os.fspath(path)


def _refuse_pickle(path: str) -> None:
    with open(path, "rb") as f:
        first = f.read(2)
    if first[:1] == b"\x80":  # pickle protocol 2+: what manaka's checkpoints were before version 2
        raise CheckpointError(path, "is an old pickle checkpoint; manaka no longer reads pickles, which "
                                    "can run any code when loaded. If you trust the file, convert it once "
                                    f"with: {CONVERT}")


def load(path) -> Dict[str, Any]:
    """The state saved by :func:`save`. Raises :class:`manaka.CheckpointError` naming the
    file for a foreign, truncated, corrupt or pickle file (no code from the file runs)."""
    path = os.fspath(path)
    model_file.refuse_special(path, CheckpointError)
    _refuse_pickle(path)
    meta, tensors = model_file.read(path, KIND, CheckpointError)
    if meta.get("format") != FORMAT:
        raise CheckpointError(path, f"is not a manaka checkpoint (format {meta.get('format')!r:.100})")
    if meta.get("version") != VERSION:
        raise CheckpointError(path, f"has checkpoint version {meta.get('version')!r:.100}; this manaka reads {VERSION}")
    if not isinstance(meta.get("state"), dict):
        raise CheckpointError(path, "has a corrupt header: no state object")
    used: set = set()
    state = _decode(meta["state"], tensors, used, path)
    if used != set(tensors):
        raise CheckpointError(path, f"has a corrupt header: tensors {sorted(set(tensors) - used)[:5]} belong nowhere")
    return state


def _refuse_current(path) -> None:
    """A file of this format (a checkpoint, or a model) has nothing to convert: it was asked
    for --trust-pickle, and with it failed as "cannot be unpickled: invalid load key, 'M'"."""
    with open(path, "rb") as f:
        head = f.read(len(model_file.MAGIC))
    if head[:-1] == model_file.MAGIC[:-1]:
        raise CheckpointError(path, "is a manaka file of this format already, not a pickle: there is nothing to "
                                    "convert (a checkpoint in it is read as it is)")


def convert(old, new, trust_pickle: bool = False, overwrite: bool = False) -> str:
    """Rewrites a pickle checkpoint of an older manaka in this format.

    Unpickling runs whatever code the file carries, so this needs ``trust_pickle=True``:
    pass it only for a file you wrote yourself or otherwise trust. An existing `new` (another
    run's checkpoint, or `old` itself) is replaced only with ``overwrite=True`` (``--force``):
    a FileExistsError naming it otherwise, before `old` is read."""
    model_file.refuse_special(old, CheckpointError)
    _refuse_current(old)
    if not trust_pickle:
        raise CheckpointError(old, "converting a pickle runs any code it holds: pass trust_pickle=True "
                                   "(--trust-pickle) only for a file you trust")
    if os.path.lexists(new) and not overwrite:
        raise FileExistsError(f"checkpoint convert: {os.fspath(new)!r} exists; pass overwrite=True (--force) "
                              "to replace it; nothing was written")
    import pickle

    with open(old, "rb") as f:
        try:
            state = pickle.load(f)
        except Exception as e:  # anything a damaged pickle raises
            raise CheckpointError(old, f"cannot be unpickled: {type(e).__name__}: {e}") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(old, "is not a pickle checkpoint of manaka")
    state = {k: v for k, v in state.items() if k not in ("format", "version")}
    return save(new, state)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m manaka.checkpoint",
                                description="Tools for manaka checkpoints.")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("convert", help="rewrite an old pickle checkpoint in the current format")
    c.add_argument("old", help="the pickle checkpoint")
    c.add_argument("new", help="where to write the converted checkpoint")
    c.add_argument("--trust-pickle", action="store_true",
                   help="required: reading a pickle runs any code it holds; only for files you trust")
    c.add_argument("--force", action="store_true", help="replace NEW if it exists (it may be OLD itself)")
    args = p.parse_args(argv)
    try:
        out = convert(args.old, args.new, trust_pickle=args.trust_pickle, overwrite=args.force)
    except (CheckpointError, OSError, TypeError) as e:
        print(f"python -m manaka.checkpoint: {e}", file=sys.stderr)
        return 2
    print(f"converted {args.old} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
