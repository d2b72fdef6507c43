"""The CUDA backend's parts that need no GPU: the build, availability reporting, and the
parsing of GPU arguments (__cuda_array_interface__, DLPack, DeviceArray.from_ptr), which
reads layouts without touching device memory. These run on every machine with the CUDA
backend built; the kernels themselves are tested in test_cuda_ops.py on a GPU."""
import os
import subprocess
import sys

import numpy as np
import pytest

import manaka
from manaka import _core, cuda

_cuda = cuda._cuda
needs_build = pytest.mark.skipif(_cuda is None, reason=f"CUDA backend not built: {cuda.why_unavailable()}")
needs_no_gpu = pytest.mark.skipif(cuda.is_available(), reason="a CUDA device is present; this tests the no-device path")


class CAI:
    """A fake GPU array: only a __cuda_array_interface__ (its pointer is never dereferenced
    by parsing)."""

    def __init__(self, shape, typestr="<f4", ptr=0x10000, version=3, **extra):
        self.__cuda_array_interface__ = dict(shape=tuple(shape), typestr=typestr,
                                              data=(ptr, False), version=version, **extra)


def cai(d):
    obj = CAI((1,))
    obj.__cuda_array_interface__ = d
    return obj


def test_build_info_reports_cuda():
    info = manaka.build_info()["cuda"]
    assert info["built"] == (_cuda is not None)
    assert info["device_present"] == cuda.is_available()
    if info["built"]:
        assert info["archs"] and all(a.isdigit() for a in info["archs"])
    if not info["device_present"]:
        assert info["why_unavailable"] == cuda.why_unavailable() != ""


@pytest.mark.skipif(os.environ.get("MANAKA_CUDA") != "1", reason="MANAKA_CUDA=1 is not set (.ci/run sets it)")
def test_cuda_backend_was_built_when_required():
    # setup.py builds manaka._cuda by default only where a GPU is visible; CI asks for it
    # with MANAKA_CUDA=1 so that the tests above compile and run instead of skipping.
    assert _cuda is not None, cuda.why_unavailable()


def test_core_does_not_depend_on_cuda():
    with open(_core.__file__, "rb") as f:
        binary = f.read()
    assert b"cudaGetDeviceCount" not in binary and b"libcudart" not in binary


@needs_no_gpu
def test_unavailable_says_why():
    assert not cuda.is_available()
    why = cuda.why_unavailable()
    assert why.startswith("no CUDA device/driver: ") or why.startswith("manaka was built without")
    with pytest.raises(RuntimeError, match="device_name"):
        cuda.device_name()


@needs_no_gpu
def test_ops_on_gpu_arrays_without_a_device_raise_runtime_error():
    h, t, i = CAI((2, 3)), CAI((4, 3)), CAI((2, 5), "<i4")
    with pytest.raises(RuntimeError, match="gather_dot: got GPU arrays, but the CUDA backend cannot run"):
        manaka.ops.gather_dot(h, t, i)
    with pytest.raises(RuntimeError, match="pair_sums"):
        manaka.ops.pair_sums(CAI((6, 2)), CAI((1, 2, 3), "<i4"))
    with pytest.raises(TypeError, match="hidden is a CPU array"):
        manaka.ops.gather_dot(np.zeros((2, 3), np.float32), t, i)


