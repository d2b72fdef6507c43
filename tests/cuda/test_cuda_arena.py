"""No device allocation per training step on the CUDA backend: the fused ops' scratch (the
bucket sorts behind every backward scatter) is carved once in the model's arena
(backend.h: scratch_bytes) instead of coming from the workspace pool at every call, and
the arena grows only when a larger batch comes. manaka._cuda.alloc_count() counts every
cudaMalloc and pool allocation manaka makes. Skipped, saying why, where there is no usable
CUDA device; tools/cuda_emu/run_gpu_tests.py runs it on the CPU emulation of the device."""
import numpy as np
import pytest

import manaka as mk
import model_cases as cases
from manaka import cuda

pytestmark = [pytest.mark.cuda,  # tools/cuda_emu/run_gpu_tests.py runs it on the emulated device
              pytest.mark.skipif(not cuda.is_available(), reason=f"no CUDA device: {cuda.why_unavailable()}")]

TOL = 1e-4
GROWTH = 2  # allocations when a batch outgrows the model: its arena and its batch slots


def allocations():
    return cuda._cuda.alloc_count()


def test_the_counter_sees_the_public_ops_pool():
    """The public ops have no arena and still take their scratch from the pool: the
    backward (one output plus its bucket scratch) allocates more than the forward (one
    output), so the counter really sees pool allocations and a zero below means none."""
    rng = np.random.default_rng(0)
    V, P = 6, 3
    tokens = mk.DeviceArray.from_numpy(rng.integers(-1, V, (4, 2, 5)).astype(np.int32))
    table = mk.DeviceArray.from_numpy(rng.standard_normal((V * (V + 1) // 2, P)).astype(np.float32))
    grad = mk.DeviceArray.from_numpy(rng.standard_normal((4, 2, P)).astype(np.float32))
    before = allocations()
    mk.ops.pair_sums(table, tokens)
    forward = allocations() - before
    mk.ops.pair_sums_backward(grad, tokens, V * (V + 1) // 2)
    backward = allocations() - before - forward
    assert forward >= 1 and backward > forward


def shapes_within(cfg, B, L, seed):
    """Batches no larger than (B, L) in either dimension, hard and soft targets."""
    return [cases.batch(cfg, B=b, L=l, seed=seed + i, soft=i % 2 == 1)
            for i, (b, l) in enumerate([(B, L), (B // 2, L), (B, 2), (1, L), (B - 1, L - 1)])]


@pytest.mark.parametrize("fused, pair_state, head", [(True, "float32", "fused"), (False, "float32", "fused"),
                                                    (True, "bf16", "fused"), (False, "bf16", "split"),
                                                    (True, "float32", "split")],
                         ids=["fused-f32", "unfused-f32", "fused-bf16", "unfused-bf16-split-head",
                              "fused-f32-split-head"])
def test_warm_steps_allocate_nothing_and_still_match_the_cpu(fused, pair_state, head):
    """Every way through the step (pair-table update fused or not, fp32 or bf16 moments, the
    fused or split policy head), at shapes within the arena, plus forward and loss_and_grad:
    no allocation, and the same losses, gradients and parameters as the CPU."""
    cfg = cases.config(hidden=(7,))
    cpu = mk.Model(cfg, device="cpu", seed=2, policy_head=head)
    gpu = mk.Model(cfg, device="cuda", seed=2, policy_head=head)
    opts = dict(lr=2e-2, weight_decay=0.1, pair_state_dtype=pair_state)
    t1, t2 = mk.Trainer(cpu, **opts), mk.Trainer(gpu, **opts)
    t1._core.fused = t2._core.fused = fused
    warm = cases.batch(cfg, B=6, L=9, seed=1)
    t1.step(warm), t2.step(warm)  # sizes the arena for (6, 9)
    arena = gpu._core.arena_bytes
    before = allocations()
    pending = []
    for b in shapes_within(cfg, 6, 9, seed=10):
        pending.append((t1.step(b).loss, t2.step(b)))
    gpu.forward(warm)
    _, grads = gpu.loss_and_grad(warm)
    losses = [(want, got.loss) for want, got in pending]  # reading stats allocates nothing either
    assert allocations() == before
    assert gpu._core.arena_bytes == arena
    for want, got in losses:
        assert abs(got - want) <= TOL * max(1.0, abs(want))
    _, want_grads = cpu.loss_and_grad(warm)
    for name in want_grads:
        assert cases.rel_err(grads[name], want_grads[name]) < TOL, name
    cases.assert_parameters_match(gpu, cpu, 10 * TOL)


def test_a_larger_batch_grows_the_arena_once():
    """The first step sizes the arena (activations and scratch) and the batch slots
    (staging.c): one allocation each. A larger B, then a larger L, cost the same two
    again on the step that brings it; every step after, at any shape within capacity,
    costs none."""
    cfg = cases.config(hidden=(5,))
    gpu = mk.Model(cfg, device="cuda", seed=4)
    trainer = mk.Trainer(gpu, lr=1e-2)
    before = allocations()
    trainer.step(cases.batch(cfg, B=3, L=4, seed=1))
    assert allocations() - before == GROWTH
    sizes = [gpu._core.arena_bytes]
    for i, (grow, then) in enumerate([((9, 4), [(9, 4), (3, 4), (2, 2)]),
                                      ((3, 13), [(9, 13), (1, 1), (9, 4), (3, 13)])]):
        before = allocations()
        trainer.step(cases.batch(cfg, B=grow[0], L=grow[1], seed=20 + i))
        assert allocations() - before == GROWTH
        sizes.append(gpu._core.arena_bytes)
        assert sizes[-1] > sizes[-2]
        before = allocations()
        stats = [trainer.step(cases.batch(cfg, B=B, L=L, seed=40 + 10 * i + k)) for k, (B, L) in enumerate(then)]
        assert all(np.isfinite(s.loss) for s in stats)
        assert allocations() == before
        assert gpu._core.arena_bytes == sizes[-1]
    assert trainer.step_count == 10


def test_warm_steps_on_device_batches_allocate_nothing():
    """Batches already on the GPU are checked on the device (batch_check) into a buffer the
    model made once, and read in place: after the first, steps allocate nothing, and they
    follow the same batches given from NumPy."""
    cfg = cases.config(hidden=(6,))
    host_model, gpu = mk.Model(cfg, device="cuda", seed=5), mk.Model(cfg, device="cuda", seed=5)
    t1, t2 = mk.Trainer(host_model, lr=1e-2), mk.Trainer(gpu, lr=1e-2)
    batches = shapes_within(cfg, 6, 9, seed=60)
    fields = ("tokens", "legal", "counts", "target", "value", "policy_target")
    on_gpu = [mk.Batch(*[None if getattr(b, n) is None else
                         mk.DeviceArray.from_numpy(np.ascontiguousarray(getattr(b, n), np.float32
                                                                        if n in ("value", "policy_target")
                                                                        else np.int32))
                         for n in fields]) for b in batches]  # made before counting
    t1.step(batches[0]), t2.step(on_gpu[0])
    before = allocations()
    pending = [(t1.step(b), t2.step(d)) for b, d in zip(batches[1:], on_gpu[1:])]
    assert allocations() == before
    for want, got in pending:
        assert abs(got.loss - want.loss) <= TOL * max(1.0, abs(want.loss))
