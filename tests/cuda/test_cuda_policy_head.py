"""The fused policy head on the CUDA backend (csrc/cuda/policy_head.cu): the kernel against
the NumPy reference and the CPU entry, and the fused training step against the split one
and against the CPU. Skipped, saying why, where there is no usable CUDA device; never run on
the CPU path. tools/cuda_emu/run_gpu_tests.py also runs this file on a CPU emulation."""
import numpy as np
import pytest

import manaka as mk
from manaka import _testing  # the test hooks (csrc/python/testing/)
import model_cases as cases
import op_inputs
import reference_model as refm
from manaka import cuda

pytestmark = [pytest.mark.cuda,  # tools/cuda_emu/run_gpu_tests.py runs it on the emulated device
              pytest.mark.skipif(not cuda.is_available(), reason=f"no CUDA device: {cuda.why_unavailable()}")]

TOL = 1e-5


def gpu_table():
    return cuda.backend_table()


def run(backend, inputs, grad_scale=0.37):
    return _testing.backend_policy_head(backend, *inputs, grad_scale)


# W = 300 / 16: float4 loads; 7 / 33: scalar loads. L = 6200 at W = 7 needs more than 48 KB
# of shared memory: that launch keeps the row in dlogits instead. At L = 6140 the dynamic
# row alone is exactly 48 KB: the kernel's static shared arrays count against the same
# per-block limit, so it too must keep the row in dlogits (a launch would fail).
SHAPES = [(9, 13, 7, 23, "random"), (1, 5, 4, 3, "full"), (6, 11, 16, 40, "one"),
          (5, 90, 300, 200, "random"), (3, 40, 33, 70, "full"), (2, 6200, 7, 50, "random"),
          (2, 6140, 7, 50, "random")]


@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}-L{}-W{}-M{}-{}".format(*s))
def test_policy_head_matches_reference_and_cpu(soft, shape):
    B, L, W, M, counts = shape
    rng = np.random.default_rng(B * 1000 + L)
    inputs = op_inputs.policy_head_batch(rng, B, L, W, M, counts, soft)
    got, cpu = run(gpu_table(), inputs), run("cpu", inputs)
    want = refm.policy_head(*inputs, 0.37)
    for name, g, c, w in zip(("dlogits", "dq", "row_loss"), got, cpu, want):
        assert g.shape == w.shape, name
        assert cases.rel_err(g, w) < TOL, name
        assert cases.rel_err(g, c) < TOL, name
    np.testing.assert_array_equal(got[3], want[3], err_msg="row_correct")
    padded = np.arange(L)[None] >= inputs[3][:, None]
    assert (got[0][padded] == 0).all(), "dlogits must be 0 at padded slots"


def test_ties_count_the_first_maximum():
    rng = np.random.default_rng(2)
    B, L, W, M = 6, 70, 8, 10  # L > 32: the tie spans warps and threads
    q, table, legal, counts, _, _ = op_inputs.policy_head_batch(rng, B, L, W, M, "full")
    target = np.array([0, 1, 69, 0, 33, 64], np.int32)
    _, _, loss, correct = _testing.backend_policy_head(gpu_table(), np.zeros_like(q), table,
                                                       legal, counts, target)
    np.testing.assert_array_equal(correct, (target == 0).astype(np.float32))
    np.testing.assert_allclose(loss, np.log(L), rtol=1e-6)
    same_move = np.full_like(legal, 7)
    _, _, _, correct = _testing.backend_policy_head(gpu_table(), q, table, same_move, counts, target)
    np.testing.assert_array_equal(correct, (target == 0).astype(np.float32))


@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
def test_fused_entry_matches_the_split_entries(soft):
    rng = np.random.default_rng(12)
    inputs = op_inputs.policy_head_batch(rng, 17, 70, 300, 120, soft=soft)
    fused = run(gpu_table(), inputs)
    split = _testing.backend_policy_head(gpu_table(), *inputs, 0.37, head="split")
    for name, a, b in zip(("dlogits", "dq", "row_loss"), fused, split):
        assert cases.rel_err(a, b) < TOL, name
    np.testing.assert_array_equal(fused[3], split[3])


def test_policy_head_is_bitwise_reproducible():
    rng = np.random.default_rng(4)
    inputs = op_inputs.policy_head_batch(rng, 64, 120, 300, 500, soft=True)
    for a, b in zip(run(gpu_table(), inputs), run(gpu_table(), inputs)):
        np.testing.assert_array_equal(a, b)


def twins(cfg, seed=3):
    """The fused and split models on the GPU, and the fused one on the CPU."""
    return (mk.Model(cfg, device="cuda", seed=seed), mk.Model(cfg, device="cuda", seed=seed,
                                                              policy_head="split"),
            mk.Model(cfg, device="cpu", seed=seed))


@pytest.mark.parametrize("hidden", [(), (12,)], ids=["hidden0", "hidden1"])
@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
def test_fused_step_matches_split_step_and_cpu(hidden, soft):
    cfg = cases.config(hidden=hidden)
    fused, split, cpu = twins(cfg)
    b = cases.batch(cfg, seed=7, soft=soft)
    results = [m.loss_and_grad(b, 0.7) for m in (fused, split, cpu)]
    s1, g1 = results[0]
    for s2, g2 in results[1:]:
        for key in ("loss", "policy_loss", "value_loss"):
            assert abs(s1[key] - s2[key]) <= TOL * max(1.0, abs(s2[key])), key
        assert s1["accuracy"] == s2["accuracy"]
        for name in g1:
            assert cases.rel_err(g1[name], g2[name]) < 1e-4, name


def test_five_trainer_steps_match_split():
    cfg = cases.config(hidden=(9,))
    fused, split, _ = twins(cfg, seed=4)
    opts = dict(lr=3e-2, warmup_steps=2, schedule="cosine", total_steps=5, weight_decay=0.1)
    t1, t2 = mk.Trainer(fused, **opts), mk.Trainer(split, **opts)
    for step in range(5):
        b = cases.batch(cfg, B=8, L=11, seed=30 + step, soft=step % 2 == 1)
        s1, s2 = t1.step(b), t2.step(b)
        assert abs(s1.loss - s2.loss) <= TOL * max(1.0, abs(s2.loss))
    cases.assert_parameters_match(fused, split, 1e-4)
    cases.assert_moments_match(t1, t2, 1e-4)
