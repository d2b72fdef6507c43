"""manaka.torch.Network against manaka.Model on the same parameters and batch: forward,
loss and its parts, every gradient; parameters both ways (from_model / to_model); and 20
steps of torch.optim.AdamW with mk.Trainer's hyper-parameters tracking mk.Trainer."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed: pip install torch (manaka[torch])")

import manaka as mk  # noqa: E402
import manaka.torch as mkt  # noqa: E402
import model_cases as cases  # noqa: E402


def rel(got, want):
    got, want = np.float64(got), np.float64(want)
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
@pytest.mark.parametrize("hidden", [(12,), (8, 6), ()], ids=str)
def test_forward_loss_and_gradients_equal_model(hidden, soft):
    cfg = cases.config(hidden=hidden)
    b = cases.batch(cfg, B=7, L=10, seed=len(hidden), soft=soft)
    model = mk.Model(cfg, seed=4)
    net = mkt.Network.from_model(model)
    tens = mkt.batch_tensors(b)

    logits, value = net(tens["tokens"], tens["legal"], tens["counts"])
    want_logits, want_value = model.forward(b)
    assert rel(logits.detach(), want_logits) < 1e-5 and rel(value.detach(), want_value) < 1e-5

    losses = net.losses(**tens, value_weight=0.7)
    losses.loss.backward()
    stats, grads = model.loss_and_grad(b, value_weight=0.7)
    for name in ("loss", "policy_loss", "value_loss", "accuracy"):
        assert float(getattr(losses, name).detach()) == pytest.approx(stats[name], rel=1e-5, abs=1e-7), name
    assert float(net.loss(**tens, value_weight=0.7)) == pytest.approx(stats["loss"], rel=1e-5)
    params = dict(net.named_parameters())
    assert set(params) == set(grads)
    for name, g in grads.items():
        assert rel(params[name].grad, g) < 1e-4, name


def test_new_network_is_initialised_as_model_and_parameters_go_both_ways():
    cfg = cases.config(hidden=(8, 6))
    net = mkt.Network(cfg, seed=9)
    for name, arr in mk.Model(cfg, seed=9).state_dict().items():
        np.testing.assert_array_equal(net.state_dict()[name].numpy(), arr, err_msg=name)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn_like(p))  # trained-looking parameters, not the initial ones
    model = net.to_model()
    back = mkt.Network.from_model(model)
    for name, p in net.state_dict().items():
        np.testing.assert_array_equal(model.state_dict()[name], p.numpy(), err_msg=name)
        np.testing.assert_array_equal(back.state_dict()[name].numpy(), p.numpy(), err_msg=name)
    b = cases.batch(cfg)
    assert float(back.loss(**mkt.batch_tensors(b))) == pytest.approx(model.loss_and_grad(b)[0]["loss"], rel=1e-5)


def test_to_model_refuses_parameters_manaka_has_no_place_for():
    class WithExtra(mkt.Network):
        def __init__(self, cfg, seed=0):
            super().__init__(cfg, seed)
            self.extra = torch.nn.Linear(3, 3)

    net = WithExtra(cases.config())
    with pytest.raises(KeyError, match="extra.weight"):
        net.to_model()
    model = net.to_model(strict=False)
    np.testing.assert_array_equal(model.state_dict()["embedding"], net.embedding.detach().numpy())
    assert isinstance(mkt.Network.from_model(model), mkt.Network)
    assert isinstance(WithExtra.from_model(model), WithExtra)


def test_bad_arguments():
    with pytest.raises(TypeError, match="config must be a manaka.ModelConfig"):
        mkt.Network({"num_tokens": 3})
    with pytest.raises(TypeError, match="model must be a manaka.Model"):
        mkt.Network.from_model("model.mk")


@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
def test_twenty_adamw_steps_track_trainer(soft):
    cfg = cases.config(hidden=(8, 6))
    b = cases.batch(cfg, soft=soft)
    trainer = mk.Trainer(mk.Model(cfg, seed=1), lr=1e-2, weight_decay=0.05)
    net = mkt.Network.from_model(trainer.model)
    opt = torch.optim.AdamW(mkt.param_groups(net, 0.05), lr=1e-2, betas=(0.9, 0.999), eps=1e-8)
    tens = mkt.batch_tensors(b)
    for step in range(20):
        opt.zero_grad()
        loss = net.loss(**tens)
        loss.backward()
        opt.step()
        assert trainer.step(b).loss == pytest.approx(float(loss), rel=1e-4), step
    for name, arr in trainer.model.state_dict().items():
        assert cases.rel_err(net.state_dict()[name].numpy(), arr) < 1e-4, name
