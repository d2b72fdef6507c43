"""The fused policy head (backend entry policy_head, csrc/cpu/policy_head.c) against the
NumPy reference, and the fused training step against the split one (gather_dot,
softmax_xent, gather_dot_backward) on the CPU and on the "cpu_staged" device-memory path.
tests/cuda/test_cuda_policy_head.py holds the CUDA kernel to the same checks."""
import numpy as np
import pytest

import manaka as mk
from manaka import _testing  # the test hooks (csrc/python/testing/)
import model_cases as cases
import op_inputs
import reference_model as refm
from model_cases import staged_twin

TOL = 1e-5
BACKENDS = ["cpu", "cpu_staged"]


def check_against_reference(backend, inputs, grad_scale=0.37):
    q, table, legal, counts, target, soft = inputs
    got = _testing.backend_policy_head(backend, q, table, legal, counts, target, soft, grad_scale)
    want = refm.policy_head(q, table, legal, counts, target, soft, grad_scale)
    for name, g, w in zip(("dlogits", "dq", "row_loss"), got, want):
        assert g.dtype == np.float32 and g.shape == w.shape, name
        assert cases.rel_err(g, w) < TOL, name
    np.testing.assert_array_equal(got[3], want[3], err_msg="row_correct")
    padded = np.arange(legal.shape[1])[None] >= counts[:, None]
    assert (got[0][padded] == 0).all(), "dlogits must be 0 at padded slots"
    return got


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
@pytest.mark.parametrize("shape", [(9, 13, 7, 23, "random"), (1, 5, 4, 3, "full"),
                                   (6, 11, 16, 40, "one"), (33, 40, 33, 70, "full"),
                                   (5, 90, 300, 200, "random")],
                         ids=lambda s: "B{}-L{}-W{}-M{}-{}".format(*s))
def test_policy_head_matches_reference(backend, soft, shape):
    B, L, W, M, counts = shape
    rng = np.random.default_rng(B * 1000 + L)
    check_against_reference(backend, op_inputs.policy_head_batch(rng, B, L, W, M, counts, soft))


@pytest.mark.parametrize("backend", BACKENDS)
def test_policy_head_with_large_logits_is_stable(backend):
    """Logits in the hundreds: exp would overflow without the max subtracted."""
    rng = np.random.default_rng(5)
    inputs = op_inputs.policy_head_batch(rng, 8, 20, 12, 30, soft=True, scale=300.0)
    dlogits, _, row_loss, _ = check_against_reference(backend, inputs)
    assert np.isfinite(dlogits).all() and np.isfinite(row_loss).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_ties_count_the_first_maximum(backend):
    """Equal logits (q = 0; or every slot the same move): the argmax is slot 0, so only
    targets at slot 0 count as correct, and the loss is log(n)."""
    rng = np.random.default_rng(2)
    B, L, W, M = 6, 5, 8, 10
    q, table, legal, counts, _, _ = op_inputs.policy_head_batch(rng, B, L, W, M, "full")
    target = np.array([0, 1, 4, 0, 2, 3], np.int32)
    _, _, loss, correct = _testing.backend_policy_head(backend, np.zeros_like(q), table, legal,
                                                       counts, target)
    np.testing.assert_array_equal(correct, (target == 0).astype(np.float32))
    np.testing.assert_allclose(loss, np.log(L), rtol=1e-6)
    same_move = np.full_like(legal, 7)
    _, _, _, correct = _testing.backend_policy_head(backend, q, table, same_move, counts, target)
    np.testing.assert_array_equal(correct, (target == 0).astype(np.float32))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
def test_fused_entry_matches_the_split_entries(backend, soft):
    """policy_head against gather_dot, softmax_xent and gather_dot_backward (grad_table =
    NULL) on the same backend; repeating either on the same buffers changes nothing."""
    rng = np.random.default_rng(11)
    inputs = op_inputs.policy_head_batch(rng, 17, 30, 24, 50, soft=soft)
    fused = _testing.backend_policy_head(backend, *inputs, 0.25)
    split = _testing.backend_policy_head(backend, *inputs, 0.25, head="split", repeats=3)
    for name, a, b in zip(("dlogits", "dq", "row_loss"), fused, split):
        assert cases.rel_err(a, b) < TOL, name
    np.testing.assert_array_equal(fused[3], split[3])
    again = _testing.backend_policy_head(backend, *inputs, 0.25, repeats=3)
    for a, b in zip(fused, again):
        np.testing.assert_array_equal(a, b)


