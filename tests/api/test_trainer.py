"""Trainer: AdamW and the schedule against the float64 reference, batch validation that
changes nothing, the non-finite guard, exact resume, and a learning test."""
import math
import os

import numpy as np
import pytest

import manaka as mk
from manaka import _testing  # the test hooks (csrc/python/testing/)
import model_cases as cases
from model_cases import staged_twin, state_bytes as snapshot
import reference_model as refm

HYPER = dict(lr=3e-2, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)


@pytest.mark.parametrize("hidden, move_pairs, board, move_hidden, shared",
                         [((), 0, (0, 0, 0), 0, 0), ((10, 6), 0, (0, 0, 0), 0, 0), ((10,), 5, (0, 0, 0), 0, 0),
                          ((10,), 8, (2, 2, 2), 0, 0), ((10,), 8, (2, 2, 2), 3, 0), ((10,), 5, (0, 0, 0), 0, 1),
                          ((10,), 8, (2, 2, 2), 3, 1), ((10,), 8, (2, 2, 2), 3, 2)],
                         ids=["hidden0", "hidden2", "move_pairs", "relative", "move_hidden", "move_shared",
                              "move_hidden_shared", "move_hidden_gate"])
@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
def test_steps_match_reference_adamw(hidden, move_pairs, board, move_hidden, shared, soft):
    """shared: 1 the shared move rows, 2 also MoveHidden's gated readout."""
    cfg = cases.config(hidden=hidden, move_pairs=move_pairs, board=board, move_hidden=move_hidden,
                       num_moves=4 * move_pairs if shared else 17, move_shared=min(shared, 1),
                       move_hidden_gate=int(shared == 2))
    model = cases.model(cfg, seed=2)
    trainer = mk.Trainer(model, warmup_steps=2, schedule="cosine", total_steps=5, min_lr=1e-3,
                         value_weight=0.5, **HYPER)
    names = list(model.shapes)
    m = {n: 0.0 for n in names}
    v = {n: 0.0 for n in names}
    g_scale = {}
    for t in range(1, 5):
        b = cases.batch(cfg, seed=10 + t, soft=soft)
        before = model.state_dict()
        _, grads = model.loss_and_grad(b, value_weight=0.5)  # the step's own gradients
        want_stats, _ = refm.loss_and_grad(before, cfg, b, 0.5)
        lr = refm.lr_at(t - 1, HYPER["lr"], 2, "cosine", 5, 1e-3)
        want_p, m, v = refm.adamw(before, grads, m, v, t, lr, HYPER["betas"], HYPER["eps"],
                                  HYPER["weight_decay"])
        stats = trainer.step(b)
        assert stats.step == t == trainer.step_count
        assert stats.lr == pytest.approx(lr, rel=1e-6)
        assert stats.loss == pytest.approx(want_stats["loss"], rel=1e-5)
        assert stats.accuracy == pytest.approx(want_stats["accuracy"])
        got = model.state_dict()
        for n in names:
            assert cases.rel_err(got[n], want_p[n]) < 1e-5, (t, n)
        state = trainer.state_dict()
        for n in names:
            # float32 moments against float64: a moment whose gradients nearly cancel (a
            # scalar bias) is bounded by the scale of the gradients it averaged
            g_scale[n] = max(g_scale.get(n, 0.0), float(np.abs(grads[n]).max()))
            for got_m, want_m, scale in ((state["exp_avg"][n], m[n], g_scale[n]),
                                         (state["exp_avg_sq"][n], v[n], g_scale[n] ** 2)):
                err = np.abs(np.float64(got_m) - want_m).max()
                assert err <= 1e-4 * max(np.abs(want_m).max(), 1e-2 * scale), (t, n, err)


def test_losses_follow_reference_training():
    """Three steps where the reference computes its own gradients: the loss curves agree."""
    cfg = cases.config(hidden=(8,))
    model = mk.Model(cfg, seed=9)
    trainer = mk.Trainer(model, lr=1e-2)
    params = {n: np.float64(a) for n, a in model.state_dict().items()}
    m = {n: 0.0 for n in params}
    v = {n: 0.0 for n in params}
    for t in range(1, 4):
        b = cases.batch(cfg, seed=t)
        stats, grads = refm.loss_and_grad(params, cfg, b)
        params, m, v = refm.adamw(params, grads, m, v, t, 1e-2)
        assert trainer.step(b).loss == pytest.approx(stats["loss"], rel=1e-4)


