"""Batches already on the GPU, read in place by a CUDA model: the same results as the same
batch from NumPy (forward, loss and gradients, five trainer steps), through every way a
GPU array arrives (manaka.DeviceArray, __cuda_array_interface__, __dlpack__); each bad
field refused on the device in the host check's words, with the model and trainer
unchanged; wrong dtypes, shapes and mixed batches refused before the device is touched.
Skipped, saying why, where there is no usable CUDA device; tools/cuda_emu/run_gpu_tests.py
runs it on the CPU emulation of the device."""
import gc
import weakref

import numpy as np
import pytest

import manaka as mk
import model_cases as cases
from batch_faults import BAD_FIELDS, FAULT_PAIRS, corrupt, corrupt_all
from manaka import cuda

pytestmark = [pytest.mark.cuda,  # tools/cuda_emu/run_gpu_tests.py runs it on the emulated device
              pytest.mark.skipif(not cuda.is_available(), reason=f"no CUDA device: {cuda.why_unavailable()}")]

FIELDS = ("tokens", "legal", "counts", "target", "value", "policy_target")


class ViaCAI:
    """Only the CUDA Array Interface (v3, data ready on the legacy default stream)."""

    def __init__(self, x):
        self.x = x
        self.__cuda_array_interface__ = x.__cuda_array_interface__


class ViaCAIStream(ViaCAI):
    """CAI v3 naming the per-thread default stream: waited for before the check, and made
    to wait for the step after it (order_after)."""

    def __init__(self, x):
        super().__init__(x)
        self.__cuda_array_interface__ = {**x.__cuda_array_interface__, "stream": 2}


class ViaDLPack:
    """Only DLPack: the model asks it for its copy stream."""

    def __init__(self, x):
        self.x, self.streams = x, []

    def __dlpack__(self, **kw):
        self.streams.append(kw.get("stream"))
        return self.x.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.x.__dlpack_device__()


def on_gpu(batch, wrap=lambda x: x):
    """The same batch with every field a GPU array."""
    arrays = [None if getattr(batch, n) is None else wrap(mk.DeviceArray.from_numpy(getattr(batch, n)))
              for n in FIELDS]
    return mk.Batch(*arrays)


WRAPS = {"DeviceArray": lambda x: x, "CAI": ViaCAI, "CAI-stream": ViaCAIStream, "DLPack": ViaDLPack}


@pytest.mark.parametrize("wrap", WRAPS)
@pytest.mark.parametrize("soft", [False, True])
def test_forward_and_loss_and_grad_match_the_numpy_batch(wrap, soft):
    cfg = cases.config()
    model = mk.Model(cfg, device="cuda", seed=3)
    b = cases.batch(cfg, seed=7, soft=soft)
    g = on_gpu(b, WRAPS[wrap])
    for x, y in zip(model.forward(b), model.forward(g)):
        np.testing.assert_array_equal(x, y)
    want, want_grads = model.loss_and_grad(b, 0.5)
    got, got_grads = model.loss_and_grad(g, 0.5)
    assert got == want
    for n in want_grads:
        np.testing.assert_array_equal(got_grads[n], want_grads[n], err_msg=n)
    if wrap == "DLPack":  # asked for the model's copy stream, not the legacy default one
        assert g.tokens.streams and all(s == model._core.copy_stream != 1 for s in g.tokens.streams)


def test_five_trainer_steps_match_numpy_batches_with_growth_between():
    cfg = cases.config()
    a, b = mk.Model(cfg, device="cuda", seed=5), mk.Model(cfg, device="cuda", seed=5)
    ta, tb = mk.Trainer(a, lr=1e-2, warmup_steps=2), mk.Trainer(b, lr=1e-2, warmup_steps=2)
    shapes = [(6, 9), (11, 14), (4, 5), (13, 20), (6, 9)]
    for s, (B, L) in enumerate(shapes):
        batch = cases.batch(cfg, B=B, L=L, seed=20 + s, soft=s == 3)
        sa, sb = ta.step(batch), tb.step(on_gpu(batch) if s != 2 else batch)  # one host batch between
        assert sb.as_dict() == sa.as_dict()
    cases.assert_parameters_match(b, a)


@pytest.mark.parametrize("field", BAD_FIELDS)
def test_each_bad_field_is_refused_on_the_device_and_changes_nothing(field):
    cfg = cases.config()
    model = mk.Model(cfg, device="cuda", seed=1)
    trainer = mk.Trainer(model, lr=1e-2)
    trainer.step(on_gpu(cases.batch(cfg, seed=1, soft=True)))
    snap = cases.snapshot(model, trainer)
    bad = corrupt(cases.batch(cfg, seed=2, soft=True), field)
    with pytest.raises(ValueError) as host:
        trainer.step(bad)
    with pytest.raises(ValueError) as device:
        trainer.step(on_gpu(bad))
    assert str(device.value) == str(host.value)
    with pytest.raises(ValueError) as device:
        model.loss_and_grad(on_gpu(bad))
    assert str(device.value) == str(host.value).replace("Trainer.step", "Model.loss_and_grad")
    cases.assert_unchanged(model, trainer, snap)
    trainer.step(on_gpu(cases.batch(cfg, seed=3)))  # and the model still trains
    assert trainer.step_count == 2


@pytest.mark.parametrize("fields", FAULT_PAIRS)
def test_of_several_faults_on_the_device_the_host_checks_first_is_reported(fields):
    cfg = cases.config()
    model = mk.Model(cfg, device="cuda", seed=1)
    bad = corrupt_all(cases.batch(cfg, seed=2, soft=True), fields)
    with pytest.raises(ValueError) as host:
        model.loss_and_grad(bad)
    with pytest.raises(ValueError) as device:
        model.loss_and_grad(on_gpu(bad))
    assert str(device.value) == str(host.value)


