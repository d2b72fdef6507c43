"""manaka.torch.Network with the value head's hidden layer (ModelConfig.value_hidden = Hv):
z = value.weight . relu(value_hidden.weight x + value_hidden.bias) + value.bias, against
mk.Model (forward, loss and its parts, every gradient, 20 AdamW steps of mk.Trainer) and
against NumPy in float64 (the value logit and its gradients); over a trunk and over the
features themselves (hidden = ()), alone and over every other term; the two tensors' names,
shapes, order, initialisation and decay, both ways; Hv = 0 unchanged."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed: pip install torch (manaka[torch])")

import manaka as mk  # noqa: E402
import manaka.torch as mkt  # noqa: E402
import model_cases as cases  # noqa: E402
import network_checks as checks  # noqa: E402

VH = ("value_hidden.weight", "value_hidden.bias")
# every other term: 2 move kinds of 36 moves in C = 12 classes on a 3 x 2 board of 1 token
# kind, MoveHidden of 3 units with its gate, the shared rows
ALL = dict(num_moves=72, move_pairs=12, board=(3, 2, 1), move_hidden=3, move_shared=1, move_hidden_gate=1,
           move_kinds=2)

# (hidden, value_hidden, other terms): over one and two trunk layers, over the features
# (no trunk: x_n = x_0, whose entries take both signs), one unit, and over every other term
# and over the power sums alone (value_power_sums: not the trunk's output, not the pair sums)
POWER_SUMS = dict(value_power_sums=1)
CASES = [((8,), 5, {}), ((8, 6), 3, {}), ((), 4, {}), ((8,), 1, {}), ((8,), 6, ALL), ((), 3, ALL),
         ((8,), 5, POWER_SUMS), ((8, 6), 4, {**ALL, **POWER_SUMS}), ((), 3, POWER_SUMS)]
IDS = ["trunk1-Hv5", "trunk2-Hv3", "features-Hv4", "trunk1-Hv1", "trunk1-Hv6-all", "features-Hv3-all",
       "power-sums-trunk1-Hv5", "power-sums-trunk2-Hv4-all", "power-sums-features-Hv3"]


def value_x(net, tokens):
    """What the value head reads: the trunk's output, or the power sums."""
    f = net.features(tokens)
    return net.value_input(f, net.body(f))


def rel(got, want):
    got, want = np.float64(got), np.float64(want)
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


def _case(hidden, value_hidden, terms, seed, B=9, L=10):
    """A Network with the value head's layer, the mk.Model it came from (every table that
    starts at 0 random; value_hidden.bias, 0 at the start, set so that every unit's ReLU
    cuts 3 or more positions and keeps 3 or more, none near its kink), and a batch (soft targets for an odd seed) of results mostly 1, so that
    the value head's gradients do not nearly cancel."""
    cfg = cases.config(hidden=hidden, value_hidden=value_hidden, **terms)
    model = cases.model(cfg, seed=seed)
    b = cases.batch(cfg, B=B, L=L, seed=seed, soft=bool(seed % 2))
    b.value[:] = 1.0
    b.value[1:3] = (0.0, 0.5)
    state = model.state_dict()
    assert not state["value_hidden.bias"].any()  # 0 at the start
    net = mkt.Network.from_model(model)
    with torch.no_grad():
        pre = net.value_hidden(value_x(net, mkt.batch_tensors(b)["tokens"])).numpy()
    # per unit, the widest gap between its sorted pre-activations with 3 or more on each
    # side: the bias puts its middle at 0, away from ReLU's kink at every position
    sorted_pre = np.sort(pre, axis=0)
    gaps = sorted_pre[3:B - 2] - sorted_pre[2:B - 3]                      # splits 3 .. B - 3
    k = np.argmax(gaps, axis=0) + 2
    cols = np.arange(value_hidden)
    state["value_hidden.bias"] = (-(sorted_pre[k, cols] + sorted_pre[k + 1, cols]) / 2).astype(np.float32)
    model.load_state_dict(state)
    return mkt.Network.from_model(model), model, b


