"""The C network against the float64 NumPy reference (tests/helpers/reference_model.py)."""
import re

import numpy as np
import pytest

import manaka as mk
import model_cases as cases
import reference_model as refm

CONFIGS = [
    dict(hidden=()),
    dict(hidden=(12,)),
    dict(hidden=(12, 9), orders=1, pair_dim=1),
    dict(hidden=(8, 6, 5), orders=4, pair_dim=3),
    dict(hidden=(12,), move_pairs=5),  # fewer classes than moves: m % C collide
    # a 2 x 2 board of 2 token kinds (8 board tokens, 3 in hand) and 2 class kinds
    dict(hidden=(12,), move_pairs=8, board=(2, 2, 2)),
    # MoveHidden's 3 units over a 3 x 2 board (6 board tokens of one kind, 5 in hand)
    dict(hidden=(12,), move_pairs=12, board=(3, 2, 1), move_hidden=3),
    # the shared move embeddings over 5 classes and 4 groups, alone and after MoveHidden
    dict(hidden=(12,), num_moves=20, move_pairs=5, move_shared=1),
    dict(hidden=(12,), num_moves=24, move_pairs=12, board=(3, 2, 1), move_hidden=3, move_shared=1),
    # MoveHidden's readout gated by q, alone and with the shared rows
    dict(hidden=(12,), move_pairs=12, board=(3, 2, 1), move_hidden=3, move_hidden_gate=1),
    dict(hidden=(12,), num_moves=24, move_pairs=12, board=(3, 2, 1), move_hidden=3, move_shared=1,
         move_hidden_gate=1),
    # move kinds: 3 kinds of 12 moves over 4 classes (labels up to 35), alone and with every
    # other term (2 kinds of 36 moves, the shared rows' 6 groups seeing the kind)
    dict(hidden=(12,), num_moves=36, move_pairs=4, move_kinds=3),
    dict(hidden=(12,), num_moves=36, move_kinds=4),  # no move pairs: a kind row per kind
    dict(hidden=(12,), num_moves=72, move_pairs=12, board=(3, 2, 1), move_hidden=3, move_shared=1,
         move_hidden_gate=1, move_kinds=2),
    # the value head's hidden layer, over a trunk and over the features themselves
    dict(hidden=(12,), value_hidden=5),
    dict(hidden=(), value_hidden=4, num_moves=36, move_pairs=4, move_kinds=3),
    # the value head's hidden layer over the power sums alone (not the trunk, not the pair
    # sums): below two trunk layers, and with no trunk (the policy head writes the power
    # sums' gradient first, the value head's adds to it)
    dict(hidden=(12, 8), value_hidden=5, value_power_sums=1),
    dict(hidden=(), value_hidden=4, value_power_sums=1, num_moves=36, move_pairs=4, move_kinds=3),
]
IDS = ["hidden0", "hidden1", "hidden2", "hidden3", "move_pairs", "relative", "move_hidden", "move_shared",
       "move_hidden_shared", "move_hidden_gate", "move_hidden_gate_shared", "move_kinds", "move_kinds_no_pairs", "move_kinds_all",
       "value_hidden", "value_hidden_features", "value_power_sums", "value_power_sums_no_trunk"]


@pytest.mark.parametrize("kw", CONFIGS, ids=IDS)
def test_forward_matches_reference(kw):
    cfg = cases.config(**kw)
    model = cases.model(cfg, seed=3)
    b = cases.batch(cfg, seed=1)
    logits, value = model.forward(b)
    act = refm.forward(model.parameters(), cfg, b.tokens, b.legal, b.counts)
    assert logits.shape == b.legal.shape and value.shape == (len(b),)
    assert cases.rel_err(logits, act["logits"]) < 1e-4
    assert cases.rel_err(value, act["value"]) < 1e-4
    assert (logits[np.arange(b.max_legal)[None, :] >= b.counts[:, None]] == 0).all()


