"""pair_state_dtype="bf16" on the CUDA backend: its adamw_bf16 and fused
pair_sums_backward_adamw_bf16 entries give the CPU backend's bits on identical inputs
(the rounding noise is a pure function of (step seed, element), tests/api/test_trainer_bf16.py
holds the CPU to NumPy), the float32 entries too, the device-side non-finite flag skips
them, and a bf16 Trainer on the GPU follows the CPU one (gradients differ in the last bits
between the backends' GEMMs, so whole steps agree to 1e-4, not bitwise). Skipped, saying
why, where there is no usable CUDA device; tools/cuda_emu/run_gpu_tests.py runs this file
on the CPU emulation of the device."""
import numpy as np
import pytest

import manaka as mk
from manaka import _testing  # the test hooks (csrc/python/testing/)
import model_cases as cases
import reference_bf16 as rb
from manaka import cuda

pytestmark = [pytest.mark.cuda,  # tools/cuda_emu/run_gpu_tests.py runs it on the emulated device
              pytest.mark.skipif(not cuda.is_available(), reason=f"no CUDA device: {cuda.why_unavailable()}")]

TOL = 1e-4
ARGS = tuple(map(float, rb.adamw_args(2e-2, (0.9, 0.99), 1e-7, 0.05, 4)))


def _moments(rng, shape, dtype):
    m = (rng.standard_normal(shape) * 1e-3).astype(np.float32)
    v = (rng.random(shape) * 1e-5).astype(np.float32)
    return (rb.nearest(m), rb.nearest(v)) if dtype == "bf16" else (m, v)


@pytest.mark.parametrize("dtype", ["bf16", "float32"])
@pytest.mark.parametrize("finite", [True, False])
def test_adamw_entries_match_cpu_bitwise(dtype, finite):
    rng = np.random.default_rng(0)
    n = 5000
    p = rng.standard_normal(n).astype(np.float32)
    g = (rng.standard_normal(n) * 1e-2).astype(np.float32)
    m, v = _moments(rng, n, dtype)
    seed = rb.step_seed(4)
    want = _testing.backend_adamw("cpu", p, g, m, v, ARGS, seed, finite)
    got = _testing.backend_adamw(cuda.backend_table(), p, g, m, v, ARGS, seed, finite)
    for name, a, b in zip("pmv", got, want):
        np.testing.assert_array_equal(a, b, err_msg=name)
    if not finite:
        np.testing.assert_array_equal(got[0], p)


@pytest.mark.parametrize("dtype", ["bf16", "float32"])
def test_fused_pair_update_matches_cpu_bitwise(dtype):
    rng = np.random.default_rng(1)
    V, P, rows, T = 17, 4, 12, 9
    tokens = rng.integers(-1, V, (rows, T)).astype(np.int32)
    tokens[0, :] = 3  # one repeated token
    tokens[1, :] = -1  # an empty row
    grad = rng.standard_normal((rows, P)).astype(np.float32)
    p = rng.standard_normal((V * (V + 1) // 2, P)).astype(np.float32)
    m, v = _moments(rng, p.shape, dtype)
    seed = rb.step_seed(9)
    want = _testing.backend_pair_adamw("cpu", grad, tokens, p, m, v, ARGS, seed)
    got = _testing.backend_pair_adamw(cuda.backend_table(), grad, tokens, p, m, v, ARGS, seed)
    for name, a, b in zip("pmv", got, want):
        np.testing.assert_array_equal(a, b, err_msg=name)
    assert not np.array_equal(got[0], p)


def test_bf16_trainer_follows_cpu_and_round_trips_its_state():
    cfg = cases.config(hidden=(9,))
    cpu, gpu = mk.Model(cfg, device="cpu", seed=3), mk.Model(cfg, device="cuda", seed=3)
    opts = dict(lr=3e-2, warmup_steps=2, weight_decay=0.1, pair_state_dtype="bf16")
    t1, t2 = mk.Trainer(cpu, **opts), mk.Trainer(gpu, **opts)
    for step in range(5):
        b = cases.batch(cfg, seed=20 + step)
        s1, s2 = t1.step(b), t2.step(b)
        assert abs(s1.loss - s2.loss) <= TOL * max(1.0, abs(s1.loss))
    cases.assert_parameters_match(gpu, cpu, TOL)
    m1, m2 = t1.state_dict(), t2.state_dict()
    for kind in ("exp_avg", "exp_avg_sq"):
        for name in m1[kind]:
            # bf16 moments may round the other way where the fp32 values differ slightly
            tol = 2 ** -7 if name == "pair_table" else TOL
            assert cases.rel_err(m2[kind][name], m1[kind][name]) < tol, (kind, name)
    # the GPU's bf16 state loads back exactly (its moments are bf16 values)
    t3 = mk.Trainer(mk.Model(cfg, device="cuda", seed=3), pair_state_dtype="bf16")
    t3.load_state_dict(m2)
    back = t3.state_dict()
    for kind in ("exp_avg", "exp_avg_sq"):
        for name, a in m2[kind].items():
            np.testing.assert_array_equal(back[kind][name], a)