@pytest.mark.parametrize("hidden, value_hidden, terms", CASES, ids=IDS)
@pytest.mark.parametrize("seed", [0, 1], ids=["hard", "soft"])
def test_value_hidden_forward_and_gradients_equal_model_and_reference(hidden, value_hidden, terms, seed):
    net, model, b = _case(hidden, value_hidden, terms, seed)
    tens = mkt.batch_tensors(b)
    args = (tens["tokens"], tens["legal"], tens["counts"])
    logits, value = net(*args)
    want_logits, want_value = model.forward(b)
    assert rel(logits.detach(), want_logits) < 1e-5 and rel(value.detach(), want_value) < 1e-5

    # the value logit against NumPy in float64, from the same input (trunk output or power sums)
    x = value_x(net, tens["tokens"]).detach().requires_grad_()
    if terms.get("value_power_sums"):
        K, D = model.config.orders, model.config.embed_dim
        assert x.shape == (len(b), 2 * K * D)
        f = net.features(tens["tokens"]).detach().reshape(len(b), 2, -1)
        assert torch.equal(x, f[:, :, :K * D].reshape(len(b), -1))
    z = net.value_logit(x)
    X, Wh, bh, w, c = (np.float64(t.detach().numpy()) for t in (x, net.value_hidden.weight, net.value_hidden.bias,
                                                                 net.value.weight, net.value.bias))
    assert Wh.shape == (value_hidden, X.shape[1]) and w.shape == (1, value_hidden)
    pre = X @ Wh.T + bh                                                  # [B, Hv]
    assert ((pre > 0.01).sum(0) >= 3).all() and ((pre < -0.01).sum(0) >= 3).all()  # each unit cut at some positions
    vh = np.maximum(pre, 0)
    want_z = vh @ w[0] + c[0]
    assert rel(z.detach(), want_z) < 1e-5
    np.testing.assert_allclose(value.detach().numpy(), 1 / (1 + np.exp(-want_z)), rtol=1e-5, atol=1e-6)
    # without the ReLU the logit would differ: the layer is not linear here
    assert np.abs((pre @ w[0] + c[0]) - want_z).max() > 1e-2

    # its gradients into x and the value head's four tensors, for a random upstream gradient
    U = np.random.default_rng(seed).normal(size=z.shape)
    wrt = (x, net.value_hidden.weight, net.value_hidden.bias, net.value.weight, net.value.bias)
    got = torch.autograd.grad(z, wrt, torch.from_numpy(U.astype(np.float32)))
    dvh = np.outer(U, w[0]) * (pre > 0)                                 # [B, Hv]
    want = (dvh @ Wh, dvh.T @ X, dvh.sum(0), (U @ vh)[None, :], np.array([U.sum()]))
    for name, g, wg in zip(("x", *VH, "value.weight", "value.bias"), got, want):
        assert np.abs(wg).max() > 1e-3 and rel(g, wg) < 1e-5, name

    # the whole loss and every gradient against mk.Model's
    losses = net.losses(**tens, value_weight=0.7)
    losses.loss.backward()
    stats, grads = model.loss_and_grad(b, value_weight=0.7)
    for name in ("loss", "policy_loss", "value_loss", "accuracy"):
        assert float(getattr(losses, name).detach()) == pytest.approx(stats[name], rel=1e-5, abs=1e-7), name
    params = dict(net.named_parameters())
    assert set(params) == set(grads) and set(VH) <= set(params)
    for name, g in grads.items():
        assert rel(params[name].grad, g) < 1e-4, name
    assert all(np.abs(grads[name]).max() > 1e-4 for name in VH)


def test_value_hidden_goes_both_ways_comes_last_and_bias_is_not_decayed():
    net, model, b = _case((8,), 6, ALL, 3)
    names = list(model.shapes)
    assert names[-3:] == ["move_kind_table", *VH]                       # after the kind table
    assert model.shapes["value_hidden.weight"] == tuple(net.value_hidden.weight.shape) == (6, 8)
    assert model.shapes["value_hidden.bias"] == tuple(net.value_hidden.bias.shape) == (6,)
    assert model.shapes["value.weight"] == tuple(net.value.weight.shape) == (1, 6)
    assert set(net.state_dict()) == set(names) and list(net.state_dict())[-2:] == list(VH)
    # the Linear layers' tensors (after the Network's own) in mk.Model's order
    assert [n for n in net.state_dict() if "." in n] == [n for n in names if "." in n]
    back = mkt.Network.from_model(model)
    for name, p in net.state_dict().items():
        np.testing.assert_array_equal(model.state_dict()[name], p.numpy(), err_msg=name)
        np.testing.assert_array_equal(back.state_dict()[name].numpy(), p.numpy(), err_msg=name)
    with torch.no_grad():
        net.value_hidden.weight.mul_(1.5)
        net.value_hidden.bias.add_(0.25)
    again = net.to_model()
    for name in VH:
        np.testing.assert_array_equal(again.state_dict()[name], net.state_dict()[name].numpy(), err_msg=name)
    assert float(net.loss(**mkt.batch_tensors(b)).detach()) == pytest.approx(again.loss_and_grad(b)[0]["loss"], rel=1e-5)

    decayed, undecayed = mkt.param_groups(net, 0.05)
    assert any(p is net.value_hidden.weight for p in decayed["params"])
    assert any(p is net.value_hidden.bias for p in undecayed["params"])
    assert not any(p is net.value_hidden.bias for p in decayed["params"])

    half = mkt.Network.from_model(model).to(torch.bfloat16)
    tens = mkt.batch_tensors(b)
    value = half(tens["tokens"], tens["legal"], tens["counts"])[1]
    assert half.value_hidden.weight.dtype == value.dtype == torch.bfloat16
    assert rel(value.float().detach(), model.forward(b)[1]) < 0.05


