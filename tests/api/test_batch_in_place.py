"""Batches read in place, on the CPU: the device-batch path of model.c, trainer.c and the
binding (the batch used where it lies, checked by the backend's batch_check entry, its
arrays kept alive per batch slot) on the "cpu_staged" backend, whose device memory is host
memory, so a batch of NumPy arrays can pose as one already on the device. The same path
with real GPU arrays: tests/cuda/test_cuda_device_batch.py. And the refusals that need no GPU:
GPU arrays on a CPU model, host and GPU fields mixed."""
import ctypes
import gc
import weakref

import numpy as np
import pytest

import manaka as mk
import model_cases as cases
from backend_table import Batch as CBatch, check_layout
from batch_faults import BAD_FIELDS, FAULT_PAIRS, corrupt, corrupt_all
from model_cases import staged_twin

BATCH_CAPSULE = b"manaka.mk_batch"  # MK_BATCH_CAPSULE, batch.h
_capsule = ctypes.pythonapi.PyCapsule_New
_capsule.restype, _capsule.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class InPlace:
    """The holder of a batch already in the backend's memory, as manaka._cuda.device_batch
    makes one: `batch`, a 'manaka.mk_batch' capsule of an mk_batch over the arrays, made
    through the ctypes mirror that tests/helpers/backend_table.py checks against the compiled
    layout. on_device() turns it into the _core.Batch the model reads, as device_batch does."""

    def __init__(self, batch, targets=True, name=BATCH_CAPSULE):
        self.arrays = [batch.tokens, batch.legal, batch.counts]
        self.arrays += [batch.target, batch.value, batch.policy_target] if targets else [None] * 3
        B, S, T = batch.tokens.shape
        self.struct = CBatch(B, S, T, batch.legal.shape[1], *(None if a is None else a.ctypes.data for a in self.arrays),
                             1, 0, 0)
        self.batch = _capsule(ctypes.addressof(self.struct), name, None)


def on_device(holder, op="Model.forward"):
    return mk._core.Batch._in_place(op, holder)


def test_the_batch_mirror_matches_the_compiled_struct():
    assert check_layout() == []


def test_a_batch_in_place_gives_the_staged_results():
    cfg = cases.config()
    host = mk.Model(cfg, seed=2)
    staged = staged_twin(host)
    for soft in (False, True):
        b = cases.batch(cfg, seed=5, soft=soft)
        in_place = on_device(InPlace(b, targets=False))
        assert in_place.on_device and not b.on_device
        for x, y in zip(staged._core.forward(b), staged._core.forward(in_place)):
            np.testing.assert_array_equal(x, y)
        want = staged._core.loss_and_grad(b, 0.7)
        grads = {n: staged._core.read(n, True) for n in host.shapes}
        got = staged._core.loss_and_grad(on_device(InPlace(b)), 0.7)
        np.testing.assert_array_equal(want, got)
        for n in host.shapes:
            np.testing.assert_array_equal(staged._core.read(n, True), grads[n], err_msg=n)


def test_trainer_steps_in_place_match_staged_steps_with_growth_between():
    cfg = cases.config()
    a, b = staged_twin(mk.Model(cfg, seed=3)), staged_twin(mk.Model(cfg, seed=3))
    ta, tb = mk.Trainer(a, lr=1e-2), mk.Trainer(b, lr=1e-2)
    for s, (B, L) in enumerate([(6, 9), (6, 9), (11, 14), (4, 5), (13, 9), (6, 20)]):
        batch = cases.batch(cfg, B=B, L=L, seed=10 + s, soft=s % 2 == 1)
        want = ta.step(batch)
        if s % 2:  # host and in-place batches alternate on the same trainer
            tb._core.step(on_device(InPlace(batch)))
        else:
            tb.step(batch)
        assert tb.step_count == s + 1
        assert tb._core.read_stats(s + 1).tolist() == ta._core.read_stats(s + 1).tolist()
        del want
    cases.assert_parameters_match(b, a)


@pytest.mark.parametrize("field", BAD_FIELDS)
def test_a_bad_batch_in_place_is_refused_in_the_host_checks_words_and_changes_nothing(field):
    cfg = cases.config()
    model = staged_twin(mk.Model(cfg, seed=1))
    trainer = mk.Trainer(model, lr=1e-2)
    trainer.step(cases.batch(cfg, seed=1, soft=True))
    snap = cases.snapshot(model, trainer)
    bad = corrupt(cases.batch(cfg, seed=2, soft=True), field)
    with pytest.raises(ValueError) as host:
        trainer.step(bad)
    with pytest.raises(ValueError) as in_place:
        trainer._core.step(on_device(InPlace(bad)))
    assert str(in_place.value) == str(host.value)
    assert "Trainer.step: " in str(host.value)
    if not field.startswith(("target", "value", "soft")):  # forward reads tokens, legal, counts
        with pytest.raises(ValueError) as fwd:
            model._core.forward(on_device(InPlace(bad, targets=False)))
        assert str(fwd.value) == str(host.value).replace("Trainer.step", "Model.forward")
    cases.assert_unchanged(model, trainer, snap)


