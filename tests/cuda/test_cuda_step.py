"""The training step on the CUDA backend against the CPU backend (which tests/api/test_model.py
and tests/api/test_trainer.py hold to the NumPy reference): forward, loss, every gradient and
five AdamW steps agree to 1e-4 in FP32; bad batches change nothing; parameters are live
DeviceArray views. Skipped, saying why, where there is no usable CUDA device; never run on
the CPU path. tools/cuda_emu/run_gpu_tests.py also runs this file on a CPU emulation of the
device (with cublas_emu.c standing in for cuBLAS)."""
import numpy as np
import pytest

import manaka as mk
import model_cases as cases
from manaka import cuda

pytestmark = [pytest.mark.cuda,  # tools/cuda_emu/run_gpu_tests.py runs it on the emulated device
              pytest.mark.skipif(not cuda.is_available(), reason=f"no CUDA device: {cuda.why_unavailable()}")]

TOL = 1e-4


def twins(cfg, seed=3):
    """The same model on the CPU and on the GPU (the same seed gives the same bits; a
    move-pair table, which starts at 0, is made random on the CPU and copied)."""
    cpu, gpu = cases.model(cfg, seed=seed), mk.Model(cfg, device="cuda", seed=seed)
    gpu.load_state_dict(cpu.state_dict())
    return cpu, gpu


def test_initial_parameters_are_identical():
    cpu, gpu = twins(cases.config(hidden=(8,)))
    cases.assert_parameters_match(gpu, cpu)


MOVE_HIDDEN = ("move_hidden_relative", "move_hidden_class", "move_hidden_out")
MOVE_SHARED = ("move_shared_class", "move_shared_group")


@pytest.mark.parametrize("hidden, move_pairs, board, move_hidden, L, shared",
                         [((), 0, (0, 0, 0), 0, 9, 0), ((12,), 0, (0, 0, 0), 0, 9, 0), ((10, 6), 0, (0, 0, 0), 0, 9, 0),
                          ((12,), 5, (0, 0, 0), 0, 9, 0), ((12,), 8, (2, 2, 2), 0, 9, 0),
                          ((12,), 8, (2, 2, 2), 16, 9, 0), ((12,), 8, (2, 2, 2), 1, 9, 0),
                          ((12,), 8, (2, 2, 2), 16, 40, 0), ((12,), 5, (0, 0, 0), 0, 9, 1),
                          ((12,), 8, (2, 2, 2), 16, 40, 1), ((12,), 8, (2, 2, 2), 16, 40, 2)],
                         ids=["hidden0", "hidden1", "hidden2", "move_pairs", "relative", "move_hidden16",
                              "move_hidden1", "move_hidden16-L40", "move_shared", "move_hidden_shared-L40",
                              "move_hidden_gate-L40"])
@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
def test_forward_loss_and_gradients_match_cpu(hidden, move_pairs, board, move_hidden, L, shared, soft):
    """shared: 1 the shared move rows, 2 also MoveHidden's gated readout."""
    cfg = cases.config(hidden=hidden, move_pairs=move_pairs, board=board, move_hidden=move_hidden,
                       num_moves=4 * move_pairs if shared else 17, move_shared=min(shared, 1),
                       move_hidden_gate=int(shared == 2))
    cpu, gpu = twins(cfg)
    b = cases.batch(cfg, L=L, seed=7, soft=soft)
    for x, y in zip(cpu.forward(b), gpu.forward(b)):
        assert cases.rel_err(y, x) < TOL
    (s1, g1), (s2, g2) = cpu.loss_and_grad(b, 0.7), gpu.loss_and_grad(b, 0.7)
    for key in ("loss", "policy_loss", "value_loss"):
        assert abs(s2[key] - s1[key]) <= TOL * max(1.0, abs(s1[key])), key
    assert s1["accuracy"] == s2["accuracy"]
    for name in g1:
        assert cases.rel_err(g2[name], g1[name]) < TOL, name
    for name in (MOVE_HIDDEN if move_hidden else ()) + (MOVE_SHARED if shared else ()) + \
            (("move_hidden_gate",) if shared == 2 else ()):
        assert np.abs(g1[name]).max() > 0, f"{name}: a zero gradient tests nothing"


@pytest.mark.parametrize("schedule", ["constant", "cosine"])
@pytest.mark.parametrize("kw", [dict(hidden=(9,)), dict(hidden=(9,), move_pairs=5),
                                dict(hidden=(9,), move_pairs=8, board=(2, 2, 2)),
                                # a 3 x 2 board of 2 token kinds (tokens 12..14 in hand), 12 classes
                                dict(hidden=(12,), num_tokens=15, move_pairs=12, board=(3, 2, 2), move_hidden=16),
                                dict(hidden=(9,), num_moves=20, move_pairs=5, move_shared=1),
                                dict(hidden=(12,), num_tokens=15, move_pairs=12, board=(3, 2, 2), move_hidden=16,
                                     move_hidden_gate=1)],
                         ids=["plain", "move_pairs", "relative", "move_hidden", "move_shared", "move_hidden_gate"])