def test_import_without_the_cuda_backend():
    code = ("import sys; sys.modules['manaka._cuda'] = None\n"
            "import numpy as np, manaka\n"
            "assert not manaka.cuda.is_available()\n"
            "print(manaka.cuda.why_unavailable())\n"
            "print(manaka.ops.gather_dot(np.ones((1, 2), np.float32), np.ones((3, 2), np.float32), np.zeros((1, 2), np.int32)))\n"
            "try:\n    manaka.DeviceArray.empty((2,))\nexcept RuntimeError as e:\n    print('RuntimeError', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(manaka.__file__)))
    assert out.returncode == 0, out.stderr
    assert "CUDA backend" in out.stdout and "RuntimeError DeviceArray.empty" in out.stdout
    assert "[[2. 2.]]" in out.stdout


# ------------------------------------------------------------------ __cuda_array_interface__

@needs_build
def test_parse_cai_v3_with_stream():
    d = _cuda._parse_array(CAI((2, 3), stream=7), "x")
    assert d == {"ptr": 0x10000, "shape": (2, 3), "dtype": "float32", "typestr": "<f4",
                 "readonly": False, "device": -1, "stream": 7, "source": "__cuda_array_interface__"}


@needs_build
@pytest.mark.parametrize("version", [0, 1, 2])
def test_parse_cai_older_versions_have_no_stream(version):
    d = _cuda._parse_array(CAI((4,), "<i4", version=version))
    assert d["stream"] is None and d["dtype"] == "int32"


@needs_build
def test_parse_cai_contiguous_strides_and_unit_dims():
    assert _cuda._parse_array(CAI((2, 3), strides=(12, 4)))["shape"] == (2, 3)
    assert _cuda._parse_array(CAI((2, 1, 3), strides=(12, 999, 4)))["shape"] == (2, 1, 3)
    assert _cuda._parse_array(CAI((0, 3), ptr=0, strides=(4, 8)))["ptr"] == 0


@needs_build
@pytest.mark.parametrize("d, error, match", [
    ([1, 2], TypeError, "a dict is required"),
    ({"shape": (1,), "typestr": "<f4", "data": (16, False)}, ValueError, "no 'version'"),
    ({"shape": (1,), "typestr": "<f4", "data": (16, False), "version": 4}, ValueError, "version 4"),
    ({"shape": [1], "typestr": "<f4", "data": (16, False), "version": 3}, ValueError, "'shape' must be a tuple"),
    ({"shape": (-1,), "typestr": "<f4", "data": (16, False), "version": 3}, ValueError, "negative"),
    ({"shape": (1.5,), "typestr": "<f4", "data": (16, False), "version": 3}, TypeError, "must be an int"),
    ({"shape": (1,), "typestr": 4, "data": (16, False), "version": 3}, ValueError, "'typestr' must be a str"),
    ({"shape": (1,), "typestr": "<f4", "data": 16, "version": 3}, ValueError, "'data' must be a"),
    ({"shape": (1,), "typestr": "<f4", "data": ("16", False), "version": 3}, TypeError, "data pointer must be an int"),
    ({"shape": (1,), "typestr": "<f4", "data": (-16, False), "version": 3}, ValueError, "non-negative"),
    ({"shape": (1,), "typestr": "<f4", "data": (0, False), "version": 3}, ValueError, "NULL"),
    ({"shape": (2, 3), "typestr": "<f4", "data": (16, False), "version": 3, "strides": (4, 8)}, ValueError, "C-contiguous"),
    ({"shape": (2, 3), "typestr": "<f4", "data": (16, False), "version": 3, "strides": (12,)}, ValueError, "'strides' must be"),
    ({"shape": (1,), "typestr": "<f4", "data": (16, False), "version": 3, "mask": object()}, ValueError, "mask"),
    ({"shape": (1,), "typestr": "<f4", "data": (16, False), "version": 3, "stream": 0}, ValueError, "'stream' is 0"),
    ({"shape": (1,), "typestr": "<f4", "data": (16, False), "version": 3, "stream": "s"}, TypeError, "'stream' must be an int"),
    ({"shape": (1,) * 9, "typestr": "<f4", "data": (16, False), "version": 3}, ValueError, "at most 8"),
    # the element count is a checked product (2^80 must not wrap to 0)
    ({"shape": (2**40, 2**40), "typestr": "<f4", "data": (16, False), "version": 3}, ValueError,
     r"more than 2\^56 elements"),
])
def test_parse_cai_malformed(d, error, match):
    with pytest.raises(error, match=match) as info:
        _cuda._parse_array(cai(d), "hidden")
    assert "_parse_array: hidden" in str(info.value)


@needs_build
def test_parse_rejects_numpy_and_other_objects():
    with pytest.raises(TypeError, match="NumPy \\(CPU\\) array"):
        _cuda._parse_array(np.zeros(3, np.float32))
    with pytest.raises(TypeError, match="must be a GPU array"):
        _cuda._parse_array([1.0, 2.0])
    with pytest.raises(TypeError, match="got None"):
        _cuda._parse_array(None)


# ------------------------------------------------------------------ DLPack

class DL:
    def __init__(self, device=(2, 0), capsule=None, accepts_stream=True):
        self.device, self.capsule, self.accepts_stream, self.calls = device, capsule, accepts_stream, []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, **kwargs):
        if kwargs and not self.accepts_stream:
            raise TypeError("unexpected keyword argument 'stream'")
        self.calls.append(kwargs)
        return self.capsule() if callable(self.capsule) else self.capsule


