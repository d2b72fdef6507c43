"""Trainer(move_update="sparse" | "lazy"): the move table's rows a batch's legal moves name,
against the float64 reference of the documented semantics (reference_model.SparseAdamW),
alone and beside a sparse pair table; near the dense update; bitwise deterministic for any
thread count; exact resume; the device-memory path; bad arguments."""
import numpy as np
import pytest

import manaka as mk
import model_cases as cases
import reference_model as refm
from sparse_cases import (HYPER, SCHEDULE, batches, check_against_reference, check_device_path,
                          check_resume_is_bitwise, lr_of, move_config, move_kinds_config,
                          train_bits)


def train(move, pair="dense", steps=12, seed=5, **extra):
    cfg = move_config()
    model = mk.Model(cfg, seed=seed)
    trainer = mk.Trainer(model, pair_update=pair, move_update=move, **HYPER, **SCHEDULE, **extra)
    losses = [trainer.step(b).loss for b in batches(cfg, steps)]
    return model, trainer, losses


# ------------------------------------------------------------------ against the reference

@pytest.mark.parametrize("move,pair", [("sparse", "dense"), ("lazy", "dense"), ("sparse", "sparse"),
                                       ("lazy", "sparse")])
def test_matches_the_reference_of_the_documented_semantics(move, pair):
    never = check_against_reference(move_config(), "move_table", 0.25, pair=pair, move=move)
    assert len(never) > 0


@pytest.mark.parametrize("move", ["sparse", "lazy"])
def test_with_move_kinds_marks_the_labels_moves(move):
    """Move kinds: a label names row label % R of the move table (R = 120 rows, labels up to
    359): the same reference semantics over those rows; the kind table is dense."""
    never = check_against_reference(move_kinds_config(), "move_table", 0.5, move=move)
    assert len(never) > 0


def test_the_reference_move_update_is_not_the_dense_one():
    """The reference with a sparse move table differs from its dense AdamW (the check above
    would otherwise pass against a trainer that ignored move_update)."""
    cfg = move_config()
    params = mk.Model(cfg, seed=5).state_dict()
    refs = {mode: refm.SparseAdamW(params, "dense", lr_of, HYPER["betas"], HYPER["eps"],
                                   HYPER["weight_decay"], move_mode=mode) for mode in ("dense", "lazy")}
    for b in batches(cfg, 8):
        for r in refs.values():
            r.step(cfg, b)
    for r in refs.values():
        r.flush()
    assert cases.rel_err(refs["lazy"].params["move_table"], refs["dense"].params["move_table"]) > 1e-3


def test_sparse_stays_near_dense_and_lazy_does_not():
    """The C trainers on the same batches: "sparse" differs from "dense" by its eps
    approximation and rounding only; "lazy" leaves the drift out, a visible change."""
    dense, _, dl = train("dense")
    sparse, _, sl = train("sparse")
    lazy, _, ll = train("lazy")
    d, s, z = (m.state_dict()["move_table"] for m in (dense, sparse, lazy))
    assert cases.rel_err(s, d) < 1e-4
    assert cases.rel_err(z, d) > 10 * cases.rel_err(s, d)
    np.testing.assert_allclose(sl, dl, rtol=1e-5)


# ------------------------------------------------------------------ determinism and state

@pytest.mark.parametrize("move,pair", [("sparse", "dense"), ("lazy", "sparse")])
def test_bitwise_the_same_for_1_2_3_threads(move, pair):
    runs = [train_bits(move_config(), 8, n, pair_update=pair, move_update=move) for n in (1, 2, 3)]
    assert runs[0] == runs[1] == runs[2]


@pytest.mark.parametrize("move,pair", [("sparse", "dense"), ("lazy", "sparse")])
def test_resume_mid_run_is_bitwise_the_uninterrupted_run(move, pair, tmp_path):
    check_resume_is_bitwise(move_config(), tmp_path, pair_update=pair, move_update=move)


def test_reads_are_caught_up():
    """A read of the model or the trainer's moments flushes: what is read is the
    caught-up state, the same as after an explicit flush, and reading twice changes nothing."""
    model, trainer, _ = train("sparse", steps=7)
    first = model.state_dict()["move_table"]
    np.testing.assert_array_equal(model.parameters()["move_table"], first)
    m = trainer.state_dict()["exp_avg"]["move_table"]
    trainer.flush()
    np.testing.assert_array_equal(trainer.state_dict()["exp_avg"]["move_table"], m)
    np.testing.assert_array_equal(model.state_dict()["move_table"], first)


def test_device_memory_path_matches_and_skips_non_finite_steps_on_the_device():
    """The staged batch's labels marked and caught up on the device path, the masked update
    skipped with the rest on a non-finite step."""
    check_device_path(move_config(), move_update="sparse")


# ------------------------------------------------------------------ arguments

def test_a_loaded_state_must_keep_the_decay_below_one():
    """The bad names and the rule at construction are test_trainer_sparse.py's, for both
    options; a state whose hyperparameters break the rule is refused, and nothing changes."""
    model = mk.Model(cases.config(), seed=0)
    t = mk.Trainer(model, move_update="sparse")
    state = t.state_dict()
    state["hyperparameters"] = {**state["hyperparameters"], "lr": 2.0, "weight_decay": 0.5}
    with pytest.raises(ValueError, match="move_update='sparse' needs lr \\* weight_decay < 1"):
        t.load_state_dict(state)
    assert t.hyperparameters["lr"] == pytest.approx(1e-3)


def test_a_step_in_two_halves_refuses_a_sparse_move_table():
    """A data-parallel trainer exchanges gradients between the halves; the move table's
    rows another rank's batch names would be missed: refused, in Python before any torch
    import and in C for a direct call."""
    cfg = move_config()
    model = mk.Model(cfg, seed=0)
    with pytest.raises(ValueError, match="move_update='sparse' cannot be used with a process_group"):
        mk.Trainer(model, move_update="sparse", process_group=object())
    trainer = mk.Trainer(model, move_update="lazy")
    with pytest.raises(ValueError, match="move_update='lazy' cannot step in two halves"):
        trainer._core.backward(batches(cfg, 1)[0])
    assert trainer.step_count == 0