def test_schedule():
    model = mk.Model(cases.config(), seed=0)
    t = mk.Trainer(model, lr=1.0, warmup_steps=4, schedule="cosine", total_steps=10, min_lr=0.1)
    for s in range(14):
        assert t.lr_at(s) == pytest.approx(refm.lr_at(s, 1.0, 4, "cosine", 10, 0.1), rel=1e-6)
    assert t.lr_at(0) == pytest.approx(0.25) and t.lr_at(3) == 1.0 and t.lr_at(12) == pytest.approx(0.1)
    c = mk.Trainer(model, lr=0.5, warmup_steps=2)
    assert [c.lr_at(s) for s in range(4)] == [0.25, 0.5, 0.5, 0.5]
    with pytest.raises(ValueError, match="cosine.*total_steps"):
        mk.Trainer(model, schedule="cosine")
    with pytest.raises(ValueError, match="schedule"):
        mk.Trainer(model, schedule="linear")
    with pytest.raises(ValueError, match="total_steps"):
        mk.Trainer(model, schedule="cosine", warmup_steps=5, total_steps=5)
    with pytest.raises(ValueError, match="lr"):
        mk.Trainer(model, lr=-1.0)


def _bad_batches(cfg):
    """(field named in the error, batch) for every kind of bad value."""
    good = cases.batch(cfg, B=5, L=6, seed=4, soft=True)
    f = {k: getattr(good, k).copy() for k in ("tokens", "legal", "counts", "target", "value", "policy_target")}

    def make(field, edit, **kw):
        arrays = {k: v.copy() for k, v in f.items()}
        edit(arrays[field])
        arrays.update(kw)
        return field, mk.Batch(**arrays)

    n0 = int(f["counts"][0])
    out = [
        make("tokens", lambda a: a.__setitem__((1, 0, 2), -2)),
        make("tokens", lambda a: a.__setitem__((2, 1, 0), cfg.num_tokens)),
        make("counts", lambda a: a.__setitem__(3, 0)),
        make("counts", lambda a: a.__setitem__(3, 7)),
        make("legal", lambda a: a.__setitem__((0, n0 - 1), cfg.num_moves)),
        make("legal", lambda a: a.__setitem__((0, 0), -1)),
        make("target", lambda a: a.__setitem__(4, f["counts"][4])),
        make("target", lambda a: a.__setitem__(1, -1)),
        make("value", lambda a: a.__setitem__(2, np.nan)),
        make("value", lambda a: a.__setitem__(2, 1.5)),
        make("value", lambda a: a.__setitem__(0, -0.25)),
        make("policy_target", lambda a: a.__setitem__((1, 0), a[1, 0] - 1.0)),
        make("policy_target", lambda a: a.__setitem__((1, 0), np.nan)),
        make("policy_target", lambda a: a.__setitem__((2, 0), a[2, 0] + 0.01)),
        make("tokens", lambda a: None, tokens=np.zeros((5, 2, cfg.tokens_per_side + 1), np.int32)),
        make("tokens", lambda a: None, tokens=np.zeros((5, 3, cfg.tokens_per_side), np.int32)),
    ]
    return good, out


def test_bad_batches_raise_and_change_nothing():
    cfg = cases.config()
    model = mk.Model(cfg, seed=1)
    trainer = mk.Trainer(model, lr=1e-2)
    good, bad = _bad_batches(cfg)
    trainer.step(good)  # non-zero moments, step_count 1
    before = snapshot(model, trainer)
    for field, b in bad:
        with pytest.raises(ValueError, match=field):
            trainer.step(b)
        with pytest.raises(ValueError, match=field):
            model.loss_and_grad(b)
        assert snapshot(model, trainer) == before, field
    # garbage at padded legal slots and padded soft-target slots is ignored
    legal, soft = good.legal.copy(), good.policy_target.copy()
    for r in range(len(good)):
        legal[r, good.counts[r]:] = 10**6
        soft[r, good.counts[r]:] = np.nan
    trainer.step(mk.Batch(good.tokens, legal, good.counts, good.target, good.value, soft))
    assert trainer.step_count == 2


