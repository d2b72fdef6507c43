"""The data-parallel step's two halves (Trainer._core.backward / apply, what
Trainer(process_group=...) runs around the exchange) on the CUDA backend: the dense
gradients and the named pair rows come out as __cuda_array_interface__ buffers equal to the
CPU's (the same row ids; values to 1e-4 in FP32), and apply from those device buffers by
pointer is the plain CUDA step (dense, sparse, lazy). Needs no torch. Skipped, saying why,
without a usable CUDA device; tools/cuda_emu/run_gpu_tests.py runs it on the emulated one."""
import numpy as np
import pytest

import manaka as mk
import model_cases as cases
from manaka import cuda

pytestmark = [pytest.mark.cuda,  # tools/cuda_emu/run_gpu_tests.py runs it on the emulated device
              pytest.mark.skipif(not cuda.is_available(), reason=f"no CUDA device: {cuda.why_unavailable()}")]

TOL = 1e-4


def host(interface, owner):
    """A NumPy copy of a buffer the core describes with a __cuda_array_interface__ dict."""
    dtype = {"<f4": "float32", "<i8": "int64"}[interface["typestr"]]
    return mk.DeviceArray.from_ptr(interface["data"][0], interface["shape"], dtype, owner=owner).numpy()


@pytest.mark.parametrize("update", ["dense", "sparse", "lazy"])
def test_halves_on_the_gpu_match_the_cpu_and_the_plain_step(update):
    cfg = cases.config(hidden=(9,))
    cpu, gpu, plain = (mk.Model(cfg, device=d, seed=3) for d in ("cpu", "cuda", "cuda"))
    tc, tg, tp = (mk.Trainer(m, lr=0.02, pair_update=update) for m in (cpu, gpu, plain))
    for k in range(3):
        b = cases.batch(cfg, seed=20 + k)
        b.policy_target = None
        (sc, nc), (sg, ng) = tc._core.backward(b), tg._core.backward(b)
        assert nc == ng > 0 and abs(sg[0] - sc[0]) <= TOL * max(1.0, abs(sc[0]))
        dense = tg._core.dense_grads()
        assert isinstance(dense, dict) and dense["typestr"] == "<f4"
        assert cases.rel_err(host(dense, tg), tc._core.dense_grads()) < TOL
        ids_c, rows_c = tc._core.pair_rows(nc)
        ids_g, rows_g = tg._core.pair_rows(ng)
        np.testing.assert_array_equal(host(ids_g, tg), ids_c)
        assert host(rows_g, tg).shape == rows_c.shape and cases.rel_err(host(rows_g, tg), rows_c) < TOL
        with pytest.raises(ValueError, match="takes the row count"):
            tg._core.apply(ids_g["data"][0], rows_g["data"][0], sg)
        _, step = tg._core.apply(ids_g["data"][0], rows_g["data"][0], sg, ng)
        tc._core.apply(ids_c, rows_c, sc)
        tp.step(b)
        assert step == k + 1 == tp.step_count
    for t in (tc, tg):  # the halves bypass Trainer.step, which registers the trainer whose
        t.flush()       # lagging rows a read of the model catches up: catch them up here
    cases.assert_parameters_match(gpu, plain, tol=1e-6)
    cases.assert_parameters_match(gpu, cpu, tol=TOL)
