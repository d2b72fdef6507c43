"""Trainer(pair_update="sparse" | "lazy"): against the float64 reference of the documented
semantics (reference_model.SparseAdamW), near the dense update within the documented bound,
bitwise deterministic for any thread count, exact resume, bf16 moments, bad arguments; and
moments below FLT_MIN stored as 0 (every update)."""
import math

import numpy as np
import pytest

import manaka as mk
import model_cases as cases
import reference_model as refm
from sparse_cases import (HYPER, SCHEDULE, batches, check_against_reference, check_device_path,
                          check_resume_is_bitwise, lr_of, sparse_config, train_bits)


def train(mode, steps=12, seed=5, threads=None, **extra):
    cfg = sparse_config()
    model = mk.Model(cfg, seed=seed)
    trainer = mk.Trainer(model, pair_update=mode, **HYPER, **SCHEDULE, **extra)
    losses = [trainer.step(b).loss for b in batches(cfg, steps)]
    return model, trainer, losses


# ------------------------------------------------------------------ against the reference

@pytest.mark.parametrize("mode", ["sparse", "lazy"])
def test_matches_the_reference_of_the_documented_semantics(mode):
    check_against_reference(sparse_config(), "pair_table", 0.1, pair=mode)


def test_the_reference_pair_update_is_not_the_dense_one():
    """The reference itself: "sparse" and "lazy" differ in the drift, and a row caught up by
    "sparse" lands where the dense update's zero-gradient steps put it."""
    rng = np.random.default_rng(0)
    p, m, v = rng.standard_normal(8), rng.standard_normal(8) * 1e-2, rng.random(8) * 1e-4
    terms = refm.gap_terms(4, 11, lr_of, HYPER["betas"], HYPER["weight_decay"])
    sparse = refm.catch_up_row(p, m, v, terms, "sparse", HYPER["eps"])[0]
    lazy = refm.catch_up_row(p, m, v, terms, "lazy", HYPER["eps"])[0]
    dense = refm.dense_gap(p, m, v, 4, 11, lr_of, HYPER["betas"], HYPER["eps"], HYPER["weight_decay"])[0]
    assert np.abs(sparse - dense).max() < 1e-3 * np.abs(lazy - dense).max()


def kappa(s, u, betas):
    """max c'_w / min c'_w over the gap's steps, c'_w = b2^((w - s) / 2) / sqrt(1 - b2^w)."""
    b2 = betas[1]
    c = [b2 ** ((w - s) / 2) / math.sqrt(1 - b2 ** w) for w in range(s + 1, u + 1)]
    return max(c) / min(c)


@pytest.mark.parametrize("s,u", [(0, 3), (0, 12), (2, 9), (7, 40), (30, 200)])
def test_sparse_drift_within_the_documented_bound(s, u):
    """The closed-form drift of a gap against the dense update's zero-gradient steps, for
    sqrt(v) from far below eps to far above it: relative error <= (kappa - 1)^2 / (4 kappa)
    (csrc/core/pair_gap.h), and exact at both ends."""
    betas, eps, wd = (0.9, 0.999), 1e-8, 0.1
    lr = lambda step: refm.lr_at(step, 1e-2, 5, "cosine", 300, 1e-4)
    sqrt_v = np.logspace(-20, 0, 81)
    m, v, p = np.full_like(sqrt_v, 1e-3), sqrt_v ** 2, np.zeros_like(sqrt_v)
    terms = refm.gap_terms(s, u, lr, betas, wd)
    got = refm.catch_up_row(p, m, v, terms, "sparse", eps)[0]
    exact = refm.dense_gap(p, m, v, s, u, lr, betas, eps, wd)[0]
    k = kappa(s, u, betas)
    err = np.abs(got - exact) / np.abs(exact)
    assert err.max() <= (k - 1) ** 2 / (4 * k) + 1e-12, (err.max(), k)
    assert err[0] < 1e-9 and err[-1] < 1e-6  # sqrt(v) << eps, and >> eps


