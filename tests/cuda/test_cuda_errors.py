"""A failure inside the CUDA op table reaches the user with its own message.

The CUDA table's entries are compiled into manaka._cuda but run inside manaka._core's engine
(model.c, trainer.c) and the test hooks of manaka._testing, which raise with _core's
mk_error(). _cuda therefore links no error buffer of its own: its mk_fail is _core's
(csrc/python/common/engine_link.h); with a copy each, such a failure read "manaka: unknown
error".
Skipped, saying why, where there is no usable CUDA device; tools/cuda_emu/run_gpu_tests.py
runs it on the CPU emulation."""
import numpy as np
import pytest

import manaka  # noqa: F401  (loads _core first, as the package does)
from manaka import _testing, cuda

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not cuda.is_available(), reason=f"no CUDA device: {cuda.why_unavailable()}")]


@pytest.mark.parametrize("dims,name", [((-1, 4, 4), "M = -1"), ((4, 4, -3), "K = -3")])
def test_a_failing_cuda_entry_reports_its_own_message(dims, name):
    a = np.ones((4, 4), np.float32)
    with pytest.raises(ValueError, match=f"gemm: negative dimension .*{name}") as cpu:
        _testing.backend_gemm("cpu", a, a, dims=dims)
    with pytest.raises(ValueError, match=f"gemm: negative dimension .*{name}") as gpu:
        _testing.backend_gemm(cuda.backend_table(), a, a, dims=dims)
    assert "unknown error" not in str(gpu.value)
    assert str(gpu.value) == str(cpu.value)  # the CUDA entry words it as the CPU one does