@pytest.mark.parametrize("kw", CONFIGS, ids=IDS)
@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
@pytest.mark.parametrize("value_weight", [1.0, 0.0, 2.5])
def test_loss_and_grad_match_reference(kw, soft, value_weight):
    cfg = cases.config(**kw)
    model = cases.model(cfg, seed=5)
    b = cases.batch(cfg, seed=2, soft=soft)
    stats, grads = model.loss_and_grad(b, value_weight=value_weight)
    want_stats, want = refm.loss_and_grad(model.parameters(), cfg, b, value_weight)
    for k in ("loss", "policy_loss", "value_loss", "accuracy"):
        assert stats[k] == pytest.approx(want_stats[k], rel=1e-5, abs=1e-6), k
    assert list(grads) == list(model.shapes)
    for name, g in grads.items():
        assert g.shape == want[name].shape and g.dtype == np.float32
        if np.abs(want[name]).max() == 0:
            assert np.abs(g).max() == 0, name
        else:
            assert cases.rel_err(g, want[name]) < 1e-4, name


# the zero-start tables (move-pair table, relative part, the shared rows, the kind table)
# and the value head's layer after them: no table, a table alone, a table and the kind
# table, the relative part, every term
ZERO_START = ("move_pair_table", "move_pair_relative", "move_hidden_out", "move_shared_class", "move_shared_group",
              "move_hidden_gate", "move_kind_table", "value_hidden.bias")


@pytest.mark.parametrize("kw", [dict(), dict(move_pairs=5), dict(num_moves=36, move_pairs=4, move_kinds=3),
                                dict(move_pairs=8, board=(2, 2, 2)),
                                dict(num_moves=72, move_pairs=12, board=(3, 2, 1), move_hidden=3, move_shared=1,
                                     move_hidden_gate=1, move_kinds=2)],
                         ids=["no-table", "table", "table-kinds", "relative", "all"])
@pytest.mark.parametrize("hidden", [(256,), ()], ids=["trunk", "features"])
def test_value_hidden_weight_is_he_initialised_whatever_precedes_it(kw, hidden):
    """value_hidden.weight [Hv, H_n] is uniform of std sqrt(2 / H_n) (He, for the ReLU)
    whichever tensors precede it; its bias and the zero-start tables are 0."""
    cfg = cases.config(hidden=hidden, value_hidden=64, D=8, orders=4, pair_dim=8, **kw)
    state = mk.Model(cfg, seed=5).state_dict()
    weight = state["value_hidden.weight"]
    H = hidden[0] if hidden else cfg.num_features
    std = np.sqrt(2 / H)
    assert weight.shape == (64, H)
    assert abs(weight.std() / std - 1) < 0.06 and abs(weight.mean()) < 0.05 * std
    assert std * np.sqrt(3) * 0.95 < np.abs(weight).max() <= std * np.sqrt(3) * (1 + 1e-6)  # uniform
    for name in ZERO_START:
        if name in state:
            assert not state[name].any(), name
    assert np.abs(state["value.weight"]).max() > 0


def test_gradient_matches_finite_differences():
    """Perturbs parameters through the live views and differentiates the float64 loss."""
    cfg = cases.config(hidden=(6,), num_tokens=5, num_moves=8, T=4, D=3, W=4, orders=3, pair_dim=2,
                       move_pairs=4, board=(2, 2, 1), move_shared=1)  # 4 board tokens and one in hand
    model = cases.model(cfg, seed=11)
    b = cases.batch(cfg, B=4, L=5, seed=3, soft=True)
    _, grads = model.loss_and_grad(b, value_weight=0.7)
    params = model.parameters()
    rng = np.random.default_rng(0)

    def f():
        return refm.loss_and_grad(params, cfg, b, 0.7)[0]["loss"]

    for name, p in params.items():
        flat = p.reshape(-1)
        for i in rng.choice(flat.size, min(4, flat.size), replace=False):
            old = flat[i]
            flat[i] = old + np.float32(1e-2)
            up, hp = f(), np.float64(flat[i]) - np.float64(old)
            flat[i] = old - np.float32(1e-2)
            down, hm = f(), np.float64(old) - np.float64(flat[i])
            flat[i] = old
            numeric = (up - down) / (hp + hm)
            assert grads[name].reshape(-1)[i] == pytest.approx(numeric, rel=2e-3, abs=2e-5), (name, i)