def test_a_large_batch_is_checked_whole_on_the_device():
    """Many blocks of the check kernels: a fault in the last row is still found."""
    cfg = cases.config()
    model = mk.Model(cfg, device="cuda", seed=1)
    b = cases.batch(cfg, B=700, L=40, seed=4, soft=True)
    b.policy_target[699, 0] = -1.0
    with pytest.raises(ValueError, match=r"policy_target\[699, 0\] = -1 must be finite and >= 0"):
        model.loss_and_grad(on_gpu(b))
    b.legal[699, b.counts[699] - 1] = cfg.num_moves
    with pytest.raises(ValueError, match=r"legal\[699, \d+\] = 17 is out of range"):
        model.loss_and_grad(on_gpu(b))


def test_wrong_dtypes_shapes_and_mixes_are_refused_before_the_step():
    cfg = cases.config()
    model = mk.Model(cfg, device="cuda")
    trainer = mk.Trainer(model)
    b = cases.batch(cfg)
    g = on_gpu(b)
    g.tokens = mk.DeviceArray.from_numpy(b.tokens.astype(np.int64))
    with pytest.raises(TypeError, match="Trainer.step: tokens must have dtype int32 on the GPU"):
        trainer.step(g)
    g = on_gpu(b)
    g.value = mk.DeviceArray.from_numpy(b.value.astype(np.float64))
    with pytest.raises(TypeError, match="Model.loss_and_grad: value must have dtype float32, got float64"):
        model.loss_and_grad(g)
    g = on_gpu(b)
    g.counts = mk.DeviceArray.from_numpy(b.counts[:-1])
    with pytest.raises(ValueError, match="Model.forward: counts has 5 rows but tokens has 6"):
        model.forward(g)
    g = on_gpu(b)
    g.legal = mk.DeviceArray.from_numpy(b.legal.reshape(-1))
    with pytest.raises(ValueError, match="legal must have 2 dimensions, got 1"):
        model.forward(g)
    g = on_gpu(b)
    g.counts = b.counts
    with pytest.raises(TypeError, match=r"mixes host and GPU arrays \(counts on the host"):
        trainer.step(g)
    g = on_gpu(cases.batch(cfg, soft=True))
    g.policy_target = mk.DeviceArray.from_numpy(np.zeros((6, 4), np.float32))
    with pytest.raises(ValueError, match="policy_target has 4 columns but legal has 9"):
        trainer.step(g)
    g = on_gpu(b)  # every other column of a wider array: strided, refused (no hidden copy)
    wide = mk.DeviceArray.from_numpy(np.repeat(b.legal, 2, axis=1))
    g.legal = ViaCAI(wide)
    g.legal.__cuda_array_interface__ = {**wide.__cuda_array_interface__, "shape": b.legal.shape,
                                        "strides": (8 * b.legal.shape[1], 8)}
    with pytest.raises(ValueError, match="legal must be C-contiguous on the GPU"):
        trainer.step(g)
    empty = cases.batch(cfg)
    g = on_gpu(mk.Batch(empty.tokens[:0], empty.legal[:0], empty.counts[:0], empty.target[:0], empty.value[:0]))
    with pytest.raises(ValueError, match="Trainer.step: the batch is empty"):
        trainer.step(g)
    assert trainer.step_count == 0


def test_the_step_keeps_the_arrays_it_reads_alive():
    cfg = cases.config()
    model = mk.Model(cfg, device="cuda", seed=1)
    trainer = mk.Trainer(model, lr=1e-2)
    g = on_gpu(cases.batch(cfg, seed=1), ViaCAI)  # a Python object, so it can be watched
    ref = weakref.ref(g.tokens)
    trainer.step(g)
    del g
    gc.collect()
    assert ref() is not None  # the step may still be reading it
    trainer.step(on_gpu(cases.batch(cfg, seed=2)))
    trainer.step(on_gpu(cases.batch(cfg, seed=3)))  # its slot again: released after its step
    gc.collect()
    assert ref() is None


def test_a_device_batch_reaches_the_core_as_a_capsule_that_keeps_its_arrays():
    """manaka._cuda.device_batch returns a manaka._core.Batch on the device, made from a
    'manaka.mk_batch' capsule of the struct it parsed; the Batch holds the _DeviceBatch (and
    so the GPU arrays) on its own, and _core refuses any other capsule before reading a
    pointer."""
    import ctypes

    from manaka.cuda import _cuda

    cfg = cases.config()
    model = mk.Model(cfg, device="cuda", seed=3)
    b = cases.batch(cfg, seed=9)
    g = on_gpu(b)
    staged = _cuda.device_batch("Model.forward", model._core.copy_stream, g.tokens, g.legal, g.counts)
    assert type(staged) is mk._core.Batch and staged.on_device and staged.tokens is None
    valid = ctypes.pythonapi.PyCapsule_IsValid
    valid.restype, valid.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
    assert valid(staged.owner.batch, b"manaka.mk_batch") == 1
    del g  # the arrays are gone from Python: only the Batch's owner keeps them
    gc.collect()
    for x, y in zip(model._core.forward(staged), model.forward(b)):
        np.testing.assert_array_equal(x, y)

    class Holder:
        def __init__(self, batch):
            self.batch = batch

    backend = _cuda.backend_table()  # a capsule of another name
    with pytest.raises(TypeError, match="a device batch's .batch must be a 'manaka.mk_batch' capsule"):
        mk._core.Batch._in_place("Model.forward", Holder(backend))
