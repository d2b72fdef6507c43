"""GPU telemetry for benchmarks, through NVML by ctypes (no extra dependency).

docs/design.md §5: on a GPU, sample utilization.memory and power, not only "busy", and reject
runs while another process uses the GPU. `Sampler` polls in a background thread while a
timed loop runs; `other_processes()` lists compute processes that are not this one.
"""
from __future__ import annotations

import ctypes
import os
import statistics
import threading
import time
from typing import Dict, List, Optional


class NvmlError(RuntimeError):
    pass


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class _Process(ctypes.Structure):  # nvmlProcessInfo_v1_t: enough for the pid
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


class Nvml:
    """A handle on one GPU through libnvidia-ml."""

    def __init__(self, index: int = 0):
        try:
            self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError as exc:
            raise NvmlError(f"NVML is not available: {exc}") from None
        self._check(self.lib.nvmlInit_v2(), "nvmlInit")
        self.device = ctypes.c_void_p()
        self._check(self.lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(self.device)),
                    "nvmlDeviceGetHandleByIndex")

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            self.lib.nvmlErrorString.restype = ctypes.c_char_p
            raise NvmlError(f"{what} failed: {self.lib.nvmlErrorString(rc).decode()}")

    def utilization(self) -> Dict[str, int]:
        u = _Utilization()
        self._check(self.lib.nvmlDeviceGetUtilizationRates(self.device, ctypes.byref(u)),
                    "nvmlDeviceGetUtilizationRates")
        return {"gpu": u.gpu, "memory": u.memory}

    def power_watts(self) -> float:
        mw = ctypes.c_uint()
        self._check(self.lib.nvmlDeviceGetPowerUsage(self.device, ctypes.byref(mw)),
                    "nvmlDeviceGetPowerUsage")
        return mw.value / 1000.0

    def other_processes(self) -> List[int]:
        """Pids of compute processes on this GPU other than this one."""
        count = ctypes.c_uint(64)
        procs = (_Process * 64)()
        rc = self.lib.nvmlDeviceGetComputeRunningProcesses(self.device, ctypes.byref(count), procs)
        if rc != 0:  # e.g. not supported in a container: say so rather than guess
            raise NvmlError(f"cannot list GPU processes (NVML status {rc})")
        return [procs[i].pid for i in range(count.value) if procs[i].pid != os.getpid()]


class Sampler:
    """Samples utilization and power every `interval` seconds while in a `with` block."""

    def __init__(self, nvml: Optional[Nvml], interval: float = 0.02):
        self.nvml, self.interval = nvml, interval
        self.samples: List[Dict[str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            u = self.nvml.utilization()
            self.samples.append({"gpu": u["gpu"], "memory": u["memory"], "watts": self.nvml.power_watts()})
            time.sleep(self.interval)

    def __enter__(self) -> "Sampler":
        if self.nvml:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self.nvml:
            self._thread.join()

    def summary(self) -> Dict[str, float]:
        if not self.samples:
            return {}
        out = {"samples": len(self.samples)}
        for key in ("gpu", "memory", "watts"):
            values = [s[key] for s in self.samples]
            out[f"{key}_median"] = statistics.median(values)
            out[f"{key}_max"] = max(values)
        return out