def test_non_finite_loss_raises_naming_the_step_and_skips_the_update():
    cfg = cases.config()
    model = mk.Model(cfg, seed=1)
    trainer = mk.Trainer(model, lr=1e-2)
    b = cases.batch(cfg)
    trainer.step(b)
    model.parameters()["value.bias"][0] = np.inf  # value logit inf - inf -> nan
    model.parameters()["value.weight"][0, 0] = -np.inf
    before = snapshot(model, trainer)
    with pytest.raises(FloatingPointError, match="step 1"):
        trainer.step(b)
    assert snapshot(model, trainer) == before


def test_state_dict_resumes_training_exactly():
    cfg = cases.config(hidden=(8,))
    batches = [cases.batch(cfg, seed=s) for s in range(6)]
    kw = dict(lr=2e-2, warmup_steps=2, schedule="cosine", total_steps=6, min_lr=1e-3)
    a = mk.Model(cfg, seed=3)
    ta = mk.Trainer(a, **kw)
    for b in batches[:3]:
        ta.step(b)
    saved_model, saved_trainer = a.state_dict(), ta.state_dict()
    for b in batches[3:]:
        ta.step(b)
    b_model = mk.Model(cfg, seed=99)
    b_model.load_state_dict(saved_model)
    tb = mk.Trainer(b_model, lr=1.0)  # hyperparameters come from the state
    tb.load_state_dict(saved_trainer)
    assert tb.step_count == 3 and tb.hyperparameters == ta.hyperparameters
    for b in batches[3:]:
        tb.step(b)
    assert snapshot(a, ta) == snapshot(b_model, tb)


def test_load_state_dict_names_what_is_wrong_with_a_state_that_is_not_one():
    """A str or None was "not a trainer state: missing string indices must be integers", and
    a moment torch holds in bfloat16 was NumPy's "Got unsupported ScalarType BFloat16"."""
    cfg = cases.config()
    trainer = mk.Trainer(mk.Model(cfg, seed=0))
    before = snapshot(trainer.model, trainer)
    for bad in ("run.ckpt", None, [("step_count", 0)]):
        with pytest.raises(TypeError, match="Trainer.load_state_dict: state must be a mapping"):
            trainer.load_state_dict(bad)
    good = trainer.state_dict()
    with pytest.raises(ValueError, match=r"not a trainer state: missing \['exp_avg_sq'\]"):
        trainer.load_state_dict({k: v for k, v in good.items() if k != "exp_avg_sq"})
    with pytest.raises(ValueError, match="hyperparameters must be a dict, got NoneType"):
        trainer.load_state_dict({**good, "hyperparameters": None})

    class NoNumpy:  # what np.asarray cannot read: a bfloat16 torch tensor, say
        def __array__(self, *args, **kwargs):
            raise TypeError("Got unsupported ScalarType BFloat16")

    moments = {**good["exp_avg"], "embedding": NoNumpy()}
    with pytest.raises(TypeError, match="Trainer.load_state_dict: embedding cannot be read as a NumPy array"):
        trainer.load_state_dict({**good, "exp_avg": moments})
    assert snapshot(trainer.model, trainer) == before


def test_lr_at_names_a_step_that_is_not_an_int_of_int64():
    trainer = mk.Trainer(mk.Model(cases.config(), seed=0), schedule="cosine", total_steps=10)
    assert trainer.lr_at(np.int64(10)) == trainer.lr_at(10) == 0.0
    for bad, error in ((1.5, TypeError), (True, TypeError), (2**70, ValueError), (-1, ValueError)):
        with pytest.raises(error, match="Trainer.lr_at: step must be"):  # 1.5 and 2**70 named nothing
            trainer.lr_at(bad)


def test_stats_are_lazy_floats():
    cfg = cases.config()
    trainer = mk.Trainer(mk.Model(cfg, seed=0), lr=1e-3)
    stats = trainer.step(cases.batch(cfg))
    d = stats.as_dict()
    assert set(d) == {"loss", "policy_loss", "value_loss", "accuracy", "lr"}
    assert all(isinstance(x, float) for x in d.values())
    assert stats.loss == pytest.approx(stats.policy_loss + stats.value_loss, rel=1e-6)
    assert "loss=" in repr(stats) and "step_count=1" in repr(trainer)