@pytest.mark.parametrize("fields", FAULT_PAIRS)
def test_of_several_faults_in_place_the_host_checks_first_is_reported(fields):
    cfg = cases.config()
    model = staged_twin(mk.Model(cfg, seed=1))
    bad = corrupt_all(cases.batch(cfg, seed=2, soft=True), fields)
    with pytest.raises(ValueError) as host:
        model.loss_and_grad(bad)
    with pytest.raises(ValueError) as in_place:
        model._core.loss_and_grad(on_device(InPlace(bad)), 1.0)
    assert str(in_place.value) == str(host.value)


def test_the_model_keeps_a_batch_until_its_slot_comes_round_again():
    cfg = cases.config()
    model = staged_twin(mk.Model(cfg, seed=1))
    trainer = mk.Trainer(model, lr=1e-2)
    held = InPlace(cases.batch(cfg, seed=1))
    ref = weakref.ref(held)
    trainer._core.step(on_device(held))
    del held
    gc.collect()
    assert ref() is not None  # the step may still read it (on a GPU): the model holds it
    trainer.step(cases.batch(cfg, seed=2))  # the other slot
    gc.collect()
    assert ref() is not None
    trainer.step(cases.batch(cfg, seed=3))  # its slot again: its step is waited for, then released
    gc.collect()
    assert ref() is None


def test_a_dropped_model_releases_its_batches():
    cfg = cases.config()
    model = staged_twin(mk.Model(cfg, seed=1))
    held = InPlace(cases.batch(cfg, seed=1))
    ref = weakref.ref(held)
    model._core.loss_and_grad(on_device(held), 1.0)
    del held, model
    gc.collect()
    assert ref() is None


class FakeGpuArray:
    """Looks like a GPU array (never touched: these refusals happen before any device use)."""

    def __init__(self, shape, typestr="<i4"):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (0, False), "version": 3}
        self.shape = shape


def gpu_batch(cfg, B=6, L=9):
    T = cfg.tokens_per_side
    return mk.Batch(FakeGpuArray((B, 2, T)), FakeGpuArray((B, L)), FakeGpuArray((B,)),
                    FakeGpuArray((B,)), FakeGpuArray((B,), "<f4"))


def test_gpu_arrays_on_a_cpu_model_are_a_type_error():
    cfg = cases.config()
    model = mk.Model(cfg)
    for call in (model.forward, model.loss_and_grad, mk.Trainer(model).step):
        with pytest.raises(TypeError, match=r"batch.tokens is a GPU array \(FakeGpuArray\) but the model is on 'cpu'"):
            call(gpu_batch(cfg))


def test_a_batch_mixing_host_and_gpu_arrays_is_a_type_error():
    cfg = cases.config()
    model = mk.Model(cfg)
    b = cases.batch(cfg)
    b.legal = FakeGpuArray(b.legal.shape)
    with pytest.raises(TypeError, match=r"mixes host and GPU arrays \(tokens, counts on the host, legal on the GPU\)"):
        model.forward(b)
    b = cases.batch(cfg)
    b.value = FakeGpuArray(b.value.shape, "<f4")
    model.forward(b)  # forward does not read value
    with pytest.raises(TypeError, match=r"target on the host, value on the GPU"):
        mk.Trainer(model).step(b)


def test_a_device_batch_crosses_only_as_a_capsule_of_its_name():
    """What manaka._core takes from a device batch's holder is its `batch` capsule, by name: a
    tuple of pointers (the old crossing), another capsule or a missing attribute is refused
    before any pointer is read; and the entry points take nothing but a Batch."""
    cfg = cases.config()
    model = staged_twin(mk.Model(cfg, seed=1))
    trainer = mk.Trainer(model, lr=1e-2)
    snap = cases.snapshot(model, trainer)
    b = cases.batch(cfg, seed=4)
    forged = InPlace(b, name=b"manaka.mk_backend")
    with pytest.raises(TypeError, match=r"Trainer.step: a device batch's .batch must be a 'manaka.mk_batch' "
                                        r"capsule \(from manaka._cuda.device_batch\), got PyCapsule named manaka.mk_backend"):
        on_device(forged, "Trainer.step")
    layout = InPlace(b)
    layout.batch = (6, 2, cfg.tokens_per_side, 9) + tuple(a.ctypes.data for a in layout.arrays[:5]) + (0,)
    with pytest.raises(TypeError, match=r"Model.forward: a device batch's .batch must be a 'manaka.mk_batch' "
                                        r"capsule \(from manaka._cuda.device_batch\), got tuple$"):
        on_device(layout)
    with pytest.raises(AttributeError):
        on_device(object())
    for call in (model._core.forward, trainer._core.step, lambda x: model._core.loss_and_grad(x, 1.0)):
        with pytest.raises(TypeError, match=r"batch must be a manaka.Batch, got InPlace"):
            call(InPlace(b))
    cases.assert_unchanged(model, trainer, snap)
