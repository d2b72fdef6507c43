"""Cross-check against PyTorch (manaka/bench/torch_baseline.py): same parameters, same batch, three
AdamW steps; skipped (and saying so) when torch is not installed."""
import pytest

torch = pytest.importorskip("torch", reason="torch not installed: the PyTorch cross-check is skipped")

import manaka as mk  # noqa: E402
import model_cases as cases  # noqa: E402

from manaka.bench.torch_baseline import TorchStep  # noqa: E402


@pytest.mark.parametrize("dense", [False, True], ids=["materialising", "dense"])
@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
def test_three_steps_agree_with_torch_adamw(soft, dense):
    cfg = cases.config(hidden=(8, 6))
    b = cases.batch(cfg, soft=soft)
    trainer = mk.Trainer(mk.Model(cfg, seed=1), lr=1e-2, weight_decay=0.05)
    ref = TorchStep(cfg, trainer.model.state_dict(), b, lr=1e-2, weight_decay=0.05, dense=dense, fused=dense)
    for _ in range(3):
        assert trainer.step(b).loss == pytest.approx(float(ref.step()), rel=1e-5)
    for name, arr in trainer.model.state_dict().items():
        assert cases.rel_err(arr, ref.net.p(name).detach().numpy()) < 1e-4, name


@pytest.mark.parametrize("compile", [False, True], ids=["eager", "compiled"])
def test_sparse_adam_contender_is_adam_on_the_rows_a_batch_touches(compile):
    # The benchmark's SparseAdam contender (step_torch): with one batch repeated, every
    # step touches the same pair-table rows, so torch.optim.SparseAdam on them is Adam, and
    # the whole step is the dense step with AdamW at weight decay 0 (rows never touched have
    # zero moments and stay put in both).
    cfg = cases.config(hidden=(8, 6))
    b = cases.batch(cfg)
    state = mk.Model(cfg, seed=1).state_dict()
    ref = TorchStep(cfg, state, b, lr=1e-2, weight_decay=0.0, dense=True, fused=True)
    got = TorchStep(cfg, state, b, lr=1e-2, weight_decay=0.0, dense=True, fused=True, sparse_adam=True,
                    compile=compile)
    for _ in range(3):
        assert float(got.step()) == pytest.approx(float(ref.step()), rel=1e-5)
    assert got.net.p("pair_table").grad.is_sparse
    assert isinstance(got.opts[-1], torch.optim.SparseAdam)
    for name in state:
        assert cases.rel_err(got.net.p(name).detach().numpy(), ref.net.p(name).detach().numpy()) < 1e-5, name