def test_move_hidden_gradient_matches_finite_differences():
    """MoveHidden's three tensors, at units far from the ReLU's kink: a perturbation that
    turns a unit on or off (the loss has no derivative there) is skipped, and at least
    half of them must be kept."""
    cfg = cases.config(hidden=(6,), num_tokens=9, num_moves=8, T=5, D=3, W=4, orders=2, pair_dim=2,
                       move_pairs=4, board=(2, 2, 2), move_hidden=4)  # 8 board tokens and one in hand
    model = cases.model(cfg, seed=13)
    params = model.parameters()
    rng = np.random.default_rng(1)
    for name in ("move_hidden_relative", "move_hidden_class", "move_hidden_out"):
        params[name][...] = rng.standard_normal(params[name].shape, dtype=np.float32)
    b = cases.batch(cfg, B=4, L=6, seed=4, soft=True)
    _, grads = model.loss_and_grad(b, value_weight=0.7)

    def f():
        act = refm.forward(params, cfg, b.tokens, b.legal, b.counts)
        return refm.loss_and_grad(params, cfg, b, 0.7)[0]["loss"], act["hidden_pre"] > 0

    _, on = f()
    kept = tried = 0
    for name in ("move_hidden_relative", "move_hidden_class", "move_hidden_out"):
        flat = params[name].reshape(-1)
        assert np.abs(grads[name]).max() > 0, name
        for i in rng.choice(flat.size, min(12, flat.size), replace=False):
            old = flat[i]
            flat[i] = old + np.float32(1e-3)
            (up, on_up), hp = f(), np.float64(flat[i]) - np.float64(old)
            flat[i] = old - np.float32(1e-3)
            (down, on_down), hm = f(), np.float64(old) - np.float64(flat[i])
            flat[i] = old
            tried += 1
            if (on_up != on).any() or (on_down != on).any():
                continue
            kept += 1
            numeric = (up - down) / (hp + hm)
            assert grads[name].reshape(-1)[i] == pytest.approx(numeric, rel=2e-3, abs=2e-5), (name, i)
    assert kept >= tried // 2, (kept, tried)


def test_the_deepest_trunk_with_every_head_tensor_lays_out_and_computes():
    """16 trunk layers (the most a model has) and all twelve head tensors: every name in its
    place, and the forward still the reference's."""
    cfg = cases.config(hidden=(5,) * 16, num_moves=24, move_pairs=8, board=(2, 2, 2), move_hidden=3, move_shared=1)
    model = cases.model(cfg, seed=2)
    assert list(model.shapes) == list(mk.model.expected_shapes(cfg))
    assert list(model.shapes)[-12:] == ["policy.weight", "policy.bias", "move_table", "value.weight", "value.bias",
                                        "move_pair_table", "move_pair_relative", "move_hidden_relative",
                                        "move_hidden_class", "move_hidden_out", "move_shared_class",
                                        "move_shared_group"]
    assert model.shapes["move_shared_class"] == (8, 7) and model.shapes["move_shared_group"] == (3, 7)
    b = cases.batch(cfg, seed=6)
    logits, _ = model.forward(b)
    act = refm.forward(model.parameters(), cfg, b.tokens, b.legal, b.counts)
    assert cases.rel_err(logits, act["logits"]) < 1e-4