def test_cpu_and_staged_paths_agree_bitwise():
    rng = np.random.default_rng(8)
    inputs = op_inputs.policy_head_batch(rng, 7, 12, 10, 15, soft=True)
    for a, b in zip(_testing.backend_policy_head("cpu", *inputs, 0.5),
                    _testing.backend_policy_head("cpu_staged", *inputs, 0.5)):
        np.testing.assert_array_equal(a, b)


def test_bad_arguments_raise_naming_them():
    rng = np.random.default_rng(3)
    q, table, legal, counts, target, _ = op_inputs.policy_head_batch(rng, 3, 4, 5, 6, "full")
    run = _testing.backend_policy_head
    with pytest.raises(ValueError, match="counts"):
        run("cpu", q, table, legal, np.array([1, 0, 2], np.int32), np.zeros(3, np.int32))
    with pytest.raises(ValueError, match="legal"):
        bad = legal.copy()
        bad[1, 2] = 6
        run("cpu", q, table, bad, counts, target)
    with pytest.raises(ValueError, match="target"):
        run("cpu", q, table, legal, counts, np.array([0, 4, 0], np.int32))
    with pytest.raises(ValueError, match="policy_target"):
        run("cpu", q, table, legal, counts, target, np.full((3, 4), 0.5, np.float32))
    with pytest.raises(TypeError, match="q"):
        run("cpu", q.astype(np.float64), table, legal, counts, target)
    with pytest.raises(ValueError, match="shapes"):
        run("cpu", q, table[:, :4], legal, counts, target)
    with pytest.raises(ValueError, match="not in this build"):
        run("tpu", q, table, legal, counts, target)
    with pytest.raises(ValueError, match="head"):
        run("cpu", q, table, legal, counts, target, head="both")
    with pytest.raises(ValueError, match="repeats"):
        run("cpu", q, table, legal, counts, target, repeats=0)


def test_model_rejects_an_unknown_policy_head():
    cfg = cases.config()
    for bad in ("fast", "", None, 1):
        with pytest.raises(ValueError, match="policy_head"):
            mk.Model(cfg, policy_head=bad)
    assert mk.Model(cfg).policy_head == "fused" and mk.Model(cfg)._core.fused_head
    split = mk.Model(cfg, policy_head="split")
    assert split.policy_head == "split" and not split._core.fused_head
    assert "policy_head='split'" in repr(split)


def model_pair(cfg, backend, seed=3):
    """The same model with the fused and with the split policy head, on `backend`."""
    fused = mk.Model(cfg, seed=seed, policy_head="fused")
    split = mk.Model(cfg, seed=seed, policy_head="split")
    if backend == "cpu_staged":
        fused, split = staged_twin(fused), staged_twin(split)
    return fused, split