@needs_build
def test_parse_dlpack_checks_the_device_type():
    with pytest.raises(TypeError, match="DLPack device type 1, not CUDA"):
        _cuda._parse_array(DL(device=(1, 0)), "x")


@needs_build
def test_parse_dlpack_asks_for_the_legacy_stream_and_checks_the_tensor():
    a = np.arange(6, dtype=np.float32)
    dl = DL(capsule=lambda: a.__dlpack__())  # a CPU tensor behind a lying __dlpack_device__
    with pytest.raises(TypeError, match="DLPack tensor on device type 1"):
        _cuda._parse_array(dl, "x")
    assert dl.calls == [{"stream": 1}]
    old = DL(capsule=lambda: a.__dlpack__(), accepts_stream=False)
    with pytest.raises(TypeError, match="device type 1"):
        _cuda._parse_array(old, "x")
    assert old.calls == [{}]


@needs_build
def test_parse_dlpack_malformed():
    with pytest.raises(TypeError, match="not an unconsumed \"dltensor\" capsule"):
        _cuda._parse_array(DL(capsule=42), "x")
    with pytest.raises(TypeError, match="malformed __dlpack_device__"):
        _cuda._parse_array(DL(device="cuda"), "x")


# ------------------------------------------------------------------ op argument checks (no device)

@needs_build
def test_op_dtype_and_ndim_errors_come_before_the_device():
    with pytest.raises(TypeError, match="gather_dot: hidden must have dtype float32, got float64"):
        _cuda.gather_dot(CAI((2, 3), "<f8"), CAI((4, 3)), CAI((2, 5), "<i4"))
    with pytest.raises(TypeError, match="gather_dot: indices must have an integer dtype, got float32"):
        _cuda.gather_dot(CAI((2, 3)), CAI((4, 3)), CAI((2, 5), "<f4"))
    with pytest.raises(TypeError, match="gather_dot: counts must have an integer dtype, got bool"):
        _cuda.gather_dot(CAI((2, 3)), CAI((4, 3)), CAI((2, 5), "<i8"), CAI((2,), "|b1"))
    with pytest.raises(TypeError, match="got >c8"):
        _cuda.gather_dot(CAI((2, 3), ">c8"), CAI((4, 3)), CAI((2, 5), "<i4"))
    with pytest.raises(ValueError, match="power_sums: tokens must have 3 dimensions, got 2"):
        _cuda.power_sums(CAI((4, 3)), CAI((2, 5), "<i4"), 2)
    with pytest.raises(ValueError, match="orders must be >= 1"):
        _cuda.power_sums(CAI((4, 3)), CAI((2, 2, 5), "<i4"), 0)


def _cpu_message(fn, *args):
    with pytest.raises(ValueError) as info:
        fn(*args)
    return str(info.value)


