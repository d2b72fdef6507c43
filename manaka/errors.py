"""The exceptions manaka raises for a bad file, one type per kind of failure.

Every one is a ``ValueError`` (code that caught ValueError before keeps working), carries
the file in ``.path`` and says in its message which file and what is wrong with it:

    FileFormatError       a file that is not what it claims: foreign, truncated, corrupt
    ├── ModelFileError    a model file (``Model.load``)
    ├── CheckpointError   a checkpoint (``manaka.checkpoint.load``, ``fit(resume=True)``)
    │   └── CheckpointMismatch   a sound checkpoint that does not fit this run (another
    │                            model size, another dataset, fewer steps than it holds)
    └── DatasetError      a dataset folder (``Dataset.open``)

Nothing else escapes these readers for a damaged file: no KeyError, TypeError,
OverflowError, MemoryError, UnpicklingError or tokenize.TokenError.
"""
from __future__ import annotations

import os
from typing import Optional

__all__ = ["FileFormatError", "ModelFileError", "CheckpointError", "CheckpointMismatch", "DatasetError"]


class FileFormatError(ValueError):
    """A file manaka cannot use. ``path`` is the file (or folder); the message names it."""

    def __init__(self, path, message: str, named: bool = False):
        """`named`: the message already names the file (it is then used as it is)."""
        self.path: Optional[str] = None if path is None else os.fspath(path)
        super().__init__(message if named or self.path is None else f"{self.path!r}: {message}")


class ModelFileError(FileFormatError):
    """A model file that is foreign, truncated, corrupt, or holds tensors its config does not have."""


class CheckpointError(FileFormatError):
    """A checkpoint that is foreign, truncated, corrupt, or an old pickle checkpoint."""


class CheckpointMismatch(CheckpointError):
    """A sound checkpoint that does not belong to this run: another model config, another
    dataset, or a step beyond the run's end."""


class DatasetError(FileFormatError):
    """A dataset folder with a missing, unreadable or invalid file."""
