"""The one batch type (manaka.Batch over _core.Batch, csrc/python/core/batch_binding.c):
built once, converted and shape-checked in C when it is made or a field is assigned, and
taken as it is by every model and trainer entry. Numbers against the float64 NumPy
reference (tests/reference_model.py)."""
import copy
import pickle

import numpy as np
import pytest

import manaka as mk
import model_cases as cases
import reference_model as refm

FIELDS = ("tokens", "legal", "counts", "target", "value", "policy_target")


def arrays(cfg, B=6, L=9, seed=0, soft=True):
    b = cases.batch(cfg, B=B, L=L, seed=seed, soft=soft)
    return {n: getattr(b, n) for n in FIELDS}


def test_one_batch_serves_forward_loss_and_grad_and_step_with_the_reference_numbers():
    cfg = cases.config()
    model = mk.Model(cfg, seed=4)
    batch = cases.batch(cfg, seed=7, soft=True)
    params = model.state_dict()
    act = refm.forward(params, cfg, batch.tokens, batch.legal, batch.counts)
    for _ in range(2):  # the same object, read again: the same numbers
        logits, value = model.forward(batch)
        assert cases.rel_err(logits, act["logits"]) < 1e-4
        assert cases.rel_err(value, act["value"]) < 1e-4
    want_stats, want_grads = refm.loss_and_grad(params, cfg, batch, value_weight=0.7)
    stats, grads = model.loss_and_grad(batch, value_weight=0.7)
    for k in ("loss", "policy_loss", "value_loss"):
        assert stats[k] == pytest.approx(want_stats[k], rel=1e-5), k
    for name, g in grads.items():
        assert cases.rel_err(g, want_grads[name]) < 1e-4, name
    trainer = mk.Trainer(model, lr=1e-2, weight_decay=0.1, value_weight=0.7)
    trainer.step(batch)
    zeros = {n: np.zeros_like(p, dtype=np.float64) for n, p in params.items()}
    want, _, _ = refm.adamw(params, want_grads, zeros, zeros, 1, 1e-2, weight_decay=0.1)
    for name, p in model.state_dict().items():
        assert cases.rel_err(p, want[name]) < 1e-4, name


def test_a_batch_is_the_same_as_a_fresh_one_after_many_uses():
    cfg = cases.config()
    a, b = mk.Model(cfg, seed=1), mk.Model(cfg, seed=1)
    ta, tb = mk.Trainer(a, lr=1e-2), mk.Trainer(b, lr=1e-2)
    fields = arrays(cfg, seed=3)
    kept = mk.Batch(**fields)
    for _ in range(3):
        assert ta.step(kept).loss == tb.step(mk.Batch(**fields)).loss
    cases.assert_parameters_match(a, b)


def test_fields_are_converted_once_and_kept():
    cfg = cases.config()
    f = arrays(cfg)
    tokens32 = f["tokens"].astype(np.int32)
    b = mk.Batch(tokens32, f["legal"].astype(np.int16), f["counts"], f["target"].astype(np.int8),
                 f["value"].astype(np.float64), f["policy_target"].astype(np.float16))
    assert b.tokens is tokens32  # already int32 and C-contiguous: not copied
    for name, dtype in zip(FIELDS, [np.int32] * 4 + [np.float32] * 2):
        x = getattr(b, name)
        assert x.dtype == dtype and x.flags.c_contiguous, name
    np.testing.assert_array_equal(b.legal, f["legal"])
    np.testing.assert_array_equal(b.value, f["value"])
    strided = np.asfortranarray(f["legal"].astype(np.int32))
    assert mk.Batch(f["tokens"], strided, f["counts"], f["target"], f["value"]).legal.flags.c_contiguous
    assert isinstance(b, mk._core.Batch) and len(b) == 6 and b.max_legal == 9
    assert repr(b) == f"Batch(size=6, tokens_per_side={cfg.tokens_per_side}, max_legal=9, soft targets)"
    assert not b.on_device and b.owner is None and b.producer_checked == (0, 0) and not b.in_slot


def _bad(cfg, name, make):
    f = arrays(cfg)
    f[name] = make(f[name])
    return f


def _put(x, v):
    x.reshape(-1)[0] = v
    return x


