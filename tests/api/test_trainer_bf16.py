"""Trainer(pair_state_dtype="bf16"): the pair table's AdamW moments in bf16.

The CPU entries (adamw_bf16, pair_sums_backward_adamw_bf16) against the NumPy twin in
reference_bf16.py bit for bit (hash, stochastic rounding, update order); the trainer's
wiring (step seed, moment layout, fused == unfused, host == staged device path, the
non-finite guard); bf16 training staying close to float32 over 200 steps; state_dict in
float32 either way, exact resume, and loading across the two dtypes."""
import numpy as np
import pytest

import manaka as mk
from manaka import _testing  # the test hooks (csrc/python/testing/)
import model_cases as cases
import reference_bf16 as rb
from model_cases import staged_twin, state_bytes as snapshot

HYPER = dict(lr=2e-2, betas=(0.9, 0.99), eps=1e-7, weight_decay=0.05)


def _random_moments(rng, shape):
    m = rb.nearest((rng.standard_normal(shape) * 1e-3).astype(np.float32))
    v = rb.nearest((rng.random(shape) * 1e-5).astype(np.float32))
    return m, v


def test_hash_is_shared_with_parameter_initialisation():
    """mk_uniform01 (init) and mk_rounding_noise are one hash: the embedding's initial
    values are bound * (2 u - 1) with u from the NumPy twin of that hash."""
    cfg = cases.config()
    model = mk.Model(cfg, seed=5)
    seed = 5 ^ 0xD1B54A32D192ED03  # model.c's seed of tensor 0
    bound = np.float32(np.sqrt(np.float32(3.0))) * np.float32(1.0 / np.sqrt(cfg.tokens_per_side))
    u = rb.uniform01(seed, np.arange(cfg.num_tokens * cfg.embed_dim, dtype=np.uint64))
    want = bound * (np.float32(2.0) * u - np.float32(1.0))
    np.testing.assert_array_equal(model.state_dict()["embedding"].ravel(), want)


def test_rounding_helpers_against_known_values():
    one_plus = np.float32(1.0 + 2.0 ** -8)  # halfway between bf16 1.0 and 1.0078125
    assert rb.nearest(one_plus) == 0x3F80  # tie to even
    assert rb.stochastic(one_plus, 0x7FFF) == 0x3F80 and rb.stochastic(one_plus, 0x8000) == 0x3F81
    assert rb.nearest(np.float32(np.nan)) & 0x7FC0 == 0x7FC0
    assert rb.nearest(np.float32(np.inf)) == 0x7F80


@pytest.mark.parametrize("finite", [True, False])
def test_cpu_adamw_bf16_matches_numpy_bitwise(finite):
    rng = np.random.default_rng(0)
    n = 70_000  # more than one of adamw.c's chunks
    p = rng.standard_normal(n).astype(np.float32)
    g = (rng.standard_normal(n) * 1e-2).astype(np.float32)
    g[:5] = 0.0
    m, v = _random_moments(rng, n)
    args = rb.adamw_args(HYPER["lr"], HYPER["betas"], HYPER["eps"], HYPER["weight_decay"], 7)
    seed = rb.step_seed(7)
    got = _testing.backend_adamw("cpu", p, g, m, v, tuple(map(float, args)), seed, finite)
    want = rb.adamw_bf16(p, g, m, v, args, seed) if finite else (p, m, v)
    for name, a, b in zip("pmv", got, want):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b, err_msg=name)
    if finite:  # the rounding really is stochastic: some moments rounded up, some down
        exact_m = rb.adamw_f32(p, g, rb.to_float(m), rb.to_float(v), args)[1]
        up = rb.to_float(got[1]) > exact_m
        assert 0.3 < up[exact_m != rb.to_float(got[1])].mean() < 0.7


def test_cpu_fused_pair_update_bf16_matches_unfused_and_numpy():
    """pair_sums_backward_adamw_bf16 == pair_sums_backward, then adamw_bf16 (NumPy)."""
    rng = np.random.default_rng(1)
    V, P, B, T = 13, 4, 7, 9
    tokens = rng.integers(-1, V, (B, 2, T)).astype(np.int32)
    tokens[0, 0, :] = 5  # one repeated token
    grad = rng.standard_normal((B, 2, P)).astype(np.float32)
    num_pairs = V * (V + 1) // 2
    p = rng.standard_normal((num_pairs, P)).astype(np.float32)
    m, v = _random_moments(rng, (num_pairs, P))
    args = rb.adamw_args(HYPER["lr"], HYPER["betas"], HYPER["eps"], HYPER["weight_decay"], 2)
    seed = rb.step_seed(2)
    fused = _testing.backend_pair_adamw("cpu", grad.reshape(B * 2, P), tokens.reshape(B * 2, T), p, m, v,
                                        tuple(map(float, args)), seed)
    g = mk.ops.pair_sums_backward(grad, tokens, num_pairs)
    want = rb.adamw_bf16(p, g, m, v, args, seed)
    for name, a, b in zip("pmv", fused, want):
        np.testing.assert_array_equal(a, b, err_msg=name)


