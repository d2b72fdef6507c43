"""manaka: fast policy/value network training for board games.

The fused ops live in :mod:`manaka.ops`; the network in :class:`Model`, its training step
in :class:`Trainer`; see docs/design.md for the math they compute.
"""
from __future__ import annotations

import os as _os

from . import _omp_wait  # noqa: F401  first: sets OMP_WAIT_POLICY before libgomp is loaded
from ._source_tree import check_built as _check_built

_check_built(_os.path.dirname(__file__))  # a source tree without its C core: say so, first

from . import _openblas  # noqa: E402

_openblas.load()  # before _core: it resolves its BLAS symbols against this copy

from ._engine import load as _load_engine  # noqa: E402

_core = _load_engine()  # with RTLD_GLOBAL: manaka._cuda and manaka._testing call into it
from . import cuda, ops  # noqa: E402
from .errors import (CheckpointError, CheckpointMismatch, DatasetError, FileFormatError,  # noqa: E402
                     ModelFileError)
from .batch import Batch  # noqa: E402
from .cuda import DeviceArray  # noqa: E402
from .model import Model, ModelConfig  # noqa: E402
from .trainer import Stats, Trainer  # noqa: E402
from .dataset import Dataset, Position  # noqa: E402
from .loader import Loader  # noqa: E402
from .fit import History, fit  # noqa: E402
from .evaluate import evaluate  # noqa: E402

__version__ = "0.1.0"

__all__ = ["ops", "cuda", "Batch", "DeviceArray", "ModelConfig", "Model", "Trainer", "Stats",
           "Dataset", "Position", "Loader", "fit", "History", "evaluate",
           "FileFormatError", "ModelFileError", "CheckpointError", "CheckpointMismatch", "DatasetError",
           "build_info", "set_num_threads", "get_num_threads", "__version__"]


def set_num_threads(n: int) -> None:
    """Sets the number of threads every CPU op and GEMM uses (0 restores the default).

    OpenMP loops and OpenBLAS's thread pool are set together, so they agree."""
    _core.set_num_threads(n)


def get_num_threads() -> int:
    """The number of OpenMP threads CPU ops run with."""
    return _core.get_num_threads()


def build_info() -> dict:
    """What was built and what is present: compiler, OpenMP, threads, backends."""
    info = dict(_core.build_info())
    info["version"] = __version__
    info["cuda"] = cuda.build_info()  # built, archs, device_present, device
    info["backends"] = ["cpu"] + (["cuda"] if info["cuda"]["device_present"] else [])
    try:
        from importlib.metadata import version

        blas = f"scipy-openblas32 {version('scipy-openblas32')}"
    except Exception:  # metadata missing: still report where it was loaded from
        blas = "scipy-openblas32"
    info["blas"] = f"{blas} ({_openblas.load()}); its pool is pinned to 1 thread, GEMMs are split over num_threads"
    return info
from . import shogi  # noqa: E402  (manaka.shogi: HCPE / PSV records, rules in C)


def __getattr__(name: str):
    # manaka.checkpoint is imported when first named (mk.checkpoint.load), not by `import
    # manaka`: python -m manaka.checkpoint must find it not yet imported (see fit._checkpoint)
    if name == "checkpoint":
        import importlib

        return importlib.import_module(".checkpoint", __name__)
    raise AttributeError(f"module 'manaka' has no attribute {name!r}")
