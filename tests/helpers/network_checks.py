"""Checks shared by the manaka.torch Network tests (tests/torch/): a Network against the
mk.Model it came from (names, order, round trip, a fresh start), and CPU bfloat16 autocast
against float32."""
import numpy as np
import pytest
import torch

import manaka as mk
import manaka.torch as mkt


def assert_round_trip(net, model, b, name, value):
    """`net` holds `model`'s tensors under mk.Model's names (its own before the Linear
    layers', in mk.Model's order), both ways, `name`'s tensor equal to `value` after
    to_model, and the same loss on batch `b`."""
    assert set(net.state_dict()) == set(model.shapes)
    assert [n for n in net.state_dict() if "." not in n] == [n for n in model.shapes if "." not in n]
    back = mkt.Network.from_model(model)
    for key, p in net.state_dict().items():
        np.testing.assert_array_equal(model.state_dict()[key], p.numpy(), err_msg=key)
        np.testing.assert_array_equal(back.state_dict()[key].numpy(), p.numpy(), err_msg=key)
    np.testing.assert_array_equal(net.to_model().state_dict()[name], value)
    assert float(back.loss(**mkt.batch_tensors(b))) == pytest.approx(model.loss_and_grad(b)[0]["loss"], rel=1e-5)


def fresh_pair(cfg, seed=5):
    """(Network, mk.Model) of `cfg` from one seed, asserted to start with the same tensors."""
    net, model = mkt.Network(cfg, seed=seed), mk.Model(cfg, seed=seed)
    for key in model.shapes:
        np.testing.assert_array_equal(net.state_dict()[key].numpy(), model.state_dict()[key])
    return net, model


def assert_autocast_near_float32(net, b, names, logits=True):
    """Under CPU bfloat16 autocast the loss (and the logits, when `logits`) stay float32, the
    loss within 2 % of float32's, and the gradients of the parameters `names` float32 and
    within 5 % (norm) of float32's."""
    tens = mkt.batch_tensors(b)
    want = net.loss(**tens)
    want.backward()
    grads = {n: p.grad.clone() for n, p in net.named_parameters()}
    net.zero_grad()
    with torch.autocast("cpu", torch.bfloat16):
        if logits:
            out, _ = net.logits(tens["tokens"], tens["legal"], tens["counts"])
            assert out.dtype == torch.float32
        got = net.loss(**tens)
    assert got.dtype == torch.float32
    assert abs(got.item() - want.item()) <= 2e-2 * abs(want.item())
    got.backward()
    for name in names:
        g = net.get_parameter(name).grad
        assert g.dtype == torch.float32, name
        assert float((g - grads[name]).norm()) <= 5e-2 * float(grads[name].norm()), name