def test_arena_grows_and_shrinks_between_batch_shapes():
    cfg = cases.config()
    model = mk.Model(cfg, seed=1)
    small, big, wide = cases.batch(cfg, B=3, L=4, seed=1), cases.batch(cfg, B=9, L=5, seed=2), cases.batch(cfg, B=2, L=13, seed=3)
    first = model.forward(small)
    for b in (big, wide, small):
        logits, value = model.forward(b)
        act = refm.forward(model.parameters(), cfg, b.tokens, b.legal, b.counts)
        assert cases.rel_err(logits, act["logits"]) < 1e-4
    np.testing.assert_array_equal(model.forward(small)[0], first[0])
    size = model._core.arena_bytes
    model.forward(big)
    assert model._core.arena_bytes == size  # no reallocation once the largest shapes were seen


def test_parameters_are_live_views_and_state_dict_copies():
    cfg = cases.config()
    model = mk.Model(cfg, seed=0)
    p = model.parameters()
    assert list(p) == ["embedding", "pair_table", "trunk.0.weight", "trunk.0.bias", "policy.weight",
                       "policy.bias", "move_table", "value.weight", "value.bias"]
    assert p["pair_table"].shape == (cfg.num_pairs, cfg.pair_dim)
    assert p["trunk.0.weight"].shape == (12, cfg.num_features)
    state = model.state_dict()
    p["value.bias"][0] = 3.0
    assert model.parameters()["value.bias"][0] == 3.0 and state["value.bias"][0] == 0.0
    model.load_state_dict(state)
    assert p["value.bias"][0] == 0.0
    assert all(np.abs(p[n]).max() == 0 for n in p if n.endswith("bias"))


def test_same_seed_same_model_and_different_seed_differs():
    cfg = cases.config()
    a, b, c = mk.Model(cfg, seed=7), mk.Model(cfg, seed=7), mk.Model(cfg, seed=8)
    for name in a.shapes:
        np.testing.assert_array_equal(a.parameters()[name], b.parameters()[name])
    assert not np.array_equal(a.parameters()["embedding"], c.parameters()["embedding"])


def test_load_state_dict_rejects_bad_state_without_changes():
    model = mk.Model(cases.config(), seed=0)
    before = model.state_dict()
    bad = dict(before)
    bad["move_table"] = np.zeros((2, 2), np.float32)
    with pytest.raises(ValueError, match="move_table"):
        model.load_state_dict(bad)
    bad = dict(before)
    bad["embedding"] = before["embedding"].copy()
    bad["embedding"][0, 0] = np.nan
    with pytest.raises(ValueError, match="embedding"):
        model.load_state_dict(bad)
    with pytest.raises(KeyError, match="pair_table"):
        model.load_state_dict({k: v for k, v in before.items() if k != "pair_table"})
    # not a mapping: None failed in `in` ("argument of type 'NoneType' is not iterable")
    for bad in (None, [("embedding", before["embedding"])]):
        with pytest.raises(TypeError, match=r"^Model.load_state_dict: state must be a mapping \{name: array\}, got "):
            model.load_state_dict(bad)
    for name, arr in model.state_dict().items():
        np.testing.assert_array_equal(arr, before[name])


def test_load_state_dict_names_a_value_numpy_cannot_read():
    # torch's own errors (a tensor that requires grad, bfloat16) named no parameter
    torch = pytest.importorskip("torch")
    model = mk.Model(cases.config(move_kinds=1, value_hidden=3), seed=0)
    before = model.state_dict()
    for bad in (torch.zeros(model.shapes["value_hidden.bias"], requires_grad=True),
                torch.zeros(model.shapes["value_hidden.bias"], dtype=torch.bfloat16)):
        with pytest.raises(TypeError, match=r"^Model.load_state_dict: value_hidden.bias cannot be read as a NumPy "
                                            r"array \(Tensor: "):
            model.load_state_dict({**before, "value_hidden.bias": bad})
    for name, arr in model.state_dict().items():
        np.testing.assert_array_equal(arr, before[name])