def test_sparse_stays_near_dense_and_lazy_does_not():
    """The C trainers on the same batches: "sparse" differs from "dense" by its eps
    approximation and rounding only; "lazy" leaves the drift out, a visible change."""
    dense, _, dl = train("dense")
    sparse, _, sl = train("sparse")
    lazy, _, ll = train("lazy")
    d, s, z = (m.state_dict()["pair_table"] for m in (dense, sparse, lazy))
    assert cases.rel_err(s, d) < 1e-5
    assert cases.rel_err(z, d) > 100 * cases.rel_err(s, d)
    np.testing.assert_allclose(sl, dl, rtol=1e-5)
    for n, a in dense.state_dict().items():  # every other tensor: the same update
        assert cases.rel_err(sparse.state_dict()[n], a) < 1e-4, n


# ------------------------------------------------------------------ determinism and state

@pytest.mark.parametrize("mode", ["sparse", "lazy"])
@pytest.mark.parametrize("dtype", ["float32", "bf16"])
def test_bitwise_the_same_for_1_2_3_threads(mode, dtype):
    runs = [train_bits(sparse_config(), 8, n, pair_update=mode, pair_state_dtype=dtype) for n in (1, 2, 3)]
    assert runs[0] == runs[1] == runs[2]


@pytest.mark.parametrize("mode", ["sparse", "lazy"])
@pytest.mark.parametrize("dtype", ["float32", "bf16"])
def test_resume_mid_run_is_bitwise_the_uninterrupted_run(mode, dtype, tmp_path):
    check_resume_is_bitwise(sparse_config(), tmp_path, pair_update=mode, pair_state_dtype=dtype)


def test_state_dict_round_trip_and_reads_are_caught_up():
    """state_dict holds the caught-up moments: loading it into a fresh trainer and reading
    it back gives the same arrays; a row read after a gap shows its decay already."""
    model, trainer, _ = train("sparse", steps=7)
    state = trainer.state_dict()
    other = mk.Trainer(model, pair_update="sparse", **HYPER, **SCHEDULE)
    other.load_state_dict(state)
    back = other.state_dict()
    for kind in ("exp_avg", "exp_avg_sq"):
        for n in state[kind]:
            np.testing.assert_array_equal(back[kind][n], state[kind][n])
    # the model's own reads flush: two reads in a row are identical, and parameters() views agree
    a = model.state_dict()["pair_table"]
    np.testing.assert_array_equal(model.parameters()["pair_table"], a)


def test_bf16_moments_follow_the_reference_to_their_rounding():
    cfg = sparse_config()
    model = mk.Model(cfg, seed=5)
    ref = refm.SparseAdamW(model.state_dict(), "sparse", lr_of, HYPER["betas"], HYPER["eps"],
                           HYPER["weight_decay"])
    trainer = mk.Trainer(model, pair_update="sparse", pair_state_dtype="bf16", **HYPER, **SCHEDULE)
    for b in batches(cfg, 10):
        ref.step(cfg, b)
        trainer.step(b)
    ref.flush()
    assert cases.rel_err(model.state_dict()["pair_table"], ref.params["pair_table"]) < 1e-3
    assert cases.rel_err(trainer.state_dict()["exp_avg"]["pair_table"], ref.m["pair_table"]) < 3e-2