def test_trainer_step_applies_the_bf16_update_bitwise():
    """Step t of the trainer: the pair table moves by the NumPy bf16 update of its own
    gradient with seed step_seed(t); every other tensor exactly as with float32 moments."""
    cfg = cases.config(hidden=(8,))
    models = {d: mk.Model(cfg, seed=4) for d in ("float32", "bf16")}
    trainers = {d: mk.Trainer(models[d], **HYPER, pair_state_dtype=d) for d in models}
    m16 = v16 = np.zeros((cfg.num_tokens * (cfg.num_tokens + 1) // 2, cfg.pair_dim), np.uint16)
    for t in (1, 2, 3):
        b = cases.batch(cfg, seed=30 + t)
        before = models["bf16"].state_dict()
        _, grads = models["bf16"].loss_and_grad(b)
        args = rb.adamw_args(HYPER["lr"], HYPER["betas"], HYPER["eps"], HYPER["weight_decay"], t)
        want_p, m16, v16 = rb.adamw_bf16(before["pair_table"], grads["pair_table"], m16, v16, args,
                                         rb.step_seed(t))
        for d in trainers:
            trainers[d].step(b)
        state = trainers["bf16"].state_dict()
        np.testing.assert_array_equal(models["bf16"].state_dict()["pair_table"], want_p)
        np.testing.assert_array_equal(state["exp_avg"]["pair_table"], rb.to_float(m16))
        np.testing.assert_array_equal(state["exp_avg_sq"]["pair_table"], rb.to_float(v16))
        if t == 1:  # same start, so every parameter and every fp32 moment agrees exactly
            other = trainers["float32"].state_dict()
            for name, a in models["float32"].state_dict().items():
                np.testing.assert_array_equal(models["bf16"].state_dict()[name], a, err_msg=name)
                if name != "pair_table":
                    for kind in ("exp_avg", "exp_avg_sq"):
                        np.testing.assert_array_equal(state[kind][name], other[kind][name])


def test_fused_equals_unfused_and_host_equals_device_path():
    cfg = cases.config(hidden=(8,), num_tokens=13, T=9)
    batches = [cases.batch(cfg, B=7, seed=s, empty_fraction=0.3) for s in range(3)]
    runs = []
    for fused, staged in ((True, False), (False, False), (True, True)):
        model = mk.Model(cfg, seed=4)
        model = staged_twin(model) if staged else model
        trainer = mk.Trainer(model, lr=1e-2, warmup_steps=1, pair_state_dtype="bf16")
        trainer._core.fused = fused
        for b in batches:
            trainer.step(b)
        runs.append(snapshot(model, trainer))
    assert runs[0] == runs[1] == runs[2]


def test_non_finite_loss_changes_nothing():
    cfg = cases.config()
    for model in (mk.Model(cfg, seed=1), staged_twin(mk.Model(cfg, seed=1))):
        trainer = mk.Trainer(model, lr=1e-2, pair_state_dtype="bf16")
        b = cases.batch(cfg)
        trainer.step(b)
        model._core.write("value.bias", np.array([np.inf], np.float32))
        weight = model.state_dict()["value.weight"]
        weight[0, 0] = -np.inf
        model._core.write("value.weight", weight)
        before = snapshot(model, trainer)
        with pytest.raises(FloatingPointError, match="step 1"):
            trainer.step(b).loss  # a device backend reports it when the stats are read
        after = snapshot(model, trainer)
        if model.device == "cpu":  # the host path fails the step itself
            assert after == before
        else:  # the device path skipped the update; only the step count moved on
            assert after.pop("step_count") == 2 and before.pop("step_count") == 1
            assert after == before


def test_bf16_moments_stay_close_to_float32_over_200_steps():
    """Same model, same 200 batches: bf16 moments perturb each pair-table update by a
    fraction of a percent, unbiased, so the runs follow one trajectory. Stated tolerances:
    the losses agree within 2 % at every step and 0.5 % over the last 50; every tensor's
    distance between the runs is under 25 % of the distance it moved from its start
    (measured: at most 14 %, the pair table; small batches of random labels make the
    trajectories drift apart, not the rounding's bias)."""
    cfg = cases.config(hidden=(16,), num_tokens=30, T=8, pair_dim=6)
    batches = [cases.batch(cfg, B=16, L=8, seed=100 + s) for s in range(200)]
    start = mk.Model(cfg, seed=7).state_dict()
    runs, v = {}, {}
    for d in ("float32", "bf16"):
        model = mk.Model(cfg, seed=7)
        trainer = mk.Trainer(model, lr=3e-3, warmup_steps=10, pair_state_dtype=d)
        losses = [trainer.step(b).loss for b in batches]
        runs[d] = (model.state_dict(), np.array(losses))
        v[d] = trainer.state_dict()["exp_avg_sq"]["pair_table"]
    (p32, l32), (p16, l16) = runs["float32"], runs["bf16"]
    # The rounding is unbiased: the pair table's exp_avg_sq matches float32's on average
    # (measured: +0.1 % mean, 2 % median deviation; truncating instead gives -37 %).
    nz = v["float32"] > 0
    dev = (v["bf16"][nz] - v["float32"][nz]) / v["float32"][nz]
    assert abs(dev.mean()) < 0.02 and np.median(np.abs(dev)) < 0.05, (dev.mean(), np.median(np.abs(dev)))
    assert np.abs(l16 - l32).max() < 0.02 * np.abs(l32).max(), np.abs(l16 - l32).max()
    assert abs(l16[-50:].mean() - l32[-50:].mean()) < 0.005 * l32[-50:].mean()
    for name, a in p32.items():
        moved = np.linalg.norm(a - start[name])
        assert np.linalg.norm(p16[name] - a) < 0.25 * moved, name
    # and it did train, and bf16 did change something
    assert l32[-20:].mean() < 0.95 * l32[:20].mean()
    assert not np.array_equal(p16["pair_table"], p32["pair_table"])


def _trained(cfg, dtype, steps=3, seed=3):
    model = mk.Model(cfg, seed=seed)
    trainer = mk.Trainer(model, lr=2e-2, warmup_steps=2, schedule="cosine", total_steps=8,
                         pair_state_dtype=dtype)
    for s in range(steps):
        trainer.step(cases.batch(cfg, seed=s))
    return model, trainer


def test_state_dict_resumes_exactly_and_crosses_dtypes():
    cfg = cases.config(hidden=(8,))
    later = [cases.batch(cfg, seed=s) for s in range(3, 6)]
    a, ta = _trained(cfg, "bf16")
    saved_model, saved = a.state_dict(), ta.state_dict()
    assert saved["pair_state_dtype"] == "bf16"
    assert all(x.dtype == np.float32 for k in ("exp_avg", "exp_avg_sq") for x in saved[k].values())
    for b in later:
        ta.step(b)
    # exact resume into a fresh bf16 trainer
    b_model = mk.Model(cfg, seed=99)
    b_model.load_state_dict(saved_model)
    tb = mk.Trainer(b_model, lr=1.0, pair_state_dtype="bf16")
    tb.load_state_dict(saved)
    assert tb.step_count == 3 and tb.hyperparameters == ta.hyperparameters
    for b in later:
        tb.step(b)
    assert snapshot(a, ta) == snapshot(b_model, tb)
    # bf16 -> float32: exact
    t32 = mk.Trainer(mk.Model(cfg, seed=3))
    t32.load_state_dict(saved)
    assert t32.pair_state_dtype == "float32"
    got = t32.state_dict()
    for kind in ("exp_avg", "exp_avg_sq"):
        for name, x in saved[kind].items():
            np.testing.assert_array_equal(got[kind][name], x)
    # float32 -> bf16: the pair table's moments rounded to nearest, the rest exact
    _, f32 = _trained(cfg, "float32")
    s32 = f32.state_dict()
    t16 = mk.Trainer(mk.Model(cfg, seed=3), pair_state_dtype="bf16")
    t16.load_state_dict(s32)
    got = t16.state_dict()
    for kind in ("exp_avg", "exp_avg_sq"):
        for name, x in s32[kind].items():
            want = rb.to_float(rb.nearest(x)) if name == "pair_table" else x
            np.testing.assert_array_equal(got[kind][name], want, err_msg=(kind, name))
    assert t16.pair_state_dtype == "bf16"


def test_bad_pair_state_dtype_raises_naming_the_argument():
    model = mk.Model(cases.config(), seed=0)
    for bad in ("float16", "BF16", None, 16, np.float32):
        with pytest.raises(ValueError, match="pair_state_dtype"):
            mk.Trainer(model, pair_state_dtype=bad)
    with pytest.raises(ValueError, match="pair_state_dtype"):
        mk._core.Trainer(model._core, pair_state_dtype="fp8")
    trainer = mk.Trainer(model, pair_state_dtype="bf16")
    assert "pair_state_dtype='bf16'" in repr(trainer)
    assert repr(mk.Trainer(model)).endswith("pair_state_dtype='float32', pair_update='dense', move_update='dense')")
    state = trainer.state_dict()
    state["pair_state_dtype"] = "int8"
    with pytest.raises(ValueError, match="pair_state_dtype"):
        trainer.load_state_dict(state)


def test_bf16_moments_use_half_the_memory():
    """The fp32 moment buffers skip the pair table's span; its bf16 moments take 2 x 2
    bytes per parameter instead of 2 x 4."""
    cfg = cases.config(num_tokens=600, pair_dim=8)
    model = mk.Model(cfg, seed=0)
    numel = cfg.num_tokens * (cfg.num_tokens + 1) // 2 * cfg.pair_dim
    sizes = {}
    for d in ("float32", "bf16"):
        sizes[d] = mk.Trainer(model, pair_state_dtype=d)._core.moment_bytes()
    assert sizes["float32"] >= 2 * 4 * model.num_parameters()
    assert sizes["float32"] - sizes["bf16"] == 2 * (4 - 2) * numel
