"""manaka.DeviceArray on a GPU: round trips, attributes, the CUDA Array Interface and
DLPack exports (zero-copy into PyTorch and CuPy where installed), lifetime, from_ptr.
Skipped, saying why, where there is no usable CUDA device."""
import gc
import os
import sys

import numpy as np
import pytest

import manaka
from manaka import cuda

pytestmark = [pytest.mark.cuda,  # tools/cuda_emu/run_gpu_tests.py runs it on the emulated device
              pytest.mark.skipif(not cuda.is_available(), reason=f"no CUDA device: {cuda.why_unavailable()}")]
DeviceArray = manaka.DeviceArray
# tools/cuda_emu/run_gpu_tests.py runs this file on a CPU emulation of the device, whose
# "device memory" a real GPU library cannot use
real_device_only = pytest.mark.skipif(os.environ.get("MANAKA_CUDA_EMULATED") == "1",
                                      reason="needs a real CUDA device to share memory with PyTorch/CuPy")


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8", "bool"])
def test_round_trip(dtype):
    a = (np.arange(24).reshape(2, 3, 4) % 7).astype(dtype)
    x = DeviceArray.from_numpy(a)
    assert x.shape == (2, 3, 4) and x.ndim == 3 and x.size == 24
    assert x.dtype == np.dtype(dtype) and x.nbytes == a.nbytes
    np.testing.assert_array_equal(x.numpy(), a)


def test_no_implicit_conversion_to_numpy():
    with pytest.raises(TypeError, match="use .numpy\\(\\)"):
        np.asarray(DeviceArray.from_numpy(np.ones(3, np.float32)))


def test_from_numpy_copies_non_contiguous_input():
    a = np.arange(20, dtype=np.float32).reshape(4, 5)[:, ::2]
    np.testing.assert_array_equal(DeviceArray.from_numpy(a).numpy(), a)


def test_empty_and_repr():
    x = DeviceArray.empty((3, 0))
    assert x.shape == (3, 0) and x.size == 0 and x.dtype == np.float32
    assert x.numpy().shape == (3, 0)
    y = DeviceArray.empty(5, np.int32)
    assert y.shape == (5,) and y.dtype == np.int32
    assert repr(y) == f"DeviceArray(shape=(5,), dtype=int32, device='cuda:{y.device}')"


def test_cuda_array_interface_v3():
    x = DeviceArray.from_numpy(np.ones((2, 3), np.float32))
    cai = x.__cuda_array_interface__
    assert cai["version"] == 3 and cai["shape"] == (2, 3) and cai["typestr"] == "<f4"
    assert cai["data"] == (x.ptr, False) and cai["strides"] is None and cai["stream"] == 1
    assert x.__dlpack_device__() == (2, x.device)


def test_dlpack_capsule_keeps_the_array_alive():
    x = DeviceArray.from_numpy(np.ones(4, np.float32))
    before = sys.getrefcount(x)
    capsule = x.__dlpack__()
    assert sys.getrefcount(x) == before + 1
    del capsule  # never consumed: its destructor releases the array
    gc.collect()
    assert sys.getrefcount(x) == before
    with pytest.raises(BufferError):
        x.__dlpack__(copy=True)
    with pytest.raises(BufferError):
        x.__dlpack__(dl_device=(1, 0))
    with pytest.raises(ValueError, match="stream=0 is ambiguous"):
        x.__dlpack__(stream=0)
    for stream in (None, -1, 1, 2):  # legacy, no sync, legacy, per-thread: all accepted
        del_me = x.__dlpack__(stream=stream)
        del del_me


def test_device_array_is_accepted_through_its_own_protocols():
    rng = np.random.default_rng(0)
    h = rng.standard_normal((2, 4)).astype(np.float32)
    t = rng.standard_normal((3, 4)).astype(np.float32)
    i = np.array([[0, 2], [1, 1]], np.int32)
    H, T, I = (DeviceArray.from_numpy(a) for a in (h, t, i))

    class ViaCAI:
        def __init__(self, x):
            self.x, self.__cuda_array_interface__ = x, x.__cuda_array_interface__

    class ViaDLPack:
        def __init__(self, x):
            self.x = x

        def __dlpack__(self, **kw):
            return self.x.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.x.__dlpack_device__()

    want = manaka.ops.gather_dot(h, t, i)
    for wrap in (ViaCAI, ViaDLPack):
        got = manaka.ops.gather_dot(wrap(H), wrap(T), wrap(I)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert sys.getrefcount(H) < 10  # the consumed capsules were deleted


def test_from_ptr_views_without_copy_and_keeps_the_owner():
    x = DeviceArray.from_numpy(np.arange(6, dtype=np.float32))
    before = sys.getrefcount(x)
    v = DeviceArray.from_ptr(x.ptr + 8, (2, 2), np.float32, owner=x)
    assert sys.getrefcount(x) == before + 1 and v.ptr == x.ptr + 8
    np.testing.assert_array_equal(v.numpy(), [[2, 3], [4, 5]])
    with pytest.raises(ValueError, match="not CUDA device"):
        buf = np.zeros(4, np.float32)
        DeviceArray.from_ptr(buf.ctypes.data, (4,), np.float32)
    ro = DeviceArray.from_ptr(x.ptr, (6,), "float32", readonly=True)
    assert ro.__cuda_array_interface__["data"] == (x.ptr, True)


@real_device_only
def test_torch_zero_copy():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    x = DeviceArray.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
    t = torch.from_dlpack(x)
    assert t.data_ptr() == x.ptr and t.shape == (2, 3) and t.dtype == torch.float32
    ptr = x.ptr
    del x
    gc.collect()
    assert t.data_ptr() == ptr
    np.testing.assert_array_equal(t.cpu().numpy(), np.arange(6).reshape(2, 3))
    # and back: torch tensors as inputs, through DLPack or the CAI
    h = torch.randn(4, 8, device="cuda")
    tab = torch.randn(5, 8, device="cuda")
    idx = torch.randint(0, 5, (4, 3), device="cuda", dtype=torch.int32)
    got = manaka.ops.gather_dot(h, tab, idx)
    want = (h[:, None, :] * tab[idx.long()]).sum(-1)
    np.testing.assert_allclose(got.numpy(), want.cpu().numpy(), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="C-contiguous"):
        manaka.ops.gather_dot(h.t().contiguous().t(), tab, idx)
    np.testing.assert_allclose(manaka.ops.gather_dot(h, tab, idx.long()).numpy(), want.cpu().numpy(),
                               rtol=1e-5, atol=1e-5)  # int64 indices are narrowed on the device
    # a stream other than the default: our kernels wait for the producer's work
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        h2 = h * 2
        got2 = manaka.ops.gather_dot(h2, tab, idx)
    np.testing.assert_allclose(got2.numpy(), 2 * want.cpu().numpy(), rtol=1e-5, atol=1e-5)


@real_device_only
def test_cupy_zero_copy():
    cupy = pytest.importorskip("cupy")
    x = DeviceArray.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
    c = cupy.asarray(x)
    assert c.data.ptr == x.ptr and c.shape == (2, 3)
    d = cupy.from_dlpack(x)
    assert d.data.ptr == x.ptr
    np.testing.assert_array_equal(cupy.asnumpy(c), np.arange(6).reshape(2, 3))
    tab = cupy.asarray(np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32))
    idx = cupy.asarray(np.array([[0, 4], [2, 2]], np.int32))
    got = manaka.ops.gather_dot(c, tab, idx).numpy()
    want = manaka.ops.gather_dot(x.numpy(), cupy.asnumpy(tab), cupy.asnumpy(idx))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