def test_two_sparse_trainers_on_one_model_flush_each_other():
    """A second sparse trainer stepping the model first catches the first one's rows up, so
    neither applies a gap of the other's steps."""
    cfg = sparse_config()
    bs = batches(cfg, 6)
    model = mk.Model(cfg, seed=5)
    a = mk.Trainer(model, pair_update="sparse", **HYPER)
    b = mk.Trainer(model, pair_update="sparse", **HYPER)
    for x in bs[:3]:
        a.step(x)
    for x in bs[3:]:
        b.step(x)
    ref = refm.SparseAdamW(mk.Model(cfg, seed=5).state_dict(), "sparse", lambda s: HYPER["lr"],
                           HYPER["betas"], HYPER["eps"], HYPER["weight_decay"])
    for x in bs[:3]:
        ref.step(cfg, x)
    ref.flush()
    ref2 = refm.SparseAdamW(ref.params, "sparse", lambda s: HYPER["lr"], HYPER["betas"], HYPER["eps"],
                            HYPER["weight_decay"])
    for x in bs[3:]:
        ref2.step(cfg, x)
    ref2.flush()
    assert cases.rel_err(model.state_dict()["pair_table"], ref2.params["pair_table"]) < 2e-5


# ------------------------------------------------------------------ arguments

@pytest.mark.parametrize("option", ["pair_update", "move_update"])
@pytest.mark.parametrize("bad", ["Sparse", "", "dense ", None, 1])
def test_a_bad_update_mode_raises_naming_it(option, bad):
    model = mk.Model(cases.config(), seed=0)
    with pytest.raises(ValueError, match=f"{option} must be 'dense', 'sparse' or 'lazy'"):
        mk.Trainer(model, **{option: bad})


@pytest.mark.parametrize("option", ["pair_update", "move_update"])
def test_the_update_mode_is_reported_and_needs_a_decay_below_one(option):
    model = mk.Model(cases.config(), seed=0)
    for mode in ("dense", "sparse", "lazy"):
        t = mk.Trainer(model, **{option: mode})
        assert getattr(t, option) == mode and f"{option}='{mode}'" in repr(t)
    mk.Trainer(model, lr=2.0, weight_decay=0.5, **{option: "dense"})  # allowed where it means something
    for mode in ("sparse", "lazy"):
        with pytest.raises(ValueError, match=f"{option}='{mode}' needs lr \\* weight_decay < 1"):
            mk.Trainer(model, lr=2.0, weight_decay=0.5, **{option: mode})


# ------------------------------------------------------------------ denormal moments

def float32_decay_without_flush(x, factor, steps):
    x = np.float32(x)
    for _ in range(steps):
        x = np.float32(x * np.float32(factor))
    return x


@pytest.mark.parametrize("mode", ["dense", "sparse", "lazy"])
def test_moments_of_a_row_without_gradient_end_as_exact_zeros(mode):
    """A row named once, then never again for 350 steps: its moments pass below FLT_MIN and
    are stored as 0. Without the flush, float32 would stall a few ulps above 0 (x * 0.75
    rounds back to x there: checked below), a denormal forever."""
    cfg = sparse_config()
    model = mk.Model(cfg, seed=1)
    trainer = mk.Trainer(model, lr=1e-2, betas=(0.75, 0.75), pair_update=mode)
    first = cases.batch(cfg, B=1, seed=3, empty_fraction=0.0)
    rows = refm.named_pair_rows(first.tokens)
    trainer.step(first)
    m0 = trainer.state_dict()["exp_avg"]["pair_table"][rows]
    assert (m0 != 0).all()
    tokens = np.full_like(first.tokens, -1)
    tokens[..., :2] = [0, 1]  # every later step names row 1 only
    later = mk.Batch(tokens, first.legal, first.counts, first.target, first.value)
    assert 1 not in rows
    for _ in range(350):
        trainer.step(later)
    state = trainer.state_dict()
    for kind in ("exp_avg", "exp_avg_sq"):
        np.testing.assert_array_equal(state[kind]["pair_table"][rows], 0.0)
    # the test can fail: a float32 moment decaying by 0.75 without the flush stalls
    assert float32_decay_without_flush(1e-30, 0.75, 350) != 0


# ------------------------------------------------------------------ mk.fit and the CLI