def test_profile_counts_phases():
    cfg = cases.config()
    trainer = mk.Trainer(mk.Model(cfg, seed=0))
    trainer.profile(True)
    for s in range(2):
        trainer.step(cases.batch(cfg, seed=s))
    t = trainer.phase_times()
    assert t["steps"] == 2 and min(t["forward"], t["backward"], t["optimizer"]) > 0
    assert t["optimizer_pair_table"] <= t["optimizer"]


def _teacher_batch(teacher, cfg, rng, B, L=12):
    tokens = rng.integers(0, cfg.num_tokens, (B, 2, cfg.tokens_per_side))
    tokens[rng.random(tokens.shape) < 0.2] = -1
    counts = rng.integers(2, L + 1, B)
    legal = np.zeros((B, L), np.int64)
    for b in range(B):
        legal[b, :counts[b]] = rng.choice(cfg.num_moves, counts[b], replace=False)
    dummy = mk.Batch(tokens, legal, counts, np.zeros(B, np.int64), np.zeros(B, np.float32))
    logits, value = teacher.forward(dummy)
    logits[np.arange(L)[None, :] >= counts[:, None]] = -np.inf
    return mk.Batch(tokens, legal, counts, logits.argmax(axis=1), value), 1.0 / counts


@pytest.fixture
def one_thread():
    """Small models run faster on one thread, and are then immune to a busy machine."""
    mk.set_num_threads(1)
    yield
    mk.set_num_threads(0)


def test_student_learns_a_random_teacher(one_thread):
    """Labels from a fixed random network of the same family: the student must beat chance
    by a wide margin on held-out positions within a few hundred small steps."""
    cfg = mk.ModelConfig(num_tokens=24, num_moves=40, tokens_per_side=8, embed_dim=16, orders=2,
                         pair_dim=4, hidden=(32,), head_width=16)
    teacher, student = mk.Model(cfg, seed=1), mk.Model(cfg, seed=2)
    rng = np.random.default_rng(0)
    held_out, chance = _teacher_batch(teacher, cfg, rng, 512)
    trainer = mk.Trainer(student, lr=1e-2, weight_decay=0.0, warmup_steps=20, schedule="cosine",
                         total_steps=400)
    for _ in range(400):
        trainer.step(_teacher_batch(teacher, cfg, rng, 128)[0])
    stats, _ = student.loss_and_grad(held_out)
    assert stats["accuracy"] > 3 * chance.mean(), (stats, chance.mean())  # chance ~0.18
    assert stats["accuracy"] > 0.6


def test_step_releases_the_gil_and_guards_the_model():
    """While a step runs in C, another thread runs Python and is told the model is busy."""
    import threading

    cfg = cases.config(num_tokens=64, num_moves=300, T=16, D=32, hidden=(256, 256), W=64)
    model = mk.Model(cfg, seed=0)
    trainer = mk.Trainer(model)
    b = cases.batch(cfg, B=256, L=64)
    done, errors = threading.Event(), []

    def work():
        try:
            steps = 0
            while steps < 4:
                try:
                    trainer.step(b)
                    steps += 1
                except RuntimeError as e:  # the main thread held the model for a moment
                    assert "in use" in str(e)
        except Exception as e:  # surfaced below
            errors.append(e)
        finally:
            done.set()

    worker = threading.Thread(target=work)
    worker.start()
    busy = 0
    while not done.is_set():
        try:
            model._core.read("value.bias")
        except RuntimeError as e:
            assert "in use by another thread" in str(e)
            busy += 1
    worker.join()
    assert not errors and trainer.step_count == 4
    assert busy > 0  # this thread ran during a step: the GIL was released


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_fused_pair_table_update_equals_unfused(threads):
    """The trainer's fused pair-table gradient + AdamW gives the same bits as
    pair_sums_backward followed by adamw (repeated tokens and empty slots included)."""
    cfg = cases.config(hidden=(8,), num_tokens=13, T=9)
    batches = [cases.batch(cfg, B=7, seed=s, empty_fraction=0.3) for s in range(3)]
    batches[0].tokens[0, 0, :] = 5  # a row of one repeated token
    batches[1].tokens[1, 1, :] = -1  # an empty side
    mk.set_num_threads(threads)
    try:
        runs = []
        for fused in (True, False):
            model = mk.Model(cfg, seed=4)
            trainer = mk.Trainer(model, lr=1e-2, warmup_steps=1)
            trainer._core.fused = fused
            for b in batches:
                trainer.step(b)
            runs.append(snapshot(model, trainer))
        assert runs[0] == runs[1]
    finally:
        mk.set_num_threads(0)