def test_save_load_round_trip(tmp_path):
    cfg = cases.config(hidden=(8, 4))
    model = mk.Model(cfg, seed=4)
    path = tmp_path / "m.manaka"
    model.save(path)
    loaded = mk.Model.load(path)
    assert loaded.config == cfg and loaded.seed == 4
    cases.assert_parameters_match(loaded, model)
    b = cases.batch(cfg)
    np.testing.assert_array_equal(loaded.forward(b)[0], model.forward(b)[0])
    assert not [p for p in tmp_path.iterdir() if p.name != "m.manaka"]  # no temp file left


@pytest.mark.parametrize("damage", ["truncated", "flipped", "foreign", "empty", "header"])
def test_load_rejects_damaged_files(tmp_path, damage):
    path = tmp_path / "m.manaka"
    mk.Model(cases.config(), seed=1).save(path)
    data = bytearray(path.read_bytes())
    if damage == "truncated":
        data = data[:-100]
    elif damage == "flipped":
        data[-50] ^= 0xFF
    elif damage == "foreign":
        np.save(tmp_path / "x.npy", np.zeros(10))
        data = (tmp_path / "x.npy").read_bytes()
    elif damage == "empty":
        data = b""
    elif damage == "header":
        data[20] = ord("{") if data[20] != ord("{") else ord("}")
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="m.manaka"):
        mk.Model.load(path)


def test_device_cuda_says_which_reason_makes_it_unavailable(monkeypatch):
    import manaka.cuda as cuda

    if cuda.is_available():
        pytest.skip("a CUDA device is usable here")
    with pytest.raises(RuntimeError, match=re.escape(cuda.why_unavailable())):
        mk.Model(cases.config(), device="cuda")
    # the other reason: a build without the CUDA backend
    monkeypatch.setattr(cuda, "_cuda", None)
    monkeypatch.setattr(cuda, "_IMPORT_ERROR", None)
    cuda.why_unavailable.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="manaka was built without the CUDA backend"):
            mk.Model(cases.config(), device="cuda")
    finally:
        monkeypatch.undo()
        cuda.why_unavailable.cache_clear()
    with pytest.raises(ValueError, match="device"):
        mk.Model(cases.config(), device="tpu")


