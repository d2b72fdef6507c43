"""manaka: fast policy/value network training for board games.

The fused ops live in :mod:`manaka.ops`; see DESIGN.md for the math they compute.
"""
from __future__ import annotations

from . import _core, cuda, ops
from .batch import Batch
from .cuda import DeviceArray
from .dataset import Dataset, Position
from .loader import Loader
from .fit import History, fit
from .evaluate import evaluate

__version__ = "0.1.0"

__all__ = ["ops", "cuda", "Batch", "DeviceArray", "Dataset", "Position", "Loader", "fit", "History", "evaluate",
           "build_info", "set_num_threads", "get_num_threads", "__version__"]


def set_num_threads(n: int) -> None:
    """Sets the number of OpenMP threads every CPU op uses (0 restores the default)."""
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
    return info