def test_fused_pair_update_takes_the_backend_scratch_and_refuses_less():
    """The CPU's scratch_bytes holds the fused pair-table update's bucket space (sorted tokens
    [rows, T], counts [rows], starts [V + 1], slots [rows, T] int32). Given exactly that, the
    update runs; given one byte less, or none, it raises naming the scratch and changes
    nothing (the probe returns fresh arrays only on success)."""
    rng = np.random.default_rng(5)
    V, P, rows, T = 9, 3, 10, 6
    assert _testing.backend_scratch_bytes("cpu", rows=rows, T=T, V=V) == 4 * (2 * rows * T + rows + V + 1)
    # GatherDot's grad_table shares the scratch: its radix sort by row, a histogram of
    # 2^digit int64 counts and one (row, position, gradient) entry of 12 bytes per legal slot,
    # twice when it takes more than one pass of at most 12 bits
    assert _testing.backend_scratch_bytes("cpu", B=50, L=70, M=300, rows=rows, T=T, V=V) == 12 * 50 * 70 + 8 * 2**9
    assert _testing.backend_scratch_bytes("cpu", B=50, L=70, M=262440) == 2 * 12 * 50 * 70 + 8 * 2**10  # 19 bits: 2 passes of 10
    assert _testing.backend_scratch_bytes("cpu", B=1, L=1, M=1, rows=rows, T=T, V=V) == \
        _testing.backend_scratch_bytes("cpu", rows=rows, T=T, V=V)  # the larger of the two
    need = _testing.backend_scratch_bytes("cpu", rows=rows, T=T, V=V)
    tokens = rng.integers(-1, V, (rows, T)).astype(np.int32)
    grad = rng.standard_normal((rows, P)).astype(np.float32)
    p = rng.standard_normal((V * (V + 1) // 2, P)).astype(np.float32)
    m, v = np.zeros_like(p), np.zeros_like(p)
    hyper = (1e-2, 0.9, 0.99, 1e-8, 0.1, 0.1, 0.01)
    want = _testing.backend_pair_adamw("cpu", grad, tokens, p, m, v, hyper)
    got = _testing.backend_pair_adamw("cpu", grad, tokens, p, m, v, hyper, work_bytes=need)
    for name, a, b in zip("pmv", got, want):
        np.testing.assert_array_equal(a, b, err_msg=name)
    assert not np.array_equal(got[0], p)
    for short in (need - 1, 0):
        with pytest.raises(ValueError, match=f"pair_sums_backward_adamw: the scratch given holds {short} bytes; {need}"):
            _testing.backend_pair_adamw("cpu", grad, tokens, p, m, v, hyper, work_bytes=short)
    with pytest.raises(ValueError, match="work_bytes must be >= 0"):
        _testing.backend_pair_adamw("cpu", grad, tokens, p, m, v, hyper, work_bytes=-2)
    with pytest.raises(ValueError, match="rows must be >= 0"):
        _testing.backend_scratch_bytes("cpu", rows=-1)


@pytest.mark.parametrize("move_pairs, board, move_hidden, shared", [(0, (0, 0, 0), 0, 0), (5, (0, 0, 0), 0, 0),
                                                                  (8, (2, 2, 2), 0, 0), (8, (2, 2, 2), 4, 0),
                                                                  (8, (2, 2, 2), 4, 1)])
def test_device_memory_path_matches_host_path(move_pairs, board, move_hidden, shared):
    cfg = cases.config(hidden=(8,), move_pairs=move_pairs, board=board, move_hidden=move_hidden,
                       num_moves=24 if shared else 17, move_shared=shared)
    host = cases.model(cfg, seed=6)
    staged = staged_twin(host)
    assert staged._core.backend == "cpu_staged"
    with pytest.raises(RuntimeError, match="not in host memory"):
        staged.parameters()
    b = cases.batch(cfg, seed=1, soft=True)
    for x, y in zip(host.forward(b), staged.forward(b)):
        np.testing.assert_array_equal(x, y)
    (s1, g1), (s2, g2) = host.loss_and_grad(b, 0.5), staged.loss_and_grad(b, 0.5)
    assert s1 == s2
    for name in g1:
        np.testing.assert_array_equal(g1[name], g2[name])
    t1, t2 = mk.Trainer(host, lr=1e-2), mk.Trainer(staged, lr=1e-2)
    for s in range(3):
        bs = cases.batch(cfg, seed=10 + s)
        assert t1.step(bs).as_dict() == t2.step(bs).as_dict()
    assert snapshot(host, t1) == snapshot(staged, t2)


def test_device_memory_path_skips_non_finite_updates_on_the_device_flag():
    cfg = cases.config()
    staged = staged_twin(mk.Model(cfg, seed=1))
    trainer = mk.Trainer(staged, lr=1e-2)
    b = cases.batch(cfg)
    trainer.step(b)
    staged._core.write("value.bias", np.array([np.inf], np.float32))  # no host check on this path
    weight = staged.state_dict()["value.weight"]
    weight[0, 0] = -np.inf
    staged._core.write("value.weight", weight)
    before = snapshot(staged, trainer)
    stats = trainer.step(b)  # no host synchronisation: nothing is known yet
    assert trainer.step_count == 2
    with pytest.raises(FloatingPointError, match="at step 1; its update was skipped on the device"):
        stats.loss  # the step's stats are read: the failure is reported now
    after = snapshot(staged, trainer)
    assert after.pop("step_count") == 2 and before.pop("step_count") == 1
    assert after == before  # parameters and moments untouched by the skipped update


def test_device_path_keeps_the_stats_of_recent_steps_on_the_device():
    cfg = cases.config()
    host, staged = mk.Model(cfg, seed=4), staged_twin(mk.Model(cfg, seed=4))
    t1, t2 = mk.Trainer(host, lr=1e-2), mk.Trainer(staged, lr=1e-2)
    kept = []
    for s in range(300):
        b = cases.batch(cfg, seed=s)
        want = t1.step(b).as_dict()
        got = t2.step(b)
        assert "on the device" in repr(got)
        kept.append((want, got))
    for want, got in kept[-256:]:  # read late, in any order: the same numbers as the host path
        assert got.as_dict() == want
    with pytest.raises(ValueError, match="the stats of step 44 are not kept"):
        kept[43][1].loss


@pytest.mark.parametrize("move_pairs, board, move_hidden, shared", [(0, (0, 0, 0), 0, 0), (30, (0, 0, 0), 0, 0),
                                                                  (36, (3, 3, 4), 0, 0), (36, (3, 3, 4), 16, 0),
                                                                  (30, (0, 0, 0), 0, 1)])
def test_training_is_bitwise_identical_for_any_thread_count(move_pairs, board, move_hidden, shared):
    """Every CPU primitive splits work so that results do not depend on the team size
    (GEMMs into tiles fixed by the shape, one OpenBLAS call per tile; reductions by owned
    columns or owned table rows; AdamW elementwise): 1 to 5 threads and one more than the
    cores."""
    cfg = cases.config(hidden=(300, 200), num_tokens=40, num_moves=120, T=12, D=64, W=96,
                       orders=3, pair_dim=8, move_pairs=move_pairs, board=board, move_hidden=move_hidden,
                       move_shared=shared)
    results = []
    try:
        for threads in (1, 2, 3, 4, 5, (os.cpu_count() or 1) + 1):
            mk.set_num_threads(threads)
            model = mk.Model(cfg, seed=0)
            trainer = mk.Trainer(model)
            for s in range(2):
                trainer.step(cases.batch(cfg, B=300, L=40, seed=s))
            results.append(snapshot(model, trainer))
    finally:
        mk.set_num_threads(0)
    for r in results[1:]:
        assert r == results[0]
