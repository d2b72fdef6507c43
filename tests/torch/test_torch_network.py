"""manaka.torch.Network against manaka.Model on the same parameters and batch: forward,
loss and its parts, every gradient; parameters both ways (from_model / to_model); and 20
steps of torch.optim.AdamW with mk.Trainer's hyper-parameters tracking mk.Trainer."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed: pip install torch (manaka[torch])")

import manaka as mk  # noqa: E402
import manaka.torch as mkt  # noqa: E402
import model_cases as cases
import network_checks as checks  # noqa: E402


def rel(got, want):
    got, want = np.float64(got), np.float64(want)
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


def backward_both(net, model, tens, b):
    """The network's loss (value weight 0.7) backward, and mk.Model's loss_and_grad on the
    same batch: the four stats must agree; (mk.Model's stats, its gradients)."""
    losses = net.losses(**tens, value_weight=0.7)
    losses.loss.backward()
    stats, grads = model.loss_and_grad(b, value_weight=0.7)
    for name in ("loss", "policy_loss", "value_loss", "accuracy"):
        assert float(getattr(losses, name).detach()) == pytest.approx(stats[name], rel=1e-5, abs=1e-7), name
    return stats, grads


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

    stats, grads = backward_both(net, model, tens, b)
    assert float(net.loss(**tens, value_weight=0.7).detach()) == pytest.approx(stats["loss"], rel=1e-5)
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


@pytest.mark.parametrize("change, error, message", [
    (dict(move_hidden=3), ValueError, "ModelConfig: move_hidden = 3 needs the relative move pairs"),  # no board
    (dict(value_hidden=2**40), ValueError, f"ModelConfig: value_hidden = {2**40} is above 2^31 - 1"),
    (dict(embed_dim=2**62), ValueError, f"ModelConfig: embed_dim = {2**62} is above 2^31 - 1"),
    (dict(move_kinds=5), ValueError, "ModelConfig: move_kinds = F needs num_moves = M a multiple of F"),
    (dict(num_tokens=2**20, pair_dim=2**12), MemoryError, "cannot allocate"),  # 2^51 bytes of pair table
])
def test_a_config_the_model_refuses_is_refused_in_its_words_before_any_tensor(change, error, message):
    # the tensors were made first, from fields no rule had checked: an UnboundLocalError
    # (MoveHidden without a board), or torch's RuntimeError for a size C refuses
    cfg = mk.ModelConfig(**{**dict(num_tokens=11, num_moves=12, tokens_per_side=4, embed_dim=4, orders=2, pair_dim=2,
                                   hidden=(8,), head_width=4), **change})
    with pytest.raises(error) as info:
        mk.Model(cfg)
    assert message in str(info.value)
    with pytest.raises(error) as info:
        mkt.Network(cfg)
    assert message in str(info.value)


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


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_to_model_of_a_network_in_another_float_dtype_holds_its_values_as_float32(dtype):
    """A bfloat16 network's to_model() raised NumPy's "Got unsupported ScalarType BFloat16"."""
    net = mkt.Network(cases.config(), seed=0).to(dtype)
    model = net.to_model()
    for name, t in net.state_dict().items():
        assert np.array_equal(model.state_dict()[name], t.to(torch.float32).numpy()), name


@pytest.mark.parametrize("spoil", ["missing", "unexpected", "shape"])
def test_load_state_dict_that_fails_leaves_the_network_as_it_was(spoil):
    """torch's load_state_dict copies the tensors it can before raising; Network's restores
    them, so a state of another model size or with a key too few changes nothing."""
    net = mkt.Network(cases.config(), seed=0)
    before = {name: t.clone() for name, t in net.state_dict().items()}
    state = {name: t + 1 for name, t in before.items()}  # every tensor different
    if spoil == "missing":
        del state["value.bias"]
    elif spoil == "unexpected":
        state["extra"] = torch.zeros(1)
    else:
        state["value.bias"] = torch.zeros(2)
    with pytest.raises(RuntimeError, match="Error"):
        net.load_state_dict(state)
    for name, t in net.state_dict().items():
        assert torch.equal(t, before[name]), name
    if spoil != "shape":  # what torch allows with strict=False is still loaded
        net.load_state_dict(state, strict=False)
        assert torch.equal(net.embedding, before["embedding"] + 1)


def test_bad_arguments():
    with pytest.raises(TypeError, match="config must be a manaka.ModelConfig"):
        mkt.Network({"num_tokens": 3})
    with pytest.raises(TypeError, match="model must be a manaka.Model"):
        mkt.Network.from_model("model.mk")
    with pytest.raises(TypeError, match="batch_tensors: batch must be a manaka.Batch, got NoneType"):
        mkt.batch_tensors(None)  # an AttributeError about 'tokens'
    tensors = mkt.batch_tensors(cases.batch(cases.config()))
    with pytest.raises(TypeError, match="check_batch: config must be a manaka.ModelConfig, got NoneType"):
        mkt.check_batch(None, **tensors)  # an AttributeError about 'num_tokens'


# (move_pairs, board, move_hidden, move_shared, move_hidden_gate, move_kinds): no table, a
# table, a table with a relative part (2 x 2 board, 2 kinds), with MoveHidden of 3 units over
# it, with the shared move embeddings (C = 5 classes of 15 moves: 3 groups; then all four
# terms, C = 8 of 24 moves), MoveHidden's gated readout (without and with the shared rows),
# and move kinds (3 kinds of 15 moves in C = 5 classes; then 2 kinds of 24 moves, C = 8,
# over every other term). Twenty steps amplify rounding where a trunk unit's pre-activation
# passes within ~1e-6 of ReLU's kink (C = 4 of 12 moves with 3 kinds, soft, does: 9e-2 at
# the end, while both sides' gradients at the same parameters agree to 6e-7); these do not.
PAIR_CASES = [(0, (0, 0, 0), 0, 0, 0, 0), (5, (0, 0, 0), 0, 0, 0, 0), (8, (2, 2, 2), 0, 0, 0, 0),
              (8, (2, 2, 2), 3, 0, 0, 0), (5, (0, 0, 0), 0, 1, 0, 0), (8, (2, 2, 2), 3, 1, 0, 0),
              (8, (2, 2, 2), 3, 0, 1, 0), (8, (2, 2, 2), 3, 1, 1, 0), (5, (0, 0, 0), 0, 0, 0, 3),
              (8, (2, 2, 2), 3, 1, 1, 2)]


@pytest.mark.parametrize("move_pairs, board, move_hidden, move_shared, move_hidden_gate, move_kinds", PAIR_CASES,
                         ids=["no-table", "C5", "C8-relative", "C8-relative-hidden3", "C5-shared",
                              "C8-relative-hidden3-shared", "C8-relative-hidden3-gate",
                              "C8-relative-hidden3-shared-gate", "C5-kinds3", "C8-relative-hidden3-shared-gate-kinds2"])
@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
def test_twenty_adamw_steps_track_trainer(soft, move_pairs, board, move_hidden, move_shared, move_hidden_gate,
                                          move_kinds):
    # a multiple of C (of C F with kinds: R = 3 C rows)
    num_moves = 3 * move_pairs * move_kinds if move_kinds else 3 * move_pairs if move_shared else 17
    cfg = cases.config(hidden=(8, 6), num_moves=num_moves, move_pairs=move_pairs, board=board,
                       move_hidden=move_hidden, move_shared=move_shared, move_hidden_gate=move_hidden_gate,
                       move_kinds=move_kinds)
    b = cases.batch(cfg, soft=soft)
    # random move-pair tables, move_hidden_out, shared move rows, gate and kind table (they start at 0)
    trainer = mk.Trainer(cases.model(cfg, seed=1), lr=1e-2, weight_decay=0.05)
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


def _corrupt(cfg, kind, seed):
    """A batch mk.Model refuses: one field spoiled at a random row (tensors, as batch_tensors gives)."""
    rng = np.random.default_rng(seed)
    b = cases.batch(cfg, B=6, L=9, seed=seed, soft=kind.startswith("soft"))
    t = {k: (None if v is None else v.clone()) for k, v in mkt.batch_tensors(b).items()}
    r = int(rng.integers(6))
    if kind == "value":  # a result outside [0, 1]: the BCE still returns a finite number
        t["value"][r] = float(rng.choice([3.0, -0.5, 1.5]))
    elif kind == "value_nan":
        t["value"][r] = float("nan")
    elif kind == "target_in_padding":  # the padded slot's logit is -inf: loss inf
        t["target"][r] = t["counts"][r]
    elif kind == "count_zero":
        t["counts"][r] = 0
        t["target"][r] = 0
    elif kind == "token":
        t["tokens"][r, 1, int(rng.integers(cfg.tokens_per_side))] = cfg.num_tokens
    elif kind == "tokens_per_side":
        t["tokens"] = t["tokens"][:, :, :-1].contiguous()
    elif kind == "soft_sum":
        t["policy_target"][r] *= 2
    elif kind == "soft_negative":
        t["policy_target"][r, 0] = -0.25
        t["policy_target"][r, 1] += 0.25
    return t


@pytest.mark.parametrize("kind", ["value", "value_nan", "target_in_padding", "count_zero", "token",
                                  "tokens_per_side", "soft_sum", "soft_negative"])
def test_loss_refuses_what_the_model_refuses_in_its_words(kind):
    cfg = cases.config()
    seed = int(np.random.SeedSequence().entropy % 10_000)
    t = _corrupt(cfg, kind, seed)
    batch = mk.Batch(*(None if v is None else v.numpy() for v in t.values()))
    with pytest.raises(Exception) as want:
        mk.Model(cfg).loss_and_grad(batch)
    net = mkt.Network(cfg)
    for call in (net.loss, net.losses):
        with pytest.raises(type(want.value)) as got:
            call(**t)
        assert str(got.value) == str(want.value).replace("Model.loss_and_grad", "Network.loss"), kind
    mkt.check_batch(cfg, **cases_tensors(cfg, seed))  # a good batch passes


def cases_tensors(cfg, seed):
    return mkt.batch_tensors(cases.batch(cfg, B=6, L=9, seed=seed))


def test_loss_check_can_be_skipped_and_reads_values_of_any_float_dtype():
    cfg = cases.config()
    t = _corrupt(cfg, "target_in_padding", 3)
    assert float(mkt.Network(cfg).loss(**t, check=False)) == float("inf")  # what the check prevents
    good = cases_tensors(cfg, 4)
    net = mkt.Network(cfg)
    want = float(net.loss(**good))
    as64 = dict(good, value=good["value"].double(), target=good["target"].long())
    assert float(net.loss(**as64)) == want
    with pytest.raises(TypeError, match="Network.loss: value must be a torch.Tensor"):
        net.loss(**dict(good, value=good["value"].numpy()))


def test_compiled_loss_keeps_the_check():
    cfg = cases.config()
    net = mkt.Network(cfg)
    compiled = torch.compile(net.loss, fullgraph=True)
    good = cases_tensors(cfg, 5)
    assert float(compiled(**good)) == pytest.approx(float(net.loss(**good)), rel=1e-5)
    with pytest.raises(ValueError, match=r"Network.loss: value\[\d\] = 3 must be finite and in \[0, 1\]"):
        compiled(**dict(good, value=torch.where(torch.arange(6) == 2, 3.0, good["value"])))


def _forward_equals_model(net, model, b):
    """Asserts net's logits and values equal model's on b (0 at padded slots); returns
    (b's tensors, the padded-slot mask [B, 10])."""
    tens = mkt.batch_tensors(b)
    logits, value = net(tens["tokens"], tens["legal"], tens["counts"])
    want_logits, want_value = model.forward(b)
    assert rel(logits.detach(), want_logits) < 1e-5 and rel(value.detach(), want_value) < 1e-5
    padded = np.arange(10)[None, :] >= b.counts[:, None]
    assert np.all(logits.detach().numpy()[padded] == 0)
    return tens, padded


def _with_move_pairs(cfg, seed):
    """A Network of `cfg` (move_pairs > 0) whose move_pair_table and move_pair_relative (if
    any) are random and nonzero (set through load_state_dict), the mk.Model holding its
    parameters, and a batch whose second position has no token for the side to move (and
    some padded legal slots)."""
    net = mkt.Network(cfg, seed=seed)
    rng = np.random.default_rng(seed)
    state = net.state_dict()
    for name in ("move_pair_table", "move_pair_relative"):
        if name in state:
            assert torch.count_nonzero(state[name]) == 0  # initialised to 0, as mk.Model's
            state[name] = torch.from_numpy(rng.normal(0, 0.7, tuple(state[name].shape)).astype(np.float32))
    net.load_state_dict(state)
    b = cases.batch(cfg, B=7, L=10, seed=seed, soft=bool(seed % 2))
    b.tokens[1, 0] = -1
    assert (b.counts < 10).any() and (b.tokens[:, 0] == -1).any()
    return net, net.to_model(), b


# (move_pairs, (W, H, K) of the relative part): C = 23 > M = 17 has unused classes; with a
# relative part, V = 11 tokens of which the first K W H are board tokens: 8 (3 hand
# tokens), 6 on a 3 x 2 board (W != H; 2 move kinds), and all 11 (1 x 1 board: the
# relative table is a [K, C] table per token kind)
TABLE_CASES = [(1, None), (5, None), (23, None), (8, (2, 2, 2)), (12, (3, 2, 1)), (22, (1, 1, 11))]


@pytest.mark.parametrize("move_pairs, board", TABLE_CASES,
                         ids=lambda c: "C%d" % c if isinstance(c, int) else "" if c is None else "rel%dx%dx%d" % c)
@pytest.mark.parametrize("seed", [0, 1], ids=["hard", "soft"])
def test_move_pair_table_forward_and_gradients_equal_model(move_pairs, board, seed):
    cfg = cases.config(hidden=(8,), move_pairs=move_pairs, board=board or (0, 0, 0))
    net, model, b = _with_move_pairs(cfg, seed)
    tens, padded = _forward_equals_model(net, model, b)
    # the term itself against the NumPy reference: what the table adds to the GatherDot logits
    import reference as ref
    term = net.move_pair_sums(tens["tokens"], tens["legal"], tens["counts"]).detach()
    want_term = ref.move_pair_sums(net.move_pair_table.detach().numpy(), b.tokens[:, 0], b.legal, b.counts)
    assert np.abs(want_term).max() > 0.1 and rel(term, want_term) < 1e-5
    assert np.all(term.numpy()[1][~padded[1]] == 0)  # no side-to-move token: nothing added
    if board:
        relative = net.move_pair_relative_sums(tens["tokens"], tens["legal"], tens["counts"]).detach()
        want_rel = ref.move_pair_relative_sums(net.move_pair_relative.detach().numpy(), b.tokens[:, 0], b.legal,
                                               b.counts, move_pairs, *board)
        assert np.abs(want_rel).max() > 0.1 and rel(relative, want_rel) < 1e-5
        assert np.all(relative.numpy()[padded] == 0) and np.all(relative.numpy()[1] == 0)
        # the batch holds hand tokens (which add nothing) wherever the config has some
        assert (b.tokens[:, 0] >= board[0] * board[1] * board[2]).any() == (board[2] != 11)

    stats, grads = backward_both(net, model, tens, b)
    params = dict(net.named_parameters())
    assert set(params) == set(grads) and "move_pair_table" in params and ("move_pair_relative" in params) == bool(board)
    table_grad = grads.pop("move_pair_table")
    if board:
        relative_grad = grads.pop("move_pair_relative")
        want_grad = ref.move_pair_relative_backward(table_grad, move_pairs, *board)
        assert np.abs(relative_grad).max() > 0.01 and rel(relative_grad, want_grad) < 1e-5  # the model, checked
        assert rel(params["move_pair_relative"].grad, relative_grad) < 1e-4
    for name, g in grads.items():
        assert rel(params[name].grad, g) < 1e-4, name
    if move_pairs == 1:  # one class: the same number added to every legal logit, which the softmax ignores
        assert np.abs(table_grad).max() < 1e-6 and params["move_pair_table"].grad.abs().max() < 1e-6
    else:
        assert np.abs(table_grad).max() > 0.01 and rel(params["move_pair_table"].grad, table_grad) < 1e-4


def test_move_pair_table_goes_both_ways_and_is_decayed():
    cfg = cases.config(hidden=(6,), move_pairs=4)
    net, model, b = _with_move_pairs(cfg, 3)
    assert model.shapes["move_pair_table"] == (cfg.num_tokens, 4) and list(model.shapes)[-1] == "move_pair_table"
    back = mkt.Network.from_model(model)
    for name, p in net.state_dict().items():
        np.testing.assert_array_equal(model.state_dict()[name], p.numpy(), err_msg=name)
        np.testing.assert_array_equal(back.state_dict()[name].numpy(), p.numpy(), err_msg=name)
    decayed, plain = mkt.param_groups(net, 0.05)
    assert any(p is net.move_pair_table for p in decayed["params"])
    assert not any(p is net.move_pair_table for p in plain["params"])
    assert not hasattr(mkt.Network(cases.config(hidden=(6,))), "move_pair_table")  # move_pairs = 0: no table
    assert not hasattr(net, "move_pair_relative")  # board_kinds = 0: no relative part


def test_param_groups_refuses_a_weight_decay_mk_trainer_refuses():
    # torch.optim checks its default weight_decay only, not a group's: NaN (or -1) went into
    # the decayed group and the first step made every decayed parameter NaN
    net = mkt.Network(cases.config(hidden=(6,)))
    for bad in (float("nan"), -1.0, float("inf")):
        with pytest.raises(ValueError, match=r"^param_groups: weight_decay must be finite and >= 0, got "):
            mkt.param_groups(net, bad)
    with pytest.raises(TypeError, match=r"^param_groups: weight_decay must be a real number, got str"):
        mkt.param_groups(net, "0.01")
    with pytest.raises(TypeError, match=r"^param_groups: module must be a torch.nn.Module, got str"):
        mkt.param_groups("net")
    decayed, plain = mkt.param_groups(net, 0)
    assert decayed["weight_decay"] == 0 and plain["weight_decay"] == 0.0


def test_move_pair_relative_goes_both_ways_and_is_decayed():
    cfg = cases.config(hidden=(6,), move_pairs=12, board=(3, 2, 1))
    net, model, b = _with_move_pairs(cfg, 3)
    assert model.shapes["move_pair_relative"] == (5 * 3, 2) == tuple(net.move_pair_relative.shape)
    assert list(model.shapes)[-2:] == ["move_pair_table", "move_pair_relative"]
    # the index buffers are constants of the config, not parameters: no state_dict entry
    assert set(net.state_dict()) == set(model.shapes)
    assert {n for n, _ in net.named_buffers()} == {"relative_token_part", "relative_class_part"}
    back = mkt.Network.from_model(model)
    for name, p in net.state_dict().items():
        np.testing.assert_array_equal(model.state_dict()[name], p.numpy(), err_msg=name)
        np.testing.assert_array_equal(back.state_dict()[name].numpy(), p.numpy(), err_msg=name)
    assert float(back.loss(**mkt.batch_tensors(b))) == pytest.approx(model.loss_and_grad(b)[0]["loss"], rel=1e-5)
    decayed, plain = mkt.param_groups(net, 0.05)
    assert any(p is net.move_pair_relative for p in decayed["params"])
    assert not any(p is net.move_pair_relative for p in plain["params"])
    # the buffers keep int64 when the network changes float dtype
    half = mkt.Network(cfg).to(torch.bfloat16)
    assert half.move_pair_relative.dtype == torch.bfloat16 and half.relative_token_part.dtype == torch.int64


def test_relative_index_parts_are_the_reference_index():
    import reference as ref
    from manaka.move_pair_board import relative_parts
    for cfg in (cases.config(move_pairs=8, board=(2, 2, 2)),
                cases.config(num_tokens=40, move_pairs=24, board=(3, 4, 3)),
                mk.ModelConfig(num_tokens=28 * 81 + 1, num_moves=2187, tokens_per_side=2, move_pairs=2187,
                               board_width=9, board_height=9, board_kinds=28)):
        token_part, class_part = relative_parts(cfg)
        W, H, K, C = cfg.board_width, cfg.board_height, cfg.board_kinds, cfg.move_pairs
        rng = np.random.default_rng(0)
        tokens = np.concatenate([np.arange(min(cfg.num_tokens, 60)), rng.integers(0, cfg.num_tokens, 200)])
        for v in tokens:
            for c in (np.arange(C) if C < 100 else rng.integers(0, C, 30)):
                want = ref.relative_index(int(v), int(c), C, W, H, K)
                got = token_part[v] + class_part[c] if token_part[v] >= 0 else -1
                assert got == want, (cfg, v, c)
        assert (token_part >= 0).sum() == K * W * H




# ------------------------------------------------------------ MoveHidden
MOVE_HIDDEN = ("move_hidden_relative", "move_hidden_class", "move_hidden_out")
GATE = "move_hidden_gate"

# (move_pairs, (W, H, K), move_hidden = D) over TABLE_CASES' relative parts: 2 x 2 with 3 hand
# tokens, 3 x 2 (W != H), 1 x 1 (every token on the board, one unit)
HIDDEN_CASES = [(8, (2, 2, 2), 3), (12, (3, 2, 1), 5), (22, (1, 1, 11), 1)]


def _with_move_hidden(cfg, seed):
    """_with_move_pairs' network, batch and model, with MoveHidden's parameters random too:
    move_hidden_out (0 at the start, as mk.Model's) at scale 1 and the units' rows at a
    scale where the pre-activations take both signs; the gate (if any, 0 at the start too)
    at a scale where q move_hidden_gate is of the order of move_hidden_out."""
    net, _, b = _with_move_pairs(cfg, seed)
    rng = np.random.default_rng(100 + seed)
    state = net.state_dict()
    assert torch.count_nonzero(state["move_hidden_out"]) == 0
    names, scales = MOVE_HIDDEN + ((GATE,) if cfg.move_hidden_gate else ()), (0.4, 0.6, 1.0, 1.0)
    for name, scale in zip(names, scales):
        assert name != GATE or torch.count_nonzero(state[name]) == 0
        state[name] = torch.from_numpy(rng.normal(0, scale, tuple(state[name].shape)).astype(np.float32))
    net.load_state_dict(state)
    return net, net.to_model(), b


@pytest.mark.parametrize("move_pairs, board, move_hidden", HIDDEN_CASES,
                         ids=lambda c: "rel%dx%dx%d" % c if isinstance(c, tuple) else str(c))
@pytest.mark.parametrize("gate", [0, 1], ids=["out", "gated"])
@pytest.mark.parametrize("seed", [0, 1], ids=["hard", "soft"])
def test_move_hidden_forward_and_gradients_equal_model_and_reference(move_pairs, board, move_hidden, gate, seed):
    import reference as ref
    cfg = cases.config(hidden=(8,), move_pairs=move_pairs, board=board, move_hidden=move_hidden,
                       move_hidden_gate=gate)
    net, model, b = _with_move_hidden(cfg, seed)
    tens, padded = _forward_equals_model(net, model, b)

    # the term and its gradients against the NumPy reference, for a random upstream gradient;
    # gated, the readout is a row per position, out + q G (q the policy head's vector)
    params = dict(net.named_parameters())
    relative, class_rows, out = (params[n] for n in MOVE_HIDDEN)
    q = net.policy(net.body(net.features(tens["tokens"])))
    term = net.move_hidden(tens["tokens"], tens["legal"], tens["counts"], q)
    args = (b.tokens[:, 0], b.legal, b.counts, move_pairs, *board)
    rel64, cls64, out64, q64 = (np.float64(t.detach().numpy()) for t in (relative, class_rows, out, q))
    readout = out64 + q64 @ np.float64(params[GATE].detach().numpy()) if gate else out64  # [B, D] or [1, D]
    assert rel(net.move_hidden_readout(q).detach(), readout) < 1e-5
    want_term, pre = ref.move_hidden(rel64, cls64, readout, *args)
    assert np.abs(want_term).max() > 0.1 and rel(term.detach(), want_term) < 1e-5
    assert np.all(term.detach().numpy()[padded] == 0)
    units = pre[~padded]
    assert (units > 0.05).any() and (units < -0.05).any()  # the ReLU both passes and cuts
    if gate:  # the gate matters: out alone reads other numbers
        assert np.abs(ref.move_hidden(rel64, cls64, out64, *args)[0] - want_term)[~padded].max() > 0.1
    G = np.random.default_rng(seed).normal(size=term.shape).astype(np.float32)
    inputs = (relative, class_rows, out) + ((params[GATE], q) if gate else ())
    got = torch.autograd.grad(term, inputs, torch.from_numpy(G))
    want = ref.move_hidden_backward(G, pre, readout if gate else out64[0], *args, relative.shape[0])
    if gate:  # want[2] is each position's readout's gradient [B, D]: out's is its sum, G's q^T it, q's it G^T
        d_readout = want[2]
        want = (want[0], want[1], d_readout.sum(0), q64.T @ d_readout,
                d_readout @ np.float64(params[GATE].detach().numpy()).T)
    for name, g, w in zip(MOVE_HIDDEN + (GATE, "q"), got, want):
        assert np.abs(w).max() > 0.01 and rel(g.reshape(w.shape), w) < 1e-5, name

    # the whole loss and every gradient against mk.Model's
    stats, grads = backward_both(net, model, tens, b)
    assert set(params) == set(grads) and set(MOVE_HIDDEN) <= set(params) and (GATE in params) == bool(gate)
    for name, g in grads.items():
        assert rel(params[name].grad, g) < 1e-4, name
    for name in MOVE_HIDDEN + ((GATE,) if gate else ()):
        assert np.abs(grads[name]).max() > 1e-3, name


def test_move_hidden_goes_both_ways_and_is_decayed():
    cfg = cases.config(hidden=(6,), move_pairs=12, board=(3, 2, 1), move_hidden=4)
    net, model, b = _with_move_hidden(cfg, 3)
    shapes = {"move_hidden_relative": (5 * 3 * 2, 4), "move_hidden_class": (12, 4), "move_hidden_out": (1, 4)}
    assert list(model.shapes)[-5:] == ["move_pair_table", "move_pair_relative", *shapes]
    assert {n: tuple(net.state_dict()[n].shape) for n in shapes} == shapes
    assert {n: model.shapes[n] for n in shapes} == shapes
    assert set(net.state_dict()) == set(model.shapes)  # no index buffer in state_dict
    back = mkt.Network.from_model(model)
    for name, p in net.state_dict().items():
        np.testing.assert_array_equal(model.state_dict()[name], p.numpy(), err_msg=name)
        np.testing.assert_array_equal(back.state_dict()[name].numpy(), p.numpy(), err_msg=name)
    assert float(back.loss(**mkt.batch_tensors(b))) == pytest.approx(model.loss_and_grad(b)[0]["loss"], rel=1e-5)
    # a new Network starts as mk.Model: the units' rows random, move_hidden_out 0
    fresh, fresh_model = mkt.Network(cfg, seed=5), mk.Model(cfg, seed=5)
    for name in shapes:
        np.testing.assert_array_equal(fresh.state_dict()[name].numpy(), fresh_model.state_dict()[name])
    assert torch.count_nonzero(fresh.move_hidden_out) == 0 and torch.count_nonzero(fresh.move_hidden_class) > 0
    decayed, plain = mkt.param_groups(net, 0.05)
    for name in shapes:
        assert any(p is getattr(net, name) for p in decayed["params"]), name
        assert not any(p is getattr(net, name) for p in plain["params"]), name
    half = mkt.Network(cfg).to(torch.bfloat16)
    assert half.move_hidden_relative.dtype == torch.bfloat16 and half.relative_class_part.dtype == torch.int64
    assert not hasattr(mkt.Network(cases.config(move_pairs=12, board=(3, 2, 1))), "move_hidden_out")


def test_move_hidden_saves_no_tensor_of_its_gather_for_backward():
    """The [B, T, L, D] gather is made in forward and again (its gradient) in backward, but
    autograd holds none of that size in between (network.move_hidden_sums' docstring)."""
    cfg = cases.config(hidden=(8,), T=9, move_pairs=12, board=(3, 2, 1), move_hidden=4)
    net, _, b = _with_move_hidden(cfg, 2)
    tens = mkt.batch_tensors(b)
    B, T, L, D = *tens["tokens"][:, 0].shape, tens["legal"].shape[1], 4
    saved = []

    def pack(t):
        saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        term = net.move_hidden(tens["tokens"], tens["legal"], tens["counts"])
    assert saved and max(saved) < B * T * L * D / 2
    term.sum().backward()  # the graph still differentiates
    assert net.move_hidden_relative.grad.abs().max() > 0


@pytest.mark.parametrize("gate", [0, 1], ids=["out", "gated"])
def test_move_hidden_under_cpu_autocast_bf16_is_near_float32(gate):
    cfg = cases.config(hidden=(8,), move_pairs=12, board=(3, 2, 1), move_hidden=4, move_hidden_gate=gate)
    net, _, b = _with_move_hidden(cfg, 1)
    checks.assert_autocast_near_float32(net, b, MOVE_HIDDEN + ((GATE,) if gate else ()))


def test_move_hidden_gate_goes_both_ways_starts_at_zero_and_is_decayed():
    cfg = cases.config(hidden=(6,), num_moves=24, move_pairs=12, board=(3, 2, 1), move_hidden=4, move_shared=1,
                       move_hidden_gate=1)
    net, model, b = _with_move_hidden(cfg, 3)
    assert list(model.shapes)[-3:] == ["move_shared_class", "move_shared_group", GATE]  # the gate last
    assert model.shapes[GATE] == tuple(net.move_hidden_gate.shape) == (7, 4)          # [W, D]
    checks.assert_round_trip(net, model, b, GATE, net.move_hidden_gate.detach().numpy())

    # a new Network starts as mk.Model, the gate 0: the logits of the network without it
    fresh, fresh_model = checks.fresh_pair(cfg)
    assert torch.count_nonzero(fresh.move_hidden_gate) == 0
    plain = mkt.Network(mk.ModelConfig(**{**cfg.to_dict(), "move_hidden_gate": 0}), seed=5)
    with torch.no_grad():
        plain.move_hidden_out.normal_()  # both readouts far from 0, the same
        fresh.move_hidden_out.copy_(plain.move_hidden_out)
    tens = mkt.batch_tensors(b)
    args = (tens["tokens"], tens["legal"], tens["counts"])
    torch.testing.assert_close(fresh(*args)[0], plain(*args)[0], rtol=1e-6, atol=1e-6)
    assert not hasattr(plain, GATE)

    decayed, undecayed = mkt.param_groups(net, 0.05)
    assert any(p is net.move_hidden_gate for p in decayed["params"])
    assert not any(p is net.move_hidden_gate for p in undecayed["params"])
    half = mkt.Network.from_model(model).to(torch.bfloat16)
    logits = half(*args)[0]
    assert half.move_hidden_gate.dtype == logits.dtype == torch.bfloat16
    assert rel(logits.float().detach(), model.forward(b)[0]) < 0.05

    # the gated readout needs q; a readout of another shape is refused
    with pytest.raises(ValueError, match=r"Network.move_hidden: q \(the policy head's vector \[B, W\]\) is needed"):
        net.move_hidden(*args)
    q = net.policy(net.body(net.features(tens["tokens"])))
    for bad in (net.move_hidden_readout(q)[:3], net.move_hidden_out[0], net.move_hidden_readout(q)[:, :3]):
        with pytest.raises(ValueError, match=r"move_hidden_sums: out must be \[1, 4\] or \[7, 4\]"):
            mkt.network.move_hidden_sums(net.move_hidden_relative, net.move_hidden_class, bad, net.relative_token_part,
                                         net.relative_class_part, *args)


# ------------------------------------------------------------ the shared move embeddings
MOVE_SHARED = ("move_shared_class", "move_shared_group")

# (move_pairs = C, num_moves, board, move_hidden): 5 classes of 4 groups; 3 classes of 13 groups
# (more groups than classes); one class (its part the same for every move: the softmax ignores
# it); one group (likewise); and after every other term, C = 8 over a 2 x 2 board with
# MoveHidden, 3 groups
SHARED_CASES = [(5, 20, (0, 0, 0), 0), (3, 39, (0, 0, 0), 0), (1, 17, (0, 0, 0), 0), (17, 17, (0, 0, 0), 0),
                (8, 24, (2, 2, 2), 3)]


def _shared_case(move_pairs, num_moves, board, move_hidden, seed):
    """A Network with the shared move embeddings (and every other table of the config)
    random, far from their start at 0; the mk.Model it came from; a batch with padded slots
    holding -1."""
    cfg = cases.config(hidden=(8,), num_moves=num_moves, move_pairs=move_pairs, board=board,
                       move_hidden=move_hidden, move_shared=1)
    model = cases.model(cfg, seed=seed)  # random move-pair tables, move_hidden_out, shared rows
    net = mkt.Network.from_model(model)
    assert all(torch.count_nonzero(getattr(net, n)) > 0 for n in MOVE_SHARED)
    b = cases.batch(cfg, B=7, L=10, seed=seed, soft=bool(seed % 2))
    assert (b.counts < 10).any() and (b.legal[np.arange(10)[None, :] >= b.counts[:, None]] == -1).all()
    return net, model, b


@pytest.mark.parametrize("move_pairs, num_moves, board, move_hidden", SHARED_CASES,
                         ids=["C5-G4", "C3-G13", "C1", "G1", "C8-G3-relative-hidden3"])
@pytest.mark.parametrize("seed", [0, 1], ids=["hard", "soft"])
def test_move_shared_forward_and_gradients_equal_model_and_reference(move_pairs, num_moves, board, move_hidden,
                                                                      seed):
    import reference as ref
    net, model, b = _shared_case(move_pairs, num_moves, board, move_hidden, seed)
    tens, padded = _forward_equals_model(net, model, b)
    C, G = move_pairs, num_moves // move_pairs

    # the term and its gradients (into q and both tables) against the NumPy reference
    q = net.policy(net.body(net.features(tens["tokens"])))
    classes, groups = net.move_shared_class, net.move_shared_group
    term = net.move_shared(q, tens["legal"], tens["counts"])
    q64, c64, g64 = (np.float64(t.detach().numpy()) for t in (q, classes, groups))
    want_term = ref.move_shared_add(q64 @ c64.T, q64 @ g64.T, b.legal, b.counts, C)
    assert np.abs(want_term).max() > 0.5 and rel(term.detach(), want_term) < 1e-5
    assert np.all(term.detach().numpy()[padded] == 0)
    # both parts are in it: neither alone is the term
    used = ~padded
    for part in (ref.move_shared_add(q64 @ c64.T, np.zeros((7, G)), b.legal, b.counts, C),
                 ref.move_shared_add(np.zeros((7, C)), q64 @ g64.T, b.legal, b.counts, C)):
        assert np.abs(part - want_term)[used].max() > 0.1
    U = np.random.default_rng(seed).normal(size=term.shape)
    got = torch.autograd.grad(term, (q, classes, groups), torch.from_numpy(U.astype(np.float32)))
    dcls, dgrp = ref.move_shared_backward(U, b.legal, b.counts, C, G)
    want = (dcls @ c64 + dgrp @ g64, dcls.T @ q64, dgrp.T @ q64)
    for name, g, w in zip(("q", *MOVE_SHARED), got, want):
        assert np.abs(w).max() > 0.01 and rel(g, w) < 1e-5, name

    # the whole loss and every gradient against mk.Model's
    stats, grads = backward_both(net, model, tens, b)
    params = dict(net.named_parameters())
    assert set(params) == set(grads) and set(MOVE_SHARED) <= set(params)
    # a table read the same for every move of a position (one class, one group) moves no
    # softmax: its gradient is 0 up to rounding, on both sides
    flat = {"move_pair_table", "move_shared_class"} if C == 1 else {"move_shared_group"} if G == 1 else set()
    for name, g in grads.items():
        if name in flat:
            assert np.abs(g).max() < 1e-5 and params[name].grad.abs().max() < 1e-5, name
        else:
            assert rel(params[name].grad, g) < 1e-4, name
    for name in set(MOVE_SHARED) - flat:
        assert np.abs(grads[name]).max() > 1e-3, name


def test_move_shared_goes_both_ways_starts_at_zero_and_is_decayed():
    net, model, b = _shared_case(5, 20, (0, 0, 0), 0, 3)
    shapes = {"move_shared_class": (5, 7), "move_shared_group": (4, 7)}  # [C, W], [M / C, W]
    assert list(model.shapes)[-3:] == ["move_pair_table", *shapes]
    assert {n: tuple(net.state_dict()[n].shape) for n in shapes} == {n: model.shapes[n] for n in shapes} == shapes
    assert set(net.state_dict()) == set(model.shapes)
    own = [n for n in net.state_dict() if n in model.shapes]
    assert own.index("move_shared_class") + 1 == own.index("move_shared_group")  # mk.Model's order
    back = mkt.Network.from_model(model)
    for name, p in net.state_dict().items():
        np.testing.assert_array_equal(model.state_dict()[name], p.numpy(), err_msg=name)
        np.testing.assert_array_equal(back.state_dict()[name].numpy(), p.numpy(), err_msg=name)
    np.testing.assert_array_equal(net.to_model().state_dict()["move_shared_group"],
                                  net.move_shared_group.detach().numpy())
    assert float(back.loss(**mkt.batch_tensors(b))) == pytest.approx(model.loss_and_grad(b)[0]["loss"], rel=1e-5)

    # a new Network starts as mk.Model, both tables 0: the logits of the network without them
    cfg = model.config
    fresh, fresh_model = mkt.Network(cfg, seed=5), mk.Model(cfg, seed=5)
    for name in fresh_model.shapes:
        np.testing.assert_array_equal(fresh.state_dict()[name].numpy(), fresh_model.state_dict()[name])
    assert all(torch.count_nonzero(getattr(fresh, n)) == 0 for n in shapes)
    plain = mkt.Network(mk.ModelConfig(**{**cfg.to_dict(), "move_shared": 0}), seed=5)
    tens = mkt.batch_tensors(b)
    args = (tens["tokens"], tens["legal"], tens["counts"])
    assert torch.equal(fresh(*args)[0], plain(*args)[0])

    decayed, undecayed = mkt.param_groups(net, 0.05)
    for name in shapes:
        assert any(p is getattr(net, name) for p in decayed["params"]), name
        assert not any(p is getattr(net, name) for p in undecayed["params"]), name
    half = mkt.Network.from_model(model).to(torch.bfloat16)
    logits = half(*args)[0]
    assert half.move_shared_group.dtype == logits.dtype == torch.bfloat16
    assert rel(logits.float().detach(), model.forward(b)[0]) < 0.05
    assert not hasattr(plain, "move_shared_class") and not hasattr(plain, "move_shared_group")


# ------------------------------------------------------------ move kinds
KIND = "move_kind_table"

# (move_pairs = C, move_kinds = F, num_moves = M, board, move_hidden, move_shared, gate):
# 3 kinds of 12 moves (R = 12 rows, C = 4); one class (the kind row is the kind); one kind
# (R = M: the term is a second table read at the class); 5 kinds with R = C (kind rows
# x % C + C (x // R) are the labels themselves); and over every other term, C = 12 on a
# 3 x 2 board with MoveHidden of 3 units, its gate and the shared rows, 2 kinds of 36 moves
KIND_CASES = [(4, 3, 36, (0, 0, 0), 0, 0, 0), (1, 4, 20, (0, 0, 0), 0, 0, 0), (4, 1, 12, (0, 0, 0), 0, 0, 0),
              (3, 5, 15, (0, 0, 0), 0, 0, 0), (12, 2, 72, (3, 2, 1), 3, 1, 1), (0, 4, 20, (0, 0, 0), 0, 0, 0)]
KIND_IDS = ["C4-F3", "C1-F4", "C4-F1", "R=C-F5", "C12-F2-relative-hidden3-gate-shared",
            "no-move-pairs-F4"]  # the last: a kind row per kind, as C1-F4 without the move-pair table


def _kinds_case(move_pairs, move_kinds, num_moves, board, move_hidden, move_shared, gate, seed, B=7, L=10):
    """A Network with move kinds whose kind table (and every other table starting at 0) is
    random; the mk.Model it came from; a batch whose labels are drawn from all M (so every
    kind appears), with padded slots holding -1 and a position without a side-to-move token."""
    cfg = cases.config(hidden=(8,), num_moves=num_moves, move_pairs=move_pairs, board=board, move_hidden=move_hidden,
                       move_shared=move_shared, move_hidden_gate=gate, move_kinds=move_kinds)
    model = cases.model(cfg, seed=seed)  # random move-pair tables, shared rows, gate, kind table
    if move_hidden:  # the units' rows at a scale where the pre-activations take both signs
        state = model.state_dict()
        rng = np.random.default_rng(50 + seed)
        for name, scale in (("move_hidden_relative", 0.4), ("move_hidden_class", 0.6)):
            state[name] = rng.normal(0, scale, state[name].shape).astype(np.float32)
        model.load_state_dict(state)
    net = mkt.Network.from_model(model)
    assert torch.count_nonzero(net.move_kind_table) == net.move_kind_table.numel()
    b = cases.batch(cfg, B=B, L=L, seed=seed, soft=bool(seed % 2))
    b.tokens[1, 0] = -1
    used = np.arange(L)[None, :] < b.counts[:, None]
    R = num_moves // move_kinds
    assert set(np.unique(b.legal[used] // R)) == set(range(move_kinds))  # every kind appears
    assert (~used).any() and (b.legal[~used] == -1).all()
    return net, model, b


@pytest.mark.parametrize("move_pairs, move_kinds, num_moves, board, move_hidden, move_shared, gate", KIND_CASES,
                         ids=KIND_IDS)
def test_move_kinds_forward_names_a_label_out_of_range_itself(move_pairs, move_kinds, num_moves, board, move_hidden,
                                                              move_shared, gate):
    # the move table reads l % R: a label >= M or < 0 was reported as the kind row or move it
    # wraps to (label M + 5 as "= 1 is out of range for a table of F rows")
    net, model, b = _kinds_case(move_pairs, move_kinds, num_moves, board, move_hidden, move_shared, gate, 0)
    tens = mkt.batch_tensors(b)
    for label in (num_moves, num_moves + 5, 3 * num_moves + 1, -1, -num_moves - 2):
        legal = tens["legal"].clone()
        legal[2, 1] = label
        with pytest.raises(ValueError, match=rf"\[2, 1\] = {label} is out of range"):
            net(tens["tokens"], legal, tens["counts"])
        with pytest.raises(ValueError, match=rf"legal\[2, 1\] = {label} is out of range"):
            model.forward(mk.Batch(b.tokens, legal.numpy(), b.counts, b.target, b.value))


@pytest.mark.parametrize("move_pairs, move_kinds, num_moves, board, move_hidden, move_shared, gate", KIND_CASES,
                         ids=KIND_IDS)
@pytest.mark.parametrize("seed", [0, 1], ids=["hard", "soft"])
def test_move_kinds_forward_and_gradients_equal_model_and_reference(move_pairs, move_kinds, num_moves, board,
                                                                    move_hidden, move_shared, gate, seed):
    import reference as ref
    net, model, b = _kinds_case(move_pairs, move_kinds, num_moves, board, move_hidden, move_shared, gate, seed)
    tens, padded = _forward_equals_model(net, model, b)
    C, F, R = max(move_pairs, 1), move_kinds, num_moves // move_kinds  # C = 1 without move pairs
    used = ~padded

    # the split is the reference's (0 at padded slots)
    moves, kind_rows = mkt.network.move_kind_split(tens["legal"], tens["counts"], R, C)
    want_moves, want_rows = ref.move_kind_split(b.legal, b.counts, R, C)
    np.testing.assert_array_equal(moves.numpy(), want_moves)
    np.testing.assert_array_equal(kind_rows.numpy(), want_rows)
    assert kind_rows.max() < C * F and (want_moves[used] != b.legal[used]).any() == (F > 1)

    # the policy head reads the move table at x % R, and the kind's term is q . kind_table[x % C + C (x // R)]
    x = net.body(net.features(tens["tokens"]))
    q = net.policy(x)
    q64, table64, kinds64 = (np.float64(t.detach().numpy()) for t in (q, net.move_table, net.move_kind_table))
    heads = net.heads(x, tens["legal"], tens["counts"])[0].detach()
    want_heads = np.where(used, np.einsum("bw,blw->bl", q64, table64[want_moves]), 0)
    assert rel(heads, want_heads) < 1e-5
    term = net.move_kind(q, tens["legal"], tens["counts"])
    want_term = np.where(used, np.einsum("bw,blw->bl", q64, kinds64[want_rows]), 0)
    assert np.abs(want_term).max() > 0.5 and rel(term.detach(), want_term) < 1e-5
    assert np.all(term.detach().numpy()[padded] == 0)
    # its gradients into q and the kind table, for a random upstream gradient
    U = np.random.default_rng(seed).normal(size=term.shape)
    got = torch.autograd.grad(term, (q, net.move_kind_table), torch.from_numpy(U.astype(np.float32)))
    U = np.where(used, U, 0)
    dtable = np.zeros_like(kinds64)
    np.add.at(dtable, want_rows[used], U[used][:, None] * q64[np.nonzero(used)[0]])
    for name, g, w in zip(("q", KIND), got, (np.einsum("bl,blw->bw", U, kinds64[want_rows]), dtable)):
        assert np.abs(w).max() > 0.01 and rel(g, w) < 1e-5, name

    # the whole loss and every gradient against mk.Model's
    stats, grads = backward_both(net, model, tens, b)
    params = dict(net.named_parameters())
    assert set(params) == set(grads) and KIND in params
    assert tuple(params["move_table"].shape) == (R, 7) and tuple(params[KIND].shape) == (C * F, 7)
    # one class (C = 1) adds the same move-pair number to every legal logit: no softmax moves it
    flat = {"move_pair_table"} if C == 1 else set()
    for name, g in grads.items():
        if name in flat:
            assert np.abs(g).max() < 1e-5 and params[name].grad.abs().max() < 1e-5, name
        else:
            assert rel(params[name].grad, g) < 1e-4, name
    assert np.abs(grads[KIND]).max() > 1e-3


def test_move_kinds_go_both_ways_start_at_zero_and_are_decayed():
    net, model, b = _kinds_case(12, 2, 72, (3, 2, 1), 3, 1, 1, 3)
    cfg = model.config
    assert list(model.shapes)[-3:] == ["move_shared_group", "move_hidden_gate", KIND]  # the kind table last
    assert model.shapes[KIND] == tuple(net.move_kind_table.shape) == (24, 7)         # [C F, W]
    assert model.shapes["move_table"] == tuple(net.move_table.shape) == (36, 7)      # [M / F, W]
    checks.assert_round_trip(net, model, b, KIND, net.move_kind_table.detach().numpy())

    # a new Network starts as mk.Model, the kind table 0: the logits of the network without
    # kinds whose move table repeats the R rows F times (row x of it is row x % R)
    fresh, fresh_model = checks.fresh_pair(cfg)
    assert torch.count_nonzero(fresh.move_kind_table) == 0
    plain = mkt.Network(mk.ModelConfig(**{**cfg.to_dict(), "move_kinds": 0}), seed=5)
    assert not hasattr(plain, KIND) and tuple(plain.move_table.shape) == (72, 7)
    state = {n: t for n, t in fresh.state_dict().items() if n != KIND}
    state["move_table"] = state["move_table"].repeat(2, 1)
    plain.load_state_dict(state)
    with torch.no_grad():  # every term of the config away from 0, the same in both
        for name in ("move_pair_table", "move_hidden_out", "move_shared_group", "move_hidden_gate"):
            getattr(plain, name).normal_()
            getattr(fresh, name).copy_(getattr(plain, name))
    tens = mkt.batch_tensors(b)
    args = (tens["tokens"], tens["legal"], tens["counts"])
    torch.testing.assert_close(fresh(*args)[0], plain(*args)[0], rtol=1e-6, atol=1e-6)
    # and a random kind table adds exactly its term
    with torch.no_grad():
        fresh.move_kind_table.normal_()
    q = fresh.policy(fresh.body(fresh.features(tens["tokens"])))
    term = fresh.move_kind(q, *args[1:])
    assert term.abs().max() > 0.5
    torch.testing.assert_close(fresh(*args)[0], plain(*args)[0] + term, rtol=1e-5, atol=1e-5)

    decayed, undecayed = mkt.param_groups(net, 0.05)
    assert any(p is net.move_kind_table for p in decayed["params"])
    assert not any(p is net.move_kind_table for p in undecayed["params"])
    half = mkt.Network.from_model(model).to(torch.bfloat16)
    logits = half(*args)[0]
    assert half.move_kind_table.dtype == logits.dtype == torch.bfloat16
    assert rel(logits.float().detach(), model.forward(b)[0]) < 0.05


def test_move_kinds_under_cpu_autocast_bf16_are_near_float32():
    net, _, b = _kinds_case(12, 2, 72, (3, 2, 1), 3, 1, 1, 1)
    checks.assert_autocast_near_float32(net, b, (KIND, "move_table"))


def test_a_value_weight_the_trainer_refuses_is_refused_by_the_loss_too():
    # Network.loss took NaN (a NaN loss) and -1 (the value head trained away from its
    # targets) where mk.Model.loss_and_grad and mk.Trainer refuse them
    cfg = cases.config(hidden=(8,))
    b = cases.batch(cfg, B=4, L=6, seed=1)
    net, tens = mkt.Network(cfg), mkt.batch_tensors(b)
    for bad, exc in ((float("nan"), ValueError), (-1.0, ValueError), (float("inf"), ValueError), ("1", TypeError),
                     (None, TypeError)):
        with pytest.raises(exc, match="Network.loss: value_weight must be"):
            net.loss(**tens, value_weight=bad)
        with pytest.raises(exc, match="Model.loss_and_grad: value_weight must be"):
            mk.Model(cfg).loss_and_grad(b, value_weight=bad)
    want = float(net.loss(**tens, value_weight=0.5))
    assert float(net.loss(**tens, value_weight=torch.tensor(0.5))) == pytest.approx(want)  # a tensor: as it is
    # traced by torch.compile, with a float that becomes symbolic on the second value: no graph break
    compiled = torch.compile(lambda w: net.loss(**tens, value_weight=w), fullgraph=True, backend="eager")
    for w in (0.5, 0.25, 2.0):
        assert float(compiled(w)) == pytest.approx(float(net.loss(**tens, value_weight=w)), rel=1e-6)