def test_five_adamw_steps_match_cpu(schedule, kw):
    cfg = cases.config(**kw)
    move_hidden = cfg.move_hidden
    cpu, gpu = twins(cfg)
    opts = dict(lr=3e-2, warmup_steps=2, schedule=schedule, total_steps=5, weight_decay=0.1)
    t1, t2 = mk.Trainer(cpu, **opts), mk.Trainer(gpu, **opts)
    for step in range(5):
        b = cases.batch(cfg, seed=20 + step, soft=step % 2 == 1)
        s1, s2 = t1.step(b), t2.step(b)
        assert abs(s1.loss - s2.loss) <= TOL * max(1.0, abs(s1.loss))
        assert s1.lr == s2.lr
    assert t1.step_count == t2.step_count == 5
    cases.assert_parameters_match(gpu, cpu, TOL)
    cases.assert_moments_match(t2, t1, TOL)
    start = cases.model(cfg, seed=3).parameters()
    for name in (MOVE_HIDDEN if move_hidden else ()) + (MOVE_SHARED if cfg.move_shared else ()) + \
            (("move_hidden_gate",) if cfg.move_hidden_gate else ()):
        assert not np.array_equal(gpu.parameters()[name].numpy(), start[name]), f"{name} never moved"


def test_bad_batch_changes_nothing():
    cfg = cases.config()
    _, gpu = twins(cfg)
    trainer = mk.Trainer(gpu, lr=1e-2)
    trainer.step(cases.batch(cfg, seed=1))
    snap = cases.snapshot(gpu, trainer)
    bad = cases.batch(cfg, seed=2)
    bad.target[0] = bad.counts[0]  # one past its legal list
    with pytest.raises(ValueError, match="target"):
        trainer.step(bad)
    cases.assert_unchanged(gpu, trainer, snap)


def test_parameters_are_live_device_views():
    cfg = cases.config()
    _, gpu = twins(cfg)
    views = gpu.parameters()
    assert all(isinstance(v, mk.DeviceArray) for v in views.values())
    assert views["move_table"].shape == (cfg.num_moves, cfg.head_width)
    new = np.full(views["value.bias"].shape, 0.25, np.float32)
    gpu.load_state_dict({**gpu.state_dict(), "value.bias": new})
    np.testing.assert_array_equal(views["value.bias"].numpy(), new)


def test_save_and_load_round_trip_through_the_gpu(tmp_path):
    cfg = cases.config()
    _, gpu = twins(cfg)
    path = tmp_path / "m.manaka"
    gpu.save(path)
    back = mk.Model.load(path, device="cpu")
    cases.assert_parameters_match(back, gpu)


def test_many_steps_cycle_the_pinned_staging_ring():
    """Every batch is copied through the pinned staging ring (64 copies in flight at most):
    40 steps of ~7 copies each wrap it several times; results still match the CPU."""
    cfg = cases.config(hidden=(6,))
    cpu, gpu = twins(cfg, seed=9)
    t1, t2 = mk.Trainer(cpu, lr=1e-2), mk.Trainer(gpu, lr=1e-2)
    pending = []
    for step in range(40):
        b = cases.batch(cfg, seed=100 + step, soft=step % 3 == 0)
        pending.append((t1.step(b).loss, t2.step(b)))  # GPU stats read only at the end
    for want, got in pending:
        assert abs(got.loss - want) <= TOL * max(1.0, abs(want))
    cases.assert_parameters_match(gpu, cpu, 10 * TOL)


@pytest.mark.parametrize("kw", [dict(hidden=(12,), num_moves=36, move_pairs=4, move_kinds=3),
                                dict(hidden=(12,), num_tokens=15, num_moves=72, move_pairs=12, board=(3, 2, 2),
                                     move_hidden=16, move_shared=1, move_kinds=2),
                                dict(hidden=(12,), num_moves=36, move_pairs=4, move_kinds=3, value_hidden=7),
                                dict(hidden=(12,), value_hidden=5),
                                dict(hidden=(12,), value_hidden=5, value_power_sums=1)],
                         ids=["move_kinds", "move_kinds_all", "move_kinds_value_hidden", "value_hidden",
                              "value_power_sums"])
def test_move_kinds_forward_gradients_and_steps_match_cpu(kw):
    """Move kinds (the label split on the device, the kind table's gather and scatter) and
    the value head's hidden layer: forward, every gradient and five AdamW steps as on the
    CPU."""
    cfg = cases.config(**kw)
    cpu, gpu = twins(cfg)
    b = cases.batch(cfg, L=40, seed=9)
    for x, y in zip(cpu.forward(b), gpu.forward(b)):
        assert cases.rel_err(y, x) < TOL
    (_, g1), (_, g2) = cpu.loss_and_grad(b, 0.7), gpu.loss_and_grad(b, 0.7)
    for name in g1:
        assert cases.rel_err(g2[name], g1[name]) < TOL, name
    for name in ("move_kind_table", "value_hidden.weight", "value_hidden.bias"):
        if name in g1:
            assert np.abs(g1[name]).max() > 0, name
    opts = dict(lr=3e-2, warmup_steps=2, schedule="cosine", total_steps=5, weight_decay=0.1)
    t1, t2 = mk.Trainer(cpu, **opts), mk.Trainer(gpu, **opts)
    for step in range(5):
        b = cases.batch(cfg, L=40, seed=30 + step)
        s1, s2 = t1.step(b), t2.step(b)
        assert abs(s1.loss - s2.loss) <= TOL * max(1.0, abs(s1.loss))
    cases.assert_parameters_match(gpu, cpu, TOL)
    cases.assert_moments_match(t2, t1, TOL)
