"""The sparse table updates' cases (pair_update, move_update), shared by their CPU tests
(against the float64 reference) and their CUDA tests (against the CPU): hyperparameters, a
schedule, a pair table and a move table that small batches name only a few rows of, and
batches whose rows come back after gaps."""
import math

import numpy as np
import pytest

import manaka as mk
import model_cases as cases
import reference_model as refm

HYPER = dict(lr=3e-2, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)
SCHEDULE = dict(warmup_steps=3, schedule="cosine", total_steps=14, min_lr=1e-3)


def sparse_config():
    """A pair table of 820 rows that batches of 3 positions name only a few of, irregularly."""
    return cases.config(hidden=(8,), num_tokens=40, T=4)


def move_config():
    """sparse_config with a move table of 120 rows, of which batches of 3 positions (up to
    27 legal moves) name only a few."""
    return cases.config(hidden=(8,), num_tokens=40, T=4, num_moves=120)


def move_kinds_config():
    """move_config's 120 move-table rows as 3 kinds of each move (labels up to 359) over 40
    move classes: the sparse update marks the labels' moves, not the labels. (With 4
    classes the zero-started move-pair table gets entries summed from cancelling terms, and
    AdamW's eps = 1e-6 makes their float32 rounding a 1e-3 difference from the float64
    reference, dense update or not.)"""
    return cases.config(hidden=(8,), num_tokens=40, T=4, num_moves=360, move_pairs=40, move_kinds=3)


def batches(cfg, n, seed=0):
    """n batches; every third one repeats the first batch's tokens (the move tests' configs:
    and its legal moves), so some rows come back after gaps of different lengths while most
    stay untouched."""
    out = [cases.batch(cfg, B=3, seed=seed + i, empty_fraction=0.3) for i in range(n)]
    moves = cfg.num_moves // max(cfg.move_kinds, 1) == move_config().num_moves
    for i in range(3, n, 3):
        legal = (out[0] if moves else out[i])
        out[i] = mk.Batch(out[0].tokens, legal.legal, legal.counts, legal.target, out[i].value)
    return out


def lr_of(step):
    """The learning rate of step `step` (0-based) under HYPER and SCHEDULE."""
    return refm.lr_at(step, HYPER["lr"], SCHEDULE["warmup_steps"], "cosine", SCHEDULE["total_steps"],
                      SCHEDULE["min_lr"])


def raw_bits(model, trainer):
    """Every parameter and moment as bytes (reads flush: the caught-up state)."""
    state = trainer.state_dict()
    out = {n: a.tobytes() for n, a in model.state_dict().items()}
    for kind in ("exp_avg", "exp_avg_sq"):
        out.update({f"{kind}.{n}": a.tobytes() for n, a in state[kind].items()})
    return out


def train_bits(cfg, steps, threads, **trainer_kw):
    """raw_bits after `steps` steps of batches(cfg) on `threads` threads (seed 5)."""
    before = mk.get_num_threads()
    try:
        mk.set_num_threads(threads)
        model = mk.Model(cfg, seed=5)
        trainer = mk.Trainer(model, **HYPER, **SCHEDULE, **trainer_kw)
        for b in batches(cfg, steps):
            trainer.step(b)
        return raw_bits(model, trainer)
    finally:
        mk.set_num_threads(before)


def check_resume_is_bitwise(cfg, tmp_path, **trainer_kw):
    """Twelve steps straight against six, a saved model and trainer state, a fresh trainer
    loading them, and six more: the same bits."""
    bs = batches(cfg, 12)
    model = mk.Model(cfg, seed=5)
    trainer = mk.Trainer(model, **HYPER, **SCHEDULE, **trainer_kw)
    for b in bs[:6]:
        trainer.step(b)
    model.save(tmp_path / "m.mkm")
    saved = trainer.state_dict()
    for b in bs[6:]:
        trainer.step(b)
    resumed = mk.Model.load(tmp_path / "m.mkm")
    again = mk.Trainer(resumed, **HYPER, **SCHEDULE, **trainer_kw)
    again.load_state_dict(saved)
    assert again.step_count == 6
    for b in bs[6:]:
        again.step(b)
    assert raw_bits(resumed, again) == raw_bits(model, trainer)


def check_device_path(cfg, **trainer_kw):
    """The "cpu_staged" backend runs the sparse updates through the device path of
    trainer.c (the staged batch, the non-finite guard on the device flag, the gap window
    advanced or skipped on the device): the same bits as the host path, and a skipped step
    leaves parameters and moments exactly as they were."""
    from model_cases import staged_twin, state_bytes as snapshot

    host = mk.Model(cfg, seed=6)
    staged = staged_twin(host)
    t1 = mk.Trainer(host, **HYPER, **SCHEDULE, **trainer_kw)
    t2 = mk.Trainer(staged, **HYPER, **SCHEDULE, **trainer_kw)
    bs = batches(cfg, 6)
    for b in bs:
        assert t1.step(b).as_dict() == t2.step(b).as_dict()
    assert snapshot(host, t1) == snapshot(staged, t2)
    staged._core.write("value.bias", np.array([np.inf], np.float32))
    weight = staged.state_dict()["value.weight"]
    weight[0, 0] = -np.inf
    staged._core.write("value.weight", weight)
    before = snapshot(staged, t2)
    stats = t2.step(bs[1])
    with pytest.raises(FloatingPointError, match="its update was skipped on the device"):
        stats.loss
    after = snapshot(staged, t2)
    assert after.pop("step_count") == 7 and before.pop("step_count") == 6
    assert after == before


def check_against_reference(cfg, table, share, pair="dense", move="dense"):
    """Twelve steps of the C trainer against reference_model.SparseAdamW on batches(cfg):
    each loss, then every parameter and moment after a flush, and the rows of `table` no
    batch named equal to their decay alone. The case must exercise the update: a batch
    names under `share` of the table's rows, and rows come back after gaps. Returns the
    rows never named."""
    model = mk.Model(cfg, seed=5)
    ref = refm.SparseAdamW(model.state_dict(), pair, lr_of, HYPER["betas"], HYPER["eps"],
                           HYPER["weight_decay"], move_mode=move)
    trainer = mk.Trainer(model, pair_update=pair, move_update=move, **HYPER, **SCHEDULE)
    named = []
    for b in batches(cfg, 12):
        want = ref.step(cfg, b)
        assert trainer.step(b).loss == pytest.approx(want["loss"], rel=1e-5)
        named.append(set(refm.SparseAdamW.NAMED[table](b, cfg)))
    rows = model.shapes[table][0]
    assert max(len(n) for n in named) < share * rows
    assert any(q in named[k] and q not in named[k - 1] for k in range(2, 12) for q in named[0])
    ref.flush()
    got, state = model.state_dict(), trainer.state_dict()
    for n in got:
        assert cases.rel_err(got[n], ref.params[n]) < 2e-5, n
        assert cases.rel_err(state["exp_avg"][n], ref.m[n]) < 1e-4, n
        assert cases.rel_err(state["exp_avg_sq"][n], ref.v[n]) < 1e-4, n
    # rows no batch ever named only decayed: exactly p0 * prod(1 - lr wd) (to float rounding)
    never = np.setdiff1d(np.arange(rows), sorted(set().union(*named)))
    p0 = mk.Model(cfg, seed=5).state_dict()[table][never]
    decay = math.prod(1 - lr_of(s) * HYPER["weight_decay"] for s in range(12))
    np.testing.assert_allclose(got[table][never], p0 * decay, rtol=1e-6)
    return never