@needs_build
def test_shape_errors_match_the_cpu_messages():
    f32 = lambda *s: np.zeros(s, np.float32)
    i32 = lambda *s: np.zeros(s, np.int32)
    cases = [
        ("gather_dot", (f32(2, 3), f32(4, 5), i32(2, 7))),
        ("gather_dot", (f32(2, 3), f32(4, 3), i32(3, 7))),
        ("gather_dot", (f32(2, 3), f32(4, 3), i32(2, 7), i32(5))),
        ("gather_dot_backward", (f32(2, 6), f32(2, 3), f32(4, 3), i32(2, 7))),
        ("power_sums_backward", (f32(2, 2, 3, 9), f32(10, 8), i32(2, 2, 5))),
        ("pair_sums", (f32(7, 4), i32(2, 2, 5))),
        ("pair_sums_backward", (f32(3, 2, 4), i32(2, 2, 5), 6)),
        ("pair_sums_backward", (f32(2, 2, 4), i32(2, 2, 5), 7)),
    ]
    for op, args in cases:
        want = _cpu_message(getattr(_core, op), *args)
        fake = [CAI(a.shape, a.dtype.str) if isinstance(a, np.ndarray) else a for a in args]
        got = _cpu_message(getattr(_cuda, op), *fake)
        assert got == want, op


@needs_build
def test_out_must_be_writable_float32_of_the_right_rank():
    args = (CAI((2, 3)), CAI((4, 3)), CAI((2, 5), "<i4"))
    ro = CAI((2, 5))
    ro.__cuda_array_interface__["data"] = (0x10000, True)
    with pytest.raises(ValueError, match="gather_dot: out is read-only"):
        _cuda.gather_dot(*args, out=ro)
    with pytest.raises(TypeError, match="out must have dtype float32"):
        _cuda.gather_dot(*args, out=CAI((2, 5), "<i4"))
    with pytest.raises(TypeError, match="out must be a \\(grad_hidden, grad_table\\) tuple"):
        _cuda.gather_dot_backward(CAI((2, 5)), *args, out=CAI((2, 3)))


# ------------------------------------------------------------------ DeviceArray arguments

@needs_build
def test_device_array_cannot_be_constructed_directly():
    with pytest.raises(TypeError, match="DeviceArray.empty"):
        manaka.DeviceArray()


@needs_build
@pytest.mark.parametrize("args, error, match", [
    (("0x10", (2,), "float32"), TypeError, "ptr must be an int"),
    ((True, (2,), "float32"), TypeError, "ptr must be an int"),
    ((-8, (2,), "float32"), ValueError, "non-negative"),
    ((64, (2, -1), "float32"), ValueError, "shape\\[1\\] must be >= 0"),
    ((64, ("a",), "float32"), TypeError, "shape\\[0\\] must be an int"),
    ((64, 2.0, "float32"), TypeError, "shape must be an int or a sequence"),
    ((64, (2,), "complex64"), TypeError, "dtype complex64 is not supported"),
    ((64, (2,), "no-such-dtype"), TypeError, "not understood"),
    ((0, (2,), "float32"), ValueError, "NULL"),
    ((66, (2,), "float32"), ValueError, r"DeviceArray.from_ptr: ptr 0x42 is not aligned to its float32 items"),
    ((64, (2**62, 4), "float32"), ValueError, r"the shape has more than 2\^56 elements"),
])
def test_from_ptr_argument_errors(args, error, match):
    with pytest.raises(error, match=match):
        manaka.DeviceArray.from_ptr(*args)


@needs_build
def test_a_device_array_shape_past_the_element_limit_is_refused_before_the_device():
    # (2^62, 4) float32 is 2^66 bytes: unchecked, it would wrap to a 0-byte allocation
    for shape in ((2**62, 4), (2**30, 2**30, 2**30)):
        with pytest.raises(ValueError, match=r"DeviceArray.empty: the shape has more than 2\^56 elements"):
            manaka.DeviceArray.empty(shape)


@needs_build
@needs_no_gpu
def test_from_ptr_and_empty_need_a_device():
    with pytest.raises(RuntimeError, match="DeviceArray.from_ptr: CUDA error"):
        manaka.DeviceArray.from_ptr(256, (2, 3), np.float32)
    with pytest.raises(RuntimeError, match="DeviceArray"):
        manaka.DeviceArray.empty((2, 3))
    with pytest.raises(RuntimeError, match="DeviceArray: CUDA error"):
        manaka.DeviceArray.from_numpy(np.zeros(3, np.float32))
    with pytest.raises(TypeError, match="dtype complex128 is not supported"):
        manaka.DeviceArray.from_numpy(np.zeros(3, complex))