BAD = [
    ("tokens", lambda x: None, TypeError, "Batch: tokens is required, got None"),
    ("target", lambda x: None, TypeError, "Batch: target is required, got None"),
    ("legal", lambda x: x.tolist(), TypeError, "Batch: legal must be a NumPy array, got list"),
    ("counts", lambda x: x.astype(np.float32), TypeError, "Batch: counts must have an integer dtype, got float32"),
    ("target", lambda x: x.astype(bool), TypeError, "Batch: target must have an integer dtype, got bool"),
    ("value", lambda x: x.astype(np.int64), TypeError, "Batch: value must have a float dtype, got int64"),
    ("tokens", lambda x: x[0], ValueError, "Batch: tokens must have 3 dimensions, got 2"),
    ("policy_target", lambda x: x[:, 0], ValueError, "Batch: policy_target must have 2 dimensions, got 1"),
    ("value", lambda x: x[:5], ValueError, "Batch: value has 5 rows but tokens has 6"),
    ("policy_target", lambda x: x[:, :8], ValueError, "Batch: policy_target has 8 columns but legal has 9 (L)"),
    ("legal", lambda x: _put(x.astype(np.int64), 2**31), ValueError, "Batch: legal holds 2147483648 at flat position 0"),
    ("tokens", lambda x: _put(np.abs(x).astype(np.uint64), 2**64 - 1), ValueError,
     "Batch: tokens holds 18446744073709551615 at flat position 0, outside the int32 range"),
]


@pytest.mark.parametrize("name, make, exc, words", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_bad_fields_are_refused_when_the_batch_is_made_naming_the_field(name, make, exc, words):
    cfg = cases.config()
    with pytest.raises(exc) as err:
        mk.Batch(**_bad(cfg, name, make))
    assert str(err.value).startswith(words)
    # the same rule when the field is assigned, and the batch keeps its old field
    b = mk.Batch(**arrays(cfg))
    before = getattr(b, name)
    if "rows" in words or "columns" in words:
        setattr(b, name, _bad(cfg, name, make)[name])  # shapes are compared where the batch is read
        with pytest.raises(ValueError, match=words.replace("Batch:", "Trainer.step:").replace("(", r"\(")
                           .replace(")", r"\)")):
            mk.Trainer(mk.Model(cfg)).step(b)
        return
    with pytest.raises(exc) as err:
        setattr(b, name, _bad(cfg, name, make)[name])
    assert str(err.value).startswith(words)
    assert getattr(b, name) is before


def test_assigning_a_field_converts_it_and_none_only_drops_soft_targets():
    cfg = cases.config()
    b = mk.Batch(**arrays(cfg))
    b.target = b.target.astype(np.int64)
    assert b.target.dtype == np.int32
    b.policy_target = None
    assert b.policy_target is None and repr(b).endswith("max_legal=9)")
    with pytest.raises(AttributeError, match="Batch: value cannot be deleted"):
        del b.value
    with pytest.raises(AttributeError):
        b.other = 1  # the Python face adds no attributes


def test_the_entries_take_a_batch_and_nothing_else():
    cfg = cases.config()
    model = mk.Model(cfg)
    trainer = mk.Trainer(model)
    f = arrays(cfg)
    bare = mk._core.Batch(**f)  # the C type itself is a batch too
    np.testing.assert_array_equal(model.forward(bare)[0], model.forward(mk.Batch(**f))[0])
    for call, op in ((model.forward, "Model.forward"), (model.loss_and_grad, "Model.loss_and_grad"),
                     (trainer.step, "Trainer.step")):
        with pytest.raises(TypeError, match=rf"{op}: batch must be a manaka.Batch, got tuple"):
            call(tuple(f.values()))
    with pytest.raises(TypeError, match="Trainer.step: batch must be a manaka.Batch, got dict"):
        trainer._core.backward(f)


def test_a_loader_batch_after_the_loader_moved_on_is_an_ordinary_batch():
    cfg = cases.config(num_tokens=40, num_moves=60, T=5)
    ds = mk.Dataset.synthetic(64, cfg, seed=2)
    loader = mk.Loader(ds, batch_size=32, shuffle=False, producers=1, prefetch=1)
    it = iter(loader)
    first = next(it)
    fresh = mk.Batch(*(getattr(first, n).copy() for n in FIELDS[:5]))
    assert first.in_slot and first.producer_checked == (cfg.num_tokens, cfg.num_moves)
    second = next(it)
    assert not first.in_slot and second.in_slot
    model = mk.Model(cfg, seed=5)
    got, want = model.loss_and_grad(first), model.loss_and_grad(fresh)
    assert got[0] == want[0]
    assert model._core.batch_scans == 2  # the released batch is converted and checked in full
    model.forward(second)
    assert model._core.batch_scans == 2  # the held one is read in its slot
    it.close()
    loader.close()


def test_pickle_and_copy_rebuild_an_ordinary_batch():
    cfg = cases.config()
    model = mk.Model(cfg, seed=6)
    b = mk.Batch(**arrays(cfg, seed=8))
    want = model.forward(b)
    for other in (pickle.loads(pickle.dumps(b)), copy.copy(b), copy.deepcopy(b)):
        assert type(other) is mk.Batch
        for name in FIELDS:
            np.testing.assert_array_equal(getattr(other, name), getattr(b, name), err_msg=name)
        for x, y in zip(model.forward(other), want):
            np.testing.assert_array_equal(x, y)