def fit_run(ds, steps, path, stop=None, resume=False):
    model = mk.Model(cases.SMALL_MODEL, seed=0)
    trainer = mk.Trainer(model, lr=1e-2, warmup_steps=3, schedule="cosine", total_steps=steps,
                         pair_update="sparse")
    loader = mk.Loader(ds, batch_size=48, producers=3, seed=7)
    mk.fit(model, loader, steps=stop or steps, trainer=trainer, log_every=4, checkpoint=path,
           checkpoint_every=11, resume=resume, progress=False, log=lambda s: None)
    return model


def test_fit_checkpoint_resume_is_bitwise_the_run_that_saved_it(tmp_path):
    """A checkpoint flushes the sparse trainer (its rows and moments are saved caught up): the
    run resumed from step 11 matches, bit for bit, the run that wrote that checkpoint and
    went on (both flush at the same steps: every checkpoint)."""
    ds = mk.Dataset.synthetic(400, cases.SMALL, seed=0)
    full = fit_run(ds, 25, str(tmp_path / "full.ckpt"))
    path = str(tmp_path / "run.ckpt")
    fit_run(ds, 25, path, stop=11)
    resumed = fit_run(ds, 25, path, resume=True)
    a, b = full.state_dict(), resumed.state_dict()
    for name in a:
        assert np.array_equal(a[name], b[name]), name


@pytest.mark.parametrize("option, mode", [("pair-update", "lazy"), ("move-update", "sparse")])
def test_cli_takes_the_update_modes(option, mode, capsys):
    from manaka import train

    args = ["--steps", "3", "--synthetic", "600", "--eval-positions", "100", "--log-every", "3",
            "--no-progress", "--no-save", "--batch-size", "32", "--device", "cpu", f"--{option}", mode,
            "--embed-dim", "8", "--pair-dim", "2", "--hidden", "16", "--head-width", "16"]
    assert train.main(args) == 0
    out = capsys.readouterr().out
    assert f"{option.replace('-', '_')}='{mode}'" in out and "done: step 3" in out
    with pytest.raises(SystemExit):
        train.main(args[:-8] + [f"--{option}", "sprase"])


def test_the_gap_window_restarts_after_8191_steps():
    """Stamps are relative to a window of 8,192 steps (csrc/core/pair_gap.h): the trainer
    catches every row up and restarts it when full. 8,300 steps of a tiny model, rows named
    irregularly (some once in thousands of steps): "sparse" stays with "dense"."""
    cfg = mk.ModelConfig(num_tokens=40, num_moves=5, tokens_per_side=3, embed_dim=2, orders=1,
                         pair_dim=2, hidden=(), head_width=2)
    rng = np.random.default_rng(0)
    pool = []
    for k in range(64):
        tokens = np.full((1, 2, 3), -1, np.int32)
        tokens[0, :, :2] = [0, 1] if k else rng.integers(0, 40, (2, 2))  # batch 0's rows come back rarely
        tokens[0, 0, 2] = rng.integers(2, 40) if k % 7 == 0 else -1
        pool.append(mk.Batch(tokens, np.array([[0, 1]]), np.array([2]), np.array([k % 2]), np.array([0.5], np.float32)))
    models = {m: mk.Model(cfg, seed=0) for m in ("dense", "sparse")}
    trainers = {m: mk.Trainer(models[m], lr=1e-3, weight_decay=0.01, pair_update=m) for m in models}
    before = mk.get_num_threads()
    mk.set_num_threads(1)  # tiny steps: waking a team would cost more than the step
    try:
        for step in range(8300):
            b = pool[0] if step % 3001 == 5 else pool[1 + step % 63]
            for t in trainers.values():
                t.step(b)
    finally:
        mk.set_num_threads(before)
    d, s = (models[m].state_dict()["pair_table"] for m in ("dense", "sparse"))
    assert cases.rel_err(s, d) < 1e-4


def test_device_memory_path_matches_and_skips_non_finite_steps_on_the_device():
    check_device_path(sparse_config(), pair_update="sparse")
