"""The CUDA backend: is it there, which device, and the ops :mod:`manaka.ops` runs on GPU arrays.

The backend is the separate extension ``manaka._cuda`` (built when the CUDA toolkit is
found, see setup.py). It links the CUDA runtime statically, so it imports on a machine with
no GPU or driver; :func:`is_available` then says False and :func:`why_unavailable` why.
``import manaka`` never fails because of CUDA.
"""
from __future__ import annotations

import functools
import os
from typing import Any, Dict, Optional

try:
    from . import _cuda
    _IMPORT_ERROR: Optional[BaseException] = None
except ImportError as error:  # not built, or built but not loadable here
    _cuda = None
    _IMPORT_ERROR = error

__all__ = ["is_available", "why_unavailable", "why_cannot_train", "device_name", "synchronize", "allow_tf32", "DeviceArray"]


def _built_file_exists() -> bool:
    here = os.path.dirname(os.path.abspath(__file__))
    return any(name.startswith("_cuda.") for name in os.listdir(here))


@functools.lru_cache(maxsize=None)
def why_unavailable() -> str:
    """Why the CUDA backend cannot run here, or ``""`` when it can."""
    if _cuda is None:
        if _IMPORT_ERROR is not None and _built_file_exists():
            return f"manaka's CUDA backend is built but failed to import: {_IMPORT_ERROR}"
        return "manaka was built without the CUDA backend"
    count, message = _cuda.probe()
    if count == 0:
        return f"no CUDA device/driver: {message}"
    return ""


def is_available() -> bool:
    """True when the CUDA backend was built and a CUDA device is usable."""
    return why_unavailable() == ""


def _require(what: str) -> Any:
    reason = why_unavailable()
    if reason:
        raise RuntimeError(f"{what}: {reason}")
    return _cuda


def device_name(device: Optional[int] = None) -> str:
    """Name of CUDA device `device` (default: the current one), e.g. 'NVIDIA H200'."""
    return _require("device_name").device_name(-1 if device is None else device)


def synchronize() -> None:
    """Waits until every kernel queued on the device has finished."""
    _require("synchronize").synchronize()


def _ops(op: str) -> Any:
    """The module whose ``op`` takes the same positional arguments as ``manaka._core``'s,
    on GPU arrays; a RuntimeError saying why when the backend cannot run."""
    return _require(f"{op}: got GPU arrays, but the CUDA backend cannot run")


def backend_table() -> Any:
    """The CUDA op table, as a capsule for manaka._core's Model (used by Model(device="cuda")).

    Loads cuBLAS first: from $MANAKA_CUBLAS, the nvidia-cublas wheel, the CUDA toolkit, or
    the loader's search (see manaka._cuda_libs); a RuntimeError says so if none is found."""
    from ._cuda_libs import find_cublas

    return _require("Model(device='cuda')").backend_table(find_cublas())


def why_cannot_train() -> str:
    """Why a model cannot train on the GPU here, or ``""`` when it can: the backend and a
    device must be usable (:func:`why_unavailable`) and cuBLAS must load (the dense layers'
    GEMMs need it, and it is not part of the driver)."""
    reason = why_unavailable()
    if reason:
        return reason
    try:
        backend_table()
    except RuntimeError as error:
        return str(error)
    return ""


def allow_tf32(allow: bool = True) -> None:
    """Lets every later GEMM of the CUDA backend use TF32 tensor cores (about 10 bits of
    mantissa in the products) instead of full FP32. Off by default: manaka's results match
    the NumPy references to 1e-4 only in FP32."""
    _require("allow_tf32")
    backend_table()  # cuBLAS must be loaded to change its math mode
    _cuda.allow_tf32(bool(allow))


def build_info() -> Dict[str, Any]:
    """What :func:`manaka.build_info` reports about CUDA."""
    info: Dict[str, Any] = {"built": _cuda is not None}
    if _cuda is not None:
        details = _cuda.build_info()
        info["archs"] = [a for a in details["archs"].split(";") if a]
        info["runtime_version"] = details["runtime_version"]
        info["driver_version"] = details["driver_version"]
        info["cublas"] = _cuda.cublas_path() or None
    info["device_present"] = is_available()
    info["device"] = device_name() if info["device_present"] else None
    if not info["device_present"]:
        info["why_unavailable"] = why_unavailable()
    return info


if _cuda is not None:
    DeviceArray = _cuda.DeviceArray
else:

    class DeviceArray:  # type: ignore[no-redef]
        """Stands in for manaka.DeviceArray when the CUDA backend is not built: every
        way of making one raises a RuntimeError saying so."""

        def __new__(cls, *args: Any, **kwargs: Any):
            raise RuntimeError(f"DeviceArray: {why_unavailable()}")

        @classmethod
        def empty(cls, shape: Any, dtype: Any = "float32") -> "DeviceArray":
            raise RuntimeError(f"DeviceArray.empty: {why_unavailable()}")

        @classmethod
        def from_numpy(cls, a: Any) -> "DeviceArray":
            raise RuntimeError(f"DeviceArray.from_numpy: {why_unavailable()}")

        @classmethod
        def from_ptr(cls, ptr: int, shape: Any, dtype: Any, owner: Any = None,
                     *, readonly: bool = False) -> "DeviceArray":
            raise RuntimeError(f"DeviceArray.from_ptr: {why_unavailable()}")