def assert_close_stats(a, b):
    for key in ("loss", "policy_loss", "value_loss"):
        assert abs(a[key] - b[key]) <= TOL * max(1.0, abs(b[key])), key
    assert a["accuracy"] == b["accuracy"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("hidden", [(), (12,), (10, 6)], ids=["hidden0", "hidden1", "hidden2"])
@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
def test_fused_step_matches_split_step(backend, hidden, soft):
    cfg = cases.config(hidden=hidden)
    fused, split = model_pair(cfg, backend)
    b = cases.batch(cfg, seed=7, soft=soft)
    (s1, g1), (s2, g2) = fused.loss_and_grad(b, 0.7), split.loss_and_grad(b, 0.7)
    assert_close_stats(s1, s2)
    assert list(g1) == list(g2)
    for name in g1:
        assert cases.rel_err(g1[name], g2[name]) < TOL, name
    # and both against the float64 reference, through the fused path's own numbers
    want_stats, want = refm.loss_and_grad(fused.state_dict(), cfg, b, 0.7)
    assert s1["loss"] == pytest.approx(want_stats["loss"], rel=1e-5)
    for name in g1:
        assert cases.rel_err(g1[name], want[name]) < 1e-4, name


@pytest.mark.parametrize("backend", BACKENDS)
def test_five_trainer_steps_match_split(backend):
    cfg = cases.config(hidden=(9,))
    fused, split = model_pair(cfg, backend, seed=4)
    opts = dict(lr=3e-2, warmup_steps=2, schedule="cosine", total_steps=5, weight_decay=0.1)
    t1, t2 = mk.Trainer(fused, **opts), mk.Trainer(split, **opts)
    for step in range(5):
        b = cases.batch(cfg, B=8, L=11, seed=30 + step, soft=step % 2 == 1)
        s1, s2 = t1.step(b), t2.step(b)
        assert_close_stats(s1.as_dict(), s2.as_dict())
    assert t1.step_count == t2.step_count == 5
    cases.assert_parameters_match(fused, split, 1e-4)
    cases.assert_moments_match(t1, t2, 1e-4)


def test_forward_is_the_same_for_both_heads():
    cfg = cases.config()
    fused, split = model_pair(cfg, "cpu")
    b = cases.batch(cfg, seed=4)
    for x, y in zip(fused.forward(b), split.forward(b)):
        np.testing.assert_array_equal(x, y)


def test_save_and_load_keep_the_choice_out_of_the_file(tmp_path):
    cfg = cases.config()
    fused, _ = model_pair(cfg, "cpu")
    fused.save(tmp_path / "m.manaka")
    back = mk.Model.load(tmp_path / "m.manaka", policy_head="split")
    assert back.policy_head == "split"
    cases.assert_parameters_match(back, fused)
    with pytest.raises(ValueError, match="policy_head"):
        mk.Model.load(tmp_path / "m.manaka", policy_head="both")


def test_benchmark_comparison_runs_and_checks_agreement():
    from manaka.bench import policy_head

    cfg = cases.config(hidden=(8,))
    model = mk.Model(cfg, seed=2)
    trainer = mk.Trainer(model, lr=1e-2)
    lines, results = policy_head.compare(model, trainer, cases.batch(cfg, seed=3), runs=2, warmup=1)
    assert results["fused"].median_ms > 0 and results["split"].median_ms > 0
    assert results["max_rel_grad_difference"] < 1e-4
    assert results["split_over_fused"] > 0 and any("split / fused" in line for line in lines)
    with pytest.raises(ValueError, match="policy_head"):
        policy_head.compare(mk.Model(cfg, policy_head="split"), trainer, cases.batch(cfg), 1, 0)


def test_benchmark_op_comparison_runs():
    from manaka.bench import policy_head
    from manaka.bench.floors import floor_ms, policy_head_floor

    cfg = cases.config()
    batch = cases.batch(cfg, B=32, L=20, seed=1)
    rates = {"copy_gbs": 10.0, "gemm_gflops": 100.0}
    lines, results = policy_head.compare_ops("cpu", batch, W=16, M=40, runs=2, repeats=3, rates=rates)
    assert set(results["per_op_ms"]) == {"fused", "split"}
    assert results["max_rel_difference"] < 1e-4 and any("split / fused" in line for line in lines)
    want = floor_ms(policy_head_floor(batch.legal, batch.counts, 16), 10.0, 100.0)
    assert results["floor"]["floor_ms"] == want and any("fused floor" in line for line in lines)


def test_policy_head_floor_counts_the_bytes_and_flops():
    """The floor's model on a batch counted by hand: 2 positions, 5 legal slots over 3
    distinct moves, W = 4."""
    from manaka.bench.floors import floor_ms, policy_head_floor

    legal = np.array([[3, 1, -1], [1, 1, 2]], np.int32)
    need = policy_head_floor(legal, np.array([2, 3], np.int32), 4)
    # q 2x4, 5 slots, counts + targets 2 + 2, rows {1, 2, 3} x 4, dlogits 2x3, dq 2x4, stats 2 + 2
    assert need == {"bytes": 4 * (8 + 5 + 4 + 12 + 6 + 8 + 4), "flops": 2 * 2 * 5 * 4}
    # max(bytes at 1 GB/s, FLOPs at 1 GFLOP/s) in ms: 188 bytes -> 1.88e-4 ms, 80 FLOPs -> 8e-5 ms;
    # at 0.1 GFLOP/s the FLOPs take 8e-4 ms and set the floor
    assert floor_ms(need, 1.0, 1.0) == pytest.approx(1.88e-4)
    assert floor_ms(need, 1.0, 0.1) == pytest.approx(8e-4)
