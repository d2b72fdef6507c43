"""The GPU benchmark's bookkeeping (inputs, agreement and reproducibility checks, floors,
the results file), run here against a stand-in backend that computes with the CPU ops.
This tests the script, not the kernels (test_cuda_ops.py does that on a GPU); without a
GPU the real script must refuse to run."""
import json
import types

import numpy as np
import pytest

import manaka
from manaka import _core, cuda
from manaka.bench import ops_cuda


def test_refuses_without_a_gpu(capsys):
    if cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert ops_cuda.main(["--no-torch"]) == 2
    assert "cannot run" in capsys.readouterr().err


class HostArray:
    """Stands in for DeviceArray: a NumPy array that says it is on the GPU."""

    def __init__(self, a):
        self.a = np.ascontiguousarray(a)

    @classmethod
    def from_numpy(cls, a):
        return cls(np.array(a))

    @classmethod
    def empty(cls, shape, dtype="float32"):
        return cls(np.empty(shape, dtype))

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.a.shape, "typestr": self.a.dtype.str, "data": (self.a.ctypes.data, False), "version": 3}

    def numpy(self):
        return self.a.copy()

    def __dlpack__(self, **kwargs):  # lets torch.from_dlpack view it (on the CPU)
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def fake_backend():
    def wrap(op):
        def call(*args, out=None, check=True):
            result = getattr(_core, op)(*[a.a if isinstance(a, HostArray) else a for a in args])
            if isinstance(result, tuple):
                if out is None:
                    return tuple(HostArray(r) for r in result)
                for o, r in zip(out, result):
                    o.a[...] = r
                return out
            if out is None:
                return HostArray(result)
            out.a[...] = result
            return out
        return call

    ops = {op: wrap(op) for op in ("gather_dot", "gather_dot_backward", "power_sums",
                                   "power_sums_backward", "pair_sums", "pair_sums_backward")}
    return types.SimpleNamespace(_device_copy=lambda dst, src: dst.a.__setitem__(..., src.a),
                                 build_info=lambda: {"archs": "90", "runtime_version": 0, "driver_version": 0},
                                 cublas_path=lambda: "",
                                 **ops)


def stand_in(monkeypatch):
    backend = fake_backend()
    monkeypatch.setattr(cuda, "_cuda", backend)
    monkeypatch.setattr(cuda, "is_available", lambda: True)
    monkeypatch.setattr(cuda, "device_name", lambda device=None: "stand-in")
    monkeypatch.setattr(cuda, "synchronize", lambda: None)
    monkeypatch.setattr(cuda, "_ops", lambda op: backend)
    monkeypatch.setattr(manaka, "DeviceArray", HostArray)
    monkeypatch.setattr(ops_cuda, "other_gpu_processes", lambda: [])


def test_bench_bookkeeping_with_a_stand_in_backend(monkeypatch, tmp_path):
    stand_in(monkeypatch)
    rc = ops_cuda.main(["--batch", "8", "--runs", "1", "--inner", "1", "--no-torch", "--copy-mib", "4",
                        "--out", str(tmp_path)])
    assert rc == 0
    result = json.load(open(tmp_path / "ops-cuda.json"))
    assert [r["op"] for r in result["results"]] == [
        "gather_dot forward", "gather_dot backward", "power_sums forward", "power_sums backward",
        "pair_sums forward", "pair_sums backward"]
    for r in result["results"]:
        assert r["rel_diff_vs_cpu"] < 1e-6 and r["bitwise_reproducible"]
        assert r["floor_ms"] > 0 and r["bytes"] > 0 and r["flops"] > 0
        assert r["fused"]["median_ms"] >= 0 and r["public"]["median_ms"] >= 0
        assert "atomic" not in r  # the atomicAdd scatters are an experiment (lab/), not a product row
    assert result["bandwidth_gbs"] > 0 and result["fp32_tflops"] is None
    for r in result["results"]:  # no FLOP rate without PyTorch: the bandwidth floor alone
        assert r["floor_ms"] == pytest.approx(r["bytes"] / (result["bandwidth_gbs"] * 1e9) * 1e3)
    assert (tmp_path / "ops-cuda.md").exists()


def test_bench_torch_rows_with_a_stand_in_backend(monkeypatch, tmp_path):
    """The PyTorch eager rows (on PyTorch's CPU device here) agree with the CPU results."""
    torch = pytest.importorskip("torch")
    stand_in(monkeypatch)
    monkeypatch.setattr(ops_cuda, "import_torch", lambda: torch)
    monkeypatch.setattr(ops_cuda, "fp32_tflops", lambda torch: 1.0)
    rc = ops_cuda.main(["--batch", "8", "--runs", "1", "--inner", "1", "--no-compile", "--copy-mib", "4",
                        "--out", str(tmp_path)])
    assert rc == 0
    result = json.load(open(tmp_path / "ops-cuda.json"))
    for r in result["results"]:
        assert float(r["torch eager"]["extra"]["rel_diff"]) < 1e-4, r["op"]