@pytest.mark.parametrize("hidden", [(256,), ()], ids=["trunk", "features"])
def test_a_new_network_starts_as_model_he_initialised_bias_zero(hidden):
    """value_hidden.weight: uniform of std sqrt(2 / H_n) (He, for the ReLU), bias 0; the
    whole network equals mk.Model(cfg, seed)'s."""
    cfg = cases.config(hidden=hidden, value_hidden=64, D=8, orders=4, pair_dim=8)
    net, model = mkt.Network(cfg, seed=5), mk.Model(cfg, seed=5)
    for name, arr in model.state_dict().items():
        np.testing.assert_array_equal(net.state_dict()[name].numpy(), arr, err_msg=name)
    H = hidden[0] if hidden else cfg.num_features
    weight = net.value_hidden.weight.detach().numpy()
    assert weight.shape == (64, H)
    std = np.sqrt(2 / H)
    assert abs(weight.std() / std - 1) < 0.06 and abs(weight.mean()) < 0.05 * std
    assert np.abs(weight).max() <= np.sqrt(3) * std * (1 + 1e-6)   # uniform on [-sqrt(3) std, sqrt(3) std]
    assert np.abs(weight).max() > 0.95 * np.sqrt(3) * std
    assert torch.count_nonzero(net.value_hidden.bias) == 0


def test_value_hidden_zero_is_the_network_without_it():
    """Hv = 0 has no value_hidden and value.weight [1, H_n]; and a layer of Hv = H_n units
    with the identity weight and bias 0 over a trunk (whose output is >= 0, so the ReLU
    keeps it) computes that network's value exactly."""
    plain_cfg = cases.config(hidden=(8,), **ALL)
    cfg = cases.config(hidden=(8,), value_hidden=8, **ALL)
    plain, net = mkt.Network(plain_cfg, seed=4), mkt.Network(cfg, seed=4)
    assert not hasattr(plain, "value_hidden") and tuple(plain.value.weight.shape) == (1, 8)
    assert list(plain.state_dict()) == [n for n in net.state_dict() if n not in VH]
    assert set(plain.state_dict()) == set(mk.model.expected_shapes(plain_cfg))
    state = dict(plain.state_dict())
    with torch.no_grad():
        state["value.weight"] = torch.randn(1, 8)
        state["value.bias"] = torch.randn(1)
        plain.load_state_dict(state)
        net.load_state_dict({**state, "value_hidden.weight": torch.eye(8), "value_hidden.bias": torch.zeros(8)})
    b = cases.batch(cfg, B=7, L=10, seed=2)
    tens = mkt.batch_tensors(b)
    args = (tens["tokens"], tens["legal"], tens["counts"])
    want_logits, want_value = plain(*args)
    got_logits, got_value = net(*args)
    torch.testing.assert_close(got_logits, want_logits, rtol=0, atol=0)
    torch.testing.assert_close(got_value, want_value, rtol=1e-6, atol=1e-7)
    assert float(want_value.detach().std()) > 1e-3
    # and mk.Model's, whose layer's output is the same
    np.testing.assert_allclose(net.to_model().forward(b)[1], want_value.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("hidden, value_hidden, terms", [((8, 6), 4, {}), ((), 3, {}), ((8,), 5, ALL)],
                         ids=["trunk2-Hv4", "features-Hv3", "trunk1-Hv5-all"])
@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
def test_twenty_adamw_steps_track_trainer(soft, hidden, value_hidden, terms):
    net, model, b = _case(hidden, value_hidden, terms, int(soft))
    trainer = mk.Trainer(model, lr=1e-2, weight_decay=0.05)
    opt = torch.optim.AdamW(mkt.param_groups(net, 0.05), lr=1e-2, betas=(0.9, 0.999), eps=1e-8)
    tens = mkt.batch_tensors(b)
    start = {name: net.state_dict()[name].clone() for name in VH}
    for step in range(20):
        opt.zero_grad()
        loss = net.loss(**tens)
        loss.backward()
        opt.step()
        assert trainer.step(b).loss == pytest.approx(loss.item(), rel=1e-4), step
    for name, arr in trainer.model.state_dict().items():
        assert cases.rel_err(net.state_dict()[name].numpy(), arr) < 1e-4, name
    for name in VH:  # the layer trained
        assert (net.state_dict()[name] - start[name]).abs().max() > 1e-3, name


def test_value_hidden_under_cpu_autocast_bf16_is_near_float32():
    net, _, b = _case((8,), 6, ALL, 1)
    checks.assert_autocast_near_float32(net, b, (*VH, "value.weight"), logits=False)
