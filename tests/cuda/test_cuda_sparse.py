"""The sparse pair-table and move-table updates (pair_update, move_update "sparse" / "lazy")
on the CUDA backend against the CPU backend, which tests/api/test_trainer_sparse*.py hold to
the float64 reference: the same steps agree to rounding (fp32 and bf16 moments), and moments
of a row without gradient end as exact zeros on both. The kernels' own bits are held to the CPU's by test_backend_ops.py.
Skipped, saying why, where there is no usable CUDA device; tools/cuda_emu/run_gpu_tests.py
runs it on the CPU emulation of the device."""
import numpy as np
import pytest

import manaka as mk
import model_cases as cases
import reference_model as refm
from manaka import cuda
from sparse_cases import HYPER, SCHEDULE, batches, move_config, sparse_config

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not cuda.is_available(), reason=f"no CUDA device: {cuda.why_unavailable()}")]

TOL = 1e-4


@pytest.mark.parametrize("pair, move, dtype", [("sparse", "dense", "float32"), ("sparse", "dense", "bf16"),
                                              ("lazy", "dense", "float32"), ("lazy", "dense", "bf16"),
                                              ("dense", "sparse", "float32"), ("sparse", "lazy", "float32")])
def test_steps_match_cpu(pair, move, dtype):
    """Each update of the pair table and the move table (for a sparse move table: the batch's
    labels marked and caught up on the device, the masked AdamW), then a flush of every row
    (state_dict): the CPU's result to rounding."""
    cfg = sparse_config() if move == "dense" else move_config()
    models = [mk.Model(cfg, device=d, seed=4) for d in ("cpu", "cuda")]
    trainers = [mk.Trainer(m, pair_update=pair, move_update=move, pair_state_dtype=dtype, **HYPER, **SCHEDULE)
                for m in models]
    for b in batches(cfg, 8):
        s1, s2 = (t.step(b) for t in trainers)
        assert abs(s1.loss - s2.loss) <= TOL * max(1.0, abs(s1.loss))
    cpu, gpu = (m.state_dict() for m in models)
    for n in cpu:
        assert cases.rel_err(gpu[n], cpu[n]) < TOL, n
    cases.assert_moments_match(trainers[1], trainers[0], TOL if dtype == "float32" else 2e-2)


@pytest.mark.parametrize("mode", ["dense", "sparse"])
def test_moments_without_gradient_end_as_exact_zeros_on_both(mode):
    cfg = sparse_config()
    first = cases.batch(cfg, B=1, seed=3, empty_fraction=0.0)
    rows = refm.named_pair_rows(first.tokens)
    tokens = np.full_like(first.tokens, -1)
    tokens[..., :2] = [0, 1]
    later = mk.Batch(tokens, first.legal, first.counts, first.target, first.value)
    states = []
    for device in ("cpu", "cuda"):
        model = mk.Model(cfg, device=device, seed=1)
        trainer = mk.Trainer(model, lr=1e-2, betas=(0.75, 0.75), pair_update=mode)
        trainer.step(first)
        for _ in range(350):
            trainer.step(later)
        states.append(trainer.state_dict())
    for kind in ("exp_avg", "exp_avg_sq"):
        for state in states:
            np.testing.assert_array_equal(state[kind]["pair_table"][rows], 0.0)