def test_param_groups_tile_the_parameter_buffer_in_placement_order():
    """The parameter groups the model reports (mk_model_param_groups), which trainer.c walks
    instead of knowing model.c's placement: the pair table alone, then every other decayed
    tensor, then the biases. Each tensor's offset is found from its address, independently
    of the report: the groups start at 0, each begins where the one before ends, and each is
    exactly its tensors, one after another in the order placed, each padded to 16 floats (64
    bytes), so together they cover the buffer with no gap and no overlap. The trainer sizes
    its moments from them: 2 floats per group float, the bf16 pair table's as 2 halves."""
    for hidden in [(), (5,), (5, 3)]:
        core = mk.Model(cases.config(hidden=hidden), seed=0)._core
        tensors = core.tensors()
        names = [n for n, _, _ in tensors]
        numel = {n: int(np.prod(shape)) for n, shape, _ in tensors}
        decay = {n: d for n, _, d in tensors}
        address = {n: core.address(n)[0] for n in names}
        base = min(address.values())
        offset = {n: (a - base) // 4 for n, a in address.items()}
        groups = core.param_groups()
        assert [g[:3] for g in groups] == [("pair_table", "pair_table", True),
                                          ("decayed", "dense", True), ("biases", "dense", False)]
        assert [g[5] for g in groups] == [["pair_table"],
                                          [n for n in names if decay[n] and n != "pair_table"],
                                          [n for n in names if not decay[n]]]
        end = 0
        for name, _, _, group_offset, size, members in groups:
            assert group_offset == end, name
            inside = sorted((n for n in names if group_offset <= offset[n] < group_offset + size),
                            key=offset.get)
            assert sorted(members) == sorted(inside), name
            at = group_offset
            for n in inside:
                assert offset[n] == at, (name, n)
                at += -(-numel[n] // 16) * 16
            assert at == group_offset + size, name
            end = at
        assert sum(len(g[5]) for g in groups) == len(names)
        pair_size, pair_numel = groups[0][4], numel["pair_table"]
        for dtype, want in [("float32", 2 * 4 * end),
                            ("bf16", 2 * 4 * (end - pair_size) + 2 * 2 * pair_numel)]:
            model = mk.Model(cases.config(hidden=hidden), seed=0)
            assert mk.Trainer(model, pair_state_dtype=dtype)._core.moment_bytes() == want, dtype


def test_repr_shows_config_and_parameter_counts():
    model = mk.Model(cases.config(), seed=0)
    text = repr(model)
    assert "ModelConfig(num_tokens=11" in text and "pair_table" in text
    assert f"{model.num_parameters():,}" in text


def test_config_validation():
    with pytest.raises(ValueError, match="embed_dim"):
        cases.config(D=0)
    with pytest.raises(TypeError, match="num_moves"):
        mk.ModelConfig(num_tokens=4, num_moves=2.5)
    with pytest.raises(ValueError, match="hidden"):
        cases.config(hidden=(4, 0))


def test_fresh_process_finds_openblas_without_rpath():
    """_core links libscipy_openblas by soname only; manaka preloads the installed copy."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(mk.__file__)))
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    env["PYTHONPATH"] = root
    code = ("import manaka as mk; m = mk.Model(mk.ModelConfig(4, 5, 3, 2, 1, 1, (3,), 2)); "
            "mk.set_num_threads(1); print(m.num_parameters())")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd="/", capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_uninitialised_core_objects_raise_instead_of_crashing():
    for cls, call in [(mk._core.Model, lambda o: o.tensors()),
                      (mk._core.Trainer, lambda o: o.step(None))]:
        with pytest.raises(RuntimeError, match="not initialised"):
            call(cls.__new__(cls))


def test_batch_argument_errors_name_the_argument():
    cfg = cases.config()
    model = mk.Model(cfg)
    b = cases.batch(cfg)
    with pytest.raises(TypeError, match="batch must be a manaka.Batch"):
        model.forward((b.tokens, b.legal, b.counts))
    with pytest.raises(TypeError, match="Batch: tokens must have an integer dtype, got float32"):
        mk.Batch(b.tokens.astype(np.float32), b.legal, b.counts, b.target, b.value)
    short = cases.batch(cfg)
    short.counts = short.counts[:2]  # fields are replaced one at a time: shapes are compared where read
    with pytest.raises(ValueError, match="Model.forward: counts has 2 rows but tokens has 6"):
        model.forward(short)
    with pytest.raises(ValueError, match="value_weight"):
        model.loss_and_grad(b, value_weight=float("nan"))


def test_move_shared_starts_at_zero_and_changes_nothing_until_trained():
    """Both shared tables start at 0 (a new model's policy is the one without them): the
    same seed with and without them gives the same logits; a step moves them."""
    with_shared = cases.config(hidden=(8,), num_moves=20, move_pairs=5, move_shared=1)
    without = cases.config(hidden=(8,), num_moves=20, move_pairs=5)
    a, b = mk.Model(with_shared, seed=4), mk.Model(without, seed=4)
    assert not a.parameters()["move_shared_class"].any() and not a.parameters()["move_shared_group"].any()
    batch = cases.batch(with_shared, seed=5)
    np.testing.assert_array_equal(a.forward(batch)[0], b.forward(batch)[0])
    trainer = mk.Trainer(a, lr=1e-2)
    trainer.step(batch)
    assert a.parameters()["move_shared_class"].any() and a.parameters()["move_shared_group"].any()
