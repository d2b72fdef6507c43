"""ONNX export (manaka.export, manaka.torch.export_onnx, python -m manaka.export): onnxruntime
running the exported file agrees with mk.Model.forward on fresh random batches (padding,
counts 0..L, empty token slots, several B and L in one session), in a process where manaka
cannot be imported; a manaka.torch.Network exports the same file; bad calls are refused.

Tolerance (float32 both sides, sums in another order): padded slots are exactly 0; every
logit within 1e-4 relative or 1e-5 absolute, every value within 1e-4 relative or 1e-6
absolute (a value near 0 or 1 is the sigmoid of a sum that may cancel); and over all the
batches run in one session, the norm-wise relative error of logits and of values below 1e-5
(conftest.assert_close).
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx not installed: pip install onnx (the test extra)")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime not installed: pip install onnxruntime (the test extra)")

import manaka as mk  # noqa: E402
from manaka.export import export_onnx  # noqa: E402
from assertions import assert_close  # noqa: E402
import reference as ref  # noqa: E402
from paths import ROOT  # noqa: E402

# (name, config): small random shapes, the edges (T = 1: no pair; no trunk layer; one
# order), a move_pair_table (move_pairs = C: 40 moves in 6 classes), and the seed configuration's shapes with a smaller vocabulary (the pair table of
# V = 2344 alone is 176 MB) but T = 40, so 780 slot pairs per perspective.
CONFIGS = {
    "small": dict(num_tokens=11, num_moves=17, tokens_per_side=6, embed_dim=5, orders=3, pair_dim=4,
                  hidden=(12,), head_width=7),
    "one-slot-no-trunk-one-order": dict(num_tokens=5, num_moves=9, tokens_per_side=1, embed_dim=3, orders=1,
                                        pair_dim=2, hidden=(), head_width=4),
    "two-layers": dict(num_tokens=30, num_moves=50, tokens_per_side=9, embed_dim=8, orders=4, pair_dim=3,
                       hidden=(16, 10), head_width=6),
    "move-pairs": dict(num_tokens=13, num_moves=40, tokens_per_side=7, embed_dim=4, orders=2, pair_dim=3,
                       hidden=(10,), head_width=5, move_pairs=6),
    "seed-like": dict(num_tokens=300, num_moves=2187, tokens_per_side=40, embed_dim=256, orders=4, pair_dim=16,
                      hidden=(512, 512), head_width=300),
    # the move-pair table's relative part at shogi's board and classes (9 x 9, C = 2187, 27
    # move kinds) with 3 token kinds (243 board tokens, 57 hand tokens): [3 17 17, 27]
    "shogi-board-relative": dict(num_tokens=300, num_moves=2187, tokens_per_side=40, embed_dim=8, orders=2,
                                 pair_dim=4, hidden=(24,), head_width=16, move_pairs=2187, board_width=9,
                                 board_height=9, board_kinds=3),
    # MoveHidden of 16 units at shogi's shapes: 28 token kinds on the 9 x 9 board (2,268 board
    # tokens, 38 hand tokens), C = 2187: move_hidden_relative [28 17 17 27, 16]; a pair table
    # of width 1 (V = 2306: 2.7 M rows)
    "shogi-move-hidden": dict(num_tokens=28 * 81 + 38, num_moves=2187, tokens_per_side=40, embed_dim=4, orders=2,
                              pair_dim=1, hidden=(16,), head_width=8, move_pairs=2187, board_width=9,
                              board_height=9, board_kinds=28, move_hidden=16),
    # the shared move embeddings: 42 moves in 6 classes of 7 groups; and at shogi's moves
    # (C = 2187 classes of 120 groups: M = 262,440) with W = 8
    "move-shared": dict(num_tokens=13, num_moves=42, tokens_per_side=7, embed_dim=4, orders=2, pair_dim=3,
                        hidden=(10,), head_width=5, move_pairs=6, move_shared=1),
    "shogi-move-shared": dict(num_tokens=300, num_moves=2187 * 120, tokens_per_side=40, embed_dim=4, orders=2,
                              pair_dim=1, hidden=(16,), head_width=8, move_pairs=2187, move_shared=1),
    # MoveHidden's gated readout (3 units over a 3 x 2 board of 2 token kinds, C = 6) with the
    # shared move embeddings (42 moves: 7 groups)
    "move-hidden-gate": dict(num_tokens=13, num_moves=42, tokens_per_side=7, embed_dim=4, orders=2, pair_dim=3,
                             hidden=(10,), head_width=5, move_pairs=6, board_width=3, board_height=2, board_kinds=2,
                             move_hidden=3, move_shared=1, move_hidden_gate=1),
    # move kinds: 3 kinds of 12 moves in C = 4 classes (a move table of 12 rows, a kind table
    # of 12); and 2 kinds of 36 moves, C = 12, over every other term (a 3 x 2 board of 1 token
    # kind, MoveHidden of 3 units and its gate, the shared rows: 6 groups)
    "move-kinds": dict(num_tokens=13, num_moves=36, tokens_per_side=7, embed_dim=4, orders=2, pair_dim=3,
                       hidden=(10,), head_width=5, move_pairs=4, move_kinds=3),
    "move-kinds-no-pairs": dict(num_tokens=13, num_moves=20, tokens_per_side=7, embed_dim=4, orders=2, pair_dim=3,
                                hidden=(10,), head_width=5, move_kinds=4),  # a kind row per kind
    "move-kinds-all": dict(num_tokens=13, num_moves=72, tokens_per_side=7, embed_dim=4, orders=2, pair_dim=3,
                           hidden=(10,), head_width=5, move_pairs=12, board_width=3, board_height=2, board_kinds=1,
                           move_hidden=3, move_shared=1, move_hidden_gate=1, move_kinds=2),
    # the value head's hidden layer: 6 units over a trunk, 4 over the features themselves (no
    # trunk), and 5 over a trunk with move kinds and every other term
    "value-hidden": dict(num_tokens=13, num_moves=17, tokens_per_side=7, embed_dim=4, orders=2, pair_dim=3,
                         hidden=(10,), head_width=5, value_hidden=6),
    "value-hidden-features": dict(num_tokens=13, num_moves=17, tokens_per_side=7, embed_dim=4, orders=2, pair_dim=3,
                                  hidden=(), head_width=5, value_hidden=4),
    "value-hidden-all": dict(num_tokens=13, num_moves=72, tokens_per_side=7, embed_dim=4, orders=2, pair_dim=3,
                             hidden=(10,), head_width=5, move_pairs=12, board_width=3, board_height=2, board_kinds=1,
                             move_hidden=3, move_shared=1, move_hidden_gate=1, move_kinds=2, value_hidden=5),
    # that layer over the power sums (value_power_sums): below a trunk, and with every other term
    "value-power-sums": dict(num_tokens=13, num_moves=17, tokens_per_side=7, embed_dim=4, orders=2, pair_dim=3,
                             hidden=(10,), head_width=5, value_hidden=6, value_power_sums=1),
    "value-power-sums-all": dict(num_tokens=13, num_moves=72, tokens_per_side=7, embed_dim=4, orders=2, pair_dim=3,
                                 hidden=(10, 8), head_width=5, move_pairs=12, board_width=3, board_height=2,
                                 board_kinds=1, move_hidden=3, move_shared=1, move_hidden_gate=1, move_kinds=2,
                                 value_hidden=5, value_power_sums=1),
}
# run with L up to 600, as shogi's legal moves
WIDE = ("seed-like", "shogi-board-relative", "shogi-move-hidden", "shogi-move-shared")


def inputs(rng, cfg, B, L, zero_counts=True):
    """int32 tokens / legal / counts: about a quarter of the token slots empty (one
    perspective wholly empty when B > 2), counts over 0..L (both ends present when B > 2),
    padded legal slots holding garbage the graph must ignore (ids out of range, negatives)."""
    tokens = rng.integers(0, cfg.num_tokens, (B, 2, cfg.tokens_per_side))
    tokens[rng.random(tokens.shape) < 0.25] = -1
    counts = rng.integers(0 if zero_counts else 1, L + 1, B)
    if B > 2:
        tokens[1, 0] = -1
        counts[0], counts[2] = L, (0 if zero_counts else 1)
    legal = rng.integers(-5, cfg.num_moves + 10**6, (B, L))
    for b in range(B):
        legal[b, :counts[b]] = rng.choice(cfg.num_moves, counts[b], replace=counts[b] > cfg.num_moves)
    return {"tokens": tokens.astype(np.int32), "legal": legal.astype(np.int32), "counts": counts.astype(np.int32)}


def forward(model, feed):
    """mk.Model.forward's (logits, value); it refuses a row without legal moves, so those
    rows are run with one legal move (id 0) and their logits set to the 0 GatherDot gives them (the
    value does not read the legal moves)."""
    counts, legal = feed["counts"], feed["legal"].copy()
    B = len(counts)
    legal[counts == 0, 0] = 0
    batch = mk.Batch(feed["tokens"], legal, np.maximum(counts, 1), np.zeros(B, np.int64), np.zeros(B))
    logits, value = model.forward(batch)
    logits[counts == 0] = 0.0
    return logits, value


def session(path):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    return ort.InferenceSession(os.fspath(path), options, providers=["CPUExecutionProvider"])


def check_outputs(logits, value, want_logits, want_value, feed):
    """One batch's outputs against mk.Model.forward's (the tolerance of the module docstring)."""
    assert logits.dtype == np.float32 and value.dtype == np.float32
    assert logits.shape == feed["legal"].shape and value.shape == feed["counts"].shape
    padded = np.arange(logits.shape[1])[None, :] >= feed["counts"][:, None]
    assert np.all(logits[padded] == 0.0)
    np.testing.assert_allclose(logits, want_logits, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(value, want_value, rtol=1e-4, atol=1e-6)


def check_runs(sess, model, feeds):
    """Runs every feed in `sess`: each batch, then all of them together, against mk.Model.forward."""
    got, want = [], []
    for feed in feeds:
        outputs, expected = sess.run(["logits", "value"], feed), forward(model, feed)
        check_outputs(*outputs, *expected, feed)
        got.append(outputs)
        want.append(expected)
    for k in range(2):
        assert_close(np.concatenate([g[k].ravel() for g in got]), np.concatenate([w[k].ravel() for w in want]))


def trained_looking(model, rng):
    """Perturbs every parameter by noise at its own scale (biases: 0.05): parameters away from
    the initial ones, which keep biases 0, without saturating the value's sigmoid."""
    model.load_state_dict({k: v + rng.normal(0, max(float(v.std()), 0.05), v.shape).astype(np.float32) * 0.5
                           for k, v in model.state_dict().items()})
    return model


@pytest.mark.parametrize("name", list(CONFIGS))
def test_onnxruntime_equals_model_forward(tmp_path, rng, name):
    cfg = mk.ModelConfig(**CONFIGS[name])
    model = trained_looking(mk.Model(cfg, seed=int(rng.integers(1000))), rng)
    path = tmp_path / "m.onnx"
    assert export_onnx(model, path) == os.fspath(path)
    sess = session(path)
    # one session, several batch sizes and legal widths: both axes are dynamic
    shapes = [(1, 1), (1, 7), (5, 3), (9, 600 if name in WIDE else 17), (4, 2)]
    check_runs(sess, model, [inputs(rng, cfg, B, L) for B, L in shapes])

    proto = onnx.load(os.fspath(path))
    dims = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in list(proto.graph.input) + list(proto.graph.output)}
    assert dims == {"tokens": ["batch", 2, cfg.tokens_per_side], "legal": ["batch", "legal_moves"],
                    "counts": ["batch"], "logits": ["batch", "legal_moves"], "value": ["batch"]}
    assert {n.domain for n in proto.graph.node} == {""}, "only standard ONNX operators"
    assert json.loads({p.key: p.value for p in proto.metadata_props}["manaka_config"]) == cfg.to_dict()


@pytest.mark.parametrize("draw", range(4))
def test_random_small_configs(tmp_path, rng, draw):
    n = lambda lo, hi: int(rng.integers(lo, hi + 1))  # noqa: E731
    cfg = mk.ModelConfig(num_tokens=n(1, 40), num_moves=n(1, 60), tokens_per_side=n(1, 12), embed_dim=n(1, 8),
                         orders=n(1, 5), pair_dim=n(1, 5), hidden=tuple(n(1, 16) for _ in range(n(0, 2))),
                         head_width=n(1, 8))
    model = trained_looking(mk.Model(cfg, seed=draw), rng)
    path = export_onnx(model, tmp_path / "m.onnx")
    check_runs(session(path), model, [inputs(rng, cfg, n(1, 9), n(1, 2 * cfg.num_moves)) for _ in range(3)])


def test_ids_the_graph_cannot_read_are_errors(tmp_path, rng):
    cfg = mk.ModelConfig(**CONFIGS["small"])
    path = export_onnx(mk.Model(cfg), tmp_path / "m.onnx")
    sess = session(path)
    feed = inputs(rng, cfg, 4, 6, zero_counts=False)
    # row 1: three legal moves (its slots from the old count on held padding's garbage)
    feed["counts"][1] = 3
    feed["legal"][1, :3] = rng.choice(cfg.num_moves, 3, replace=False)
    sess.run(None, feed)
    for field, where, bad, op in [("tokens", (1, 0, 2), cfg.num_tokens, "Gather"), ("tokens", (2, 1, 0), -2, "Gather"),
                                  ("legal", (1, 2), cfg.num_moves, "GatherElements"),
                                  ("legal", (1, 0), -1, "GatherElements")]:
        wrong = {k: v.copy() for k, v in feed.items()}
        wrong[field][where] = bad
        with pytest.raises(Exception, match=op):  # onnxruntime's own exception types
            sess.run(None, wrong)
    wrong = {k: v.copy() for k, v in feed.items()}
    wrong["legal"][1, 3:] = -1  # padding may hold anything
    sess.run(None, wrong)


@pytest.mark.parametrize("opset", [13, 17, 21])
def test_every_supported_opset_runs(tmp_path, rng, opset):
    cfg = mk.ModelConfig(**CONFIGS["small"])
    model = mk.Model(cfg, seed=1)
    path = export_onnx(model, tmp_path / f"m{opset}.onnx", opset=opset)
    assert onnx.load(path).opset_import[0].version == opset
    check_runs(session(path), model, [inputs(rng, cfg, 6, 8)])


# Runs in `python -I` (no PYTHONPATH, no current folder, no user site) with every sys.path
# entry that holds a manaka package removed and a finder refusing `manaka`: the exported
# file must run with onnxruntime and numpy alone.
WITHOUT_MANAKA = r"""
import importlib.abc, importlib.util, os, sys
sys.path = [p for p in sys.path if not os.path.exists(os.path.join(p or ".", "manaka"))]
class NoManaka(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "manaka" or name.startswith("manaka."):
            raise ImportError("manaka is blocked in this process")
        return None
sys.meta_path.insert(0, NoManaka())
try:
    import manaka
except ImportError:
    pass
else:
    raise SystemExit("manaka was importable")
import numpy as np, onnxruntime as ort
folder = sys.argv[1]
sess = ort.InferenceSession(os.path.join(folder, "m.onnx"), providers=["CPUExecutionProvider"])
for k in range(int(sys.argv[2])):
    feed = dict(np.load(os.path.join(folder, f"in{k}.npz")))
    logits, value = sess.run(["logits", "value"], feed)
    np.savez(os.path.join(folder, f"out{k}.npz"), logits=logits, value=value)
assert not any(m == "manaka" or m.startswith("manaka.") for m in sys.modules), sorted(sys.modules)
print("ran without manaka")
"""


@pytest.mark.parametrize("name", ["two-layers", "move-hidden-gate", "move-kinds-all", "value-hidden-all"])
def test_runs_where_manaka_cannot_be_imported(tmp_path, rng, name):
    cfg = mk.ModelConfig(**CONFIGS[name])
    model = trained_looking(mk.Model(cfg, seed=5), rng)
    if cfg.move_pairs:
        model = with_move_pair_table(model, rng)
    export_onnx(model, tmp_path / "m.onnx")
    feeds = [inputs(rng, cfg, B, L) for B, L in [(1, 4), (6, 11), (3, 1)]]
    for k, feed in enumerate(feeds):
        np.savez(tmp_path / f"in{k}.npz", **feed)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-I", "-c", WITHOUT_MANAKA, str(tmp_path), str(len(feeds))],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert done.returncode == 0 and "ran without manaka" in done.stdout, done.stderr
    for k, feed in enumerate(feeds):
        out = np.load(tmp_path / f"out{k}.npz")
        check_outputs(out["logits"], out["value"], *forward(model, feed), feed)


def test_a_torch_network_exports_the_same(tmp_path, rng):
    torch = pytest.importorskip("torch", reason="torch not installed: pip install torch (manaka[torch])")
    import manaka.torch as mkt

    cfg = mk.ModelConfig(**CONFIGS["two-layers"])
    net = mkt.Network(cfg, seed=2)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.1 * torch.randn_like(p))  # trained-looking parameters, not the initial ones
    path = mkt.export_onnx(net, tmp_path / "net.onnx")
    feed = inputs(rng, cfg, 7, 12)
    logits, value = session(path).run(["logits", "value"], feed)
    with torch.no_grad():  # Network.forward through manaka's torch operators, which take counts of 0
        want_logits, want_value = net(*(torch.from_numpy(feed[k]) for k in ("tokens", "legal", "counts")))
    check_outputs(logits, value, want_logits.numpy(), want_value.numpy(), feed)
    # the same graph and parameters as the mk.Model holding the network's parameters
    mkt.export_onnx(net.to_model(), tmp_path / "model.onnx")
    assert (tmp_path / "net.onnx").read_bytes() == (tmp_path / "model.onnx").read_bytes()

    # a bfloat16 network: its parameters, widened to float32
    half = mkt.Network(cfg, seed=3).to(torch.bfloat16)
    path = mkt.export_onnx(half, tmp_path / "half.onnx")
    widened = mkt.Network(cfg)
    widened.load_state_dict({k: v.float() for k, v in half.state_dict().items()})
    check_runs(session(path), widened.to_model(), [feed])


# MoveHidden's parameters and the scales with_move_pair_table draws them at: the units'
# pre-activations of both signs, move_hidden_out (0 at the start) of the order of 1
MOVE_HIDDEN = {"move_hidden_relative": 0.15, "move_hidden_class": 0.6, "move_hidden_out": 1.0}
# the shared move embeddings' tables (0 at the start): terms of the order of 1
MOVE_SHARED = {"move_shared_class": 0.5, "move_shared_group": 0.5}
# MoveHidden's gate (0 at the start): q move_hidden_gate of the order of move_hidden_out
MOVE_HIDDEN_GATE = {"move_hidden_gate": 0.3}
# the move kind table (0 at the start): a term of the order of 1
MOVE_KINDS = {"move_kind_table": 0.5}


def with_move_pair_table(model, rng, scale=0.7):
    """`model` (move_pairs > 0) with a random move_pair_table (and move_pair_relative,
    MoveHidden's parameters and its gate, the shared move embeddings and the move kind
    table, if it has them) far from their initial values."""
    state = model.state_dict()
    for name, s in [("move_pair_table", scale), ("move_pair_relative", scale), *MOVE_HIDDEN.items(),
                    *MOVE_SHARED.items(), *MOVE_HIDDEN_GATE.items(), *MOVE_KINDS.items()]:
        if name in state:
            state[name] = rng.normal(0, s, state[name].shape).astype(np.float32)
    model.load_state_dict(state)
    return model


# (move_pairs, (W, H, K) of the relative part): 97 > M = 40 has classes never read; the
# relative parts on 13 tokens: 3 x 2 and 2 x 3 boards (W != H), 2 token kinds (12 board
# tokens, 1 hand token), 1 and 2 move kinds
GRAPH_CASES = [(1, None), (6, None), (97, None), (6, (3, 2, 2)), (12, (2, 3, 2))]


@pytest.mark.parametrize("move_pairs, board", GRAPH_CASES,
                         ids=lambda c: "C%d" % c if isinstance(c, int) else "" if c is None else "rel%dx%dx%d" % c)
def test_move_pair_table_is_in_the_graph(tmp_path, rng, move_pairs, board):
    fields = dict(move_pairs=move_pairs)
    if board:
        fields.update(board_width=board[0], board_height=board[1], board_kinds=board[2])
    cfg = mk.ModelConfig(**{**CONFIGS["move-pairs"], **fields})
    model = with_move_pair_table(trained_looking(mk.Model(cfg, seed=3), rng), rng)
    path = export_onnx(model, tmp_path / "m.onnx")
    sess = session(path)
    feeds = [inputs(rng, cfg, B, L) for B, L in [(1, 1), (6, 13), (9, 40), (3, 5)]]
    for feed in feeds[1:]:
        feed["tokens"][0, 0, :3] = -1  # some empty side-to-move slots in the row of L counts
    check_runs(sess, model, feeds)
    proto = onnx.load(path)
    assert {"Mod", "GatherElements", "ReduceSum"} <= {n.op_type for n in proto.graph.node}
    assert {n.domain for n in proto.graph.node} == {""}, "only standard ONNX operators"
    assert json.loads({p.key: p.value for p in proto.metadata_props}["manaka_config"]) == cfg.to_dict()
    assert ("move_pair_relative_sums" in {n.output[0] for n in proto.graph.node}) == bool(board)

    # the table (or its relative part) changes the logits: the same parameters without it
    # give other numbers
    last = "move_pair_relative" if board else "move_pair_table"
    plain = mk.Model(mk.ModelConfig(**{**CONFIGS["move-pairs"], "move_pairs": move_pairs if board else 0}))
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if k != last})
    feed = feeds[2]
    with_table = sess.run(["logits"], feed)[0]
    without = session(export_onnx(plain, tmp_path / "plain.onnx")).run(["logits"], feed)[0]
    plain_nodes = {n.output[0] for n in onnx.load(tmp_path / "plain.onnx").graph.node}
    assert ("move_pair_relative_sums" if board else "move_pair_sums") not in plain_nodes
    used = np.arange(with_table.shape[1])[None, :] < feed["counts"][:, None]
    if move_pairs > 1:  # one class adds a number per position, as large
        assert np.abs(with_table - without)[used].max() > 0.1
    np.testing.assert_allclose(without, forward(plain, feed)[0], rtol=1e-4, atol=1e-5)


def test_move_hidden_at_shogi_shapes(tmp_path, rng):
    """MoveHidden at W = H = 9, K = 28, C = 2187, D = 16 with its parameters far from their
    start: onnxruntime against mk.Model.forward with hand tokens, empty slots, padded
    slots holding garbage, L up to 600; and the term changes the logits (the same model
    with move_hidden_out 0 gives other numbers)."""
    cfg = mk.ModelConfig(**CONFIGS["shogi-move-hidden"])
    model = with_move_pair_table(trained_looking(mk.Model(cfg, seed=4), rng), rng)
    path = export_onnx(model, tmp_path / "m.onnx")
    feeds = [inputs(rng, cfg, B, L) for B, L in [(1, 1), (3, 600), (8, 120), (2, 37)]]
    board_tokens = cfg.board_kinds * cfg.board_width * cfg.board_height
    for feed in feeds[1:]:
        side = feed["tokens"][:, 0]
        side[:, -3:] = rng.integers(board_tokens, cfg.num_tokens, (len(side), 3))  # pieces in hand: add nothing
        assert (side >= board_tokens).any() and (side == -1).any()  # hand tokens, empty slots
        assert (feed["counts"] < feed["legal"].shape[1]).any()        # padded slots
    sess = session(path)
    check_runs(sess, model, feeds)
    proto = onnx.load(path)
    nodes = {n.output[0]: n.op_type for n in proto.graph.node}
    assert nodes["move_hidden"] == "Squeeze" and nodes["move_hidden_units"] == "Relu"
    assert {n.domain for n in proto.graph.node} == {""}, "only standard ONNX operators"
    silent = mk.Model(cfg)
    silent.load_state_dict({**model.state_dict(), "move_hidden_out": np.zeros((1, 16), np.float32)})
    feed = feeds[2]
    used = np.arange(feed["legal"].shape[1])[None, :] < feed["counts"][:, None]
    difference = sess.run(["logits"], feed)[0] - forward(silent, feed)[0]
    assert np.abs(difference[used]).max() > 0.5


def test_move_shared_at_shogi_shapes(tmp_path, rng):
    """The shared move embeddings at shogi's moves (C = 2187 classes, 120 groups, M =
    262,440) with both tables far from their start at 0: onnxruntime against
    mk.Model.forward with L up to 600 and padded slots holding garbage; the term is made
    of the standard operators named, and each table changes the logits (the model with it
    at 0 gives other numbers, which its graph gives too)."""
    cfg = mk.ModelConfig(**CONFIGS["shogi-move-shared"])
    model = with_move_pair_table(trained_looking(mk.Model(cfg, seed=6), rng), rng)
    path = export_onnx(model, tmp_path / "m.onnx")
    feeds = [inputs(rng, cfg, B, L) for B, L in [(1, 1), (3, 600), (8, 120), (2, 37)]]
    for feed in feeds[1:]:
        assert (feed["counts"] < feed["legal"].shape[1]).any()  # padded slots
    feeds[2]["legal"][1, :8] = np.arange(8) * 2187 + 5  # one class, eight groups: moves m = 2187 g + 5
    sess = session(path)
    check_runs(sess, model, feeds)
    proto = onnx.load(path)
    nodes = {n.output[0]: n.op_type for n in proto.graph.node}
    assert nodes["move_shared_move_class"] == "Mod" and nodes["move_shared_move_group"] == "Div"
    assert nodes["move_shared_class_scores"] == nodes["move_shared_group_scores"] == "MatMul"
    assert nodes["move_shared_class_part"] == nodes["move_shared_group_part"] == "GatherElements"
    assert {n.domain for n in proto.graph.node} == {""}, "only standard ONNX operators"
    feed = feeds[2]
    used = np.arange(feed["legal"].shape[1])[None, :] < feed["counts"][:, None]
    logits = sess.run(["logits"], feed)[0]
    for name in MOVE_SHARED:
        state = model.state_dict()
        state[name] = np.zeros_like(state[name])
        without = mk.Model(cfg)
        without.load_state_dict(state)
        other = session(export_onnx(without, tmp_path / f"without-{name}.onnx")).run(["logits"], feed)[0]
        assert np.abs(logits - other)[used].max() > 0.5, name
        np.testing.assert_allclose(other, forward(without, feed)[0], rtol=1e-4, atol=1e-5)


def gate_changes_the_logits(sess, model, feed, tmp_path):
    """The gated graph's logits on `feed` differ from those of the same model with
    move_hidden_gate at 0 (the readout move_hidden_out alone), whose own graph gives
    mk.Model.forward's numbers too."""
    state = model.state_dict()
    state["move_hidden_gate"] = np.zeros_like(state["move_hidden_gate"])
    without = mk.Model(model.config)
    without.load_state_dict(state)
    other = session(export_onnx(without, tmp_path / "without-gate.onnx")).run(["logits"], feed)[0]
    used = np.arange(feed["legal"].shape[1])[None, :] < feed["counts"][:, None]
    assert np.abs(sess.run(["logits"], feed)[0] - other)[used].max() > 0.5
    np.testing.assert_allclose(other, forward(without, feed)[0], rtol=1e-4, atol=1e-5)


def gate_nodes(path):
    """The gated readout's nodes: the policy vector times the gate, plus move_hidden_out, a
    column per position for a batched MatMul."""
    proto = onnx.load(os.fspath(path))
    nodes = {n.output[0]: n for n in proto.graph.node}
    assert nodes["move_hidden_gated"].op_type == "MatMul"
    assert list(nodes["move_hidden_gated"].input) == ["policy_vector", "move_hidden_gate"]
    assert nodes["move_hidden_readout"].op_type == "Add"
    assert list(nodes["move_hidden_readout"].input) == ["move_hidden_gated", "move_hidden_out"]
    assert nodes["move_hidden_readout_column"].op_type == "Unsqueeze"
    assert list(nodes["move_hidden_dots"].input) == ["move_hidden_units", "move_hidden_readout_column"]
    assert "move_hidden_out_column" not in {t.name for t in proto.graph.initializer}  # no second readout
    assert {n.domain for n in proto.graph.node} == {""}, "only standard ONNX operators"


@pytest.mark.parametrize("shared", [0, 1], ids=["gate", "gate-and-shared"])
def test_move_hidden_gate_is_in_the_graph(tmp_path, rng, shared):
    cfg = mk.ModelConfig(**{**CONFIGS["move-hidden-gate"], "move_shared": shared})
    model = with_move_pair_table(trained_looking(mk.Model(cfg, seed=7), rng), rng)
    path = export_onnx(model, tmp_path / "m.onnx")
    sess = session(path)
    feeds = [inputs(rng, cfg, B, L) for B, L in [(1, 1), (1, 9), (6, 13), (9, 42), (3, 5)]]
    check_runs(sess, model, feeds)
    gate_nodes(path)
    gate_changes_the_logits(sess, model, feeds[3], tmp_path)


def test_move_hidden_gate_at_the_shogi_recipe_shapes(tmp_path, rng):
    """The shogi recipe with move_hidden_gate = 1 (manaka.shogi.recipe: V = 2,344, T = 40,
    M = 262,440 in C = 2,187 classes, the 9 x 9 board of 28 token kinds, D = 16, W = 64,
    the shared move embeddings), every parameter away from its start and the gate far from
    0: onnxruntime against mk.Model.forward with L up to 600, empty slots and padded slots
    holding garbage; and the gate changes the logits."""
    from manaka.shogi import recipe
    cfg = recipe.model_config(recipe.recipe(move_hidden_gate=1))
    assert (cfg.move_hidden, cfg.move_shared, cfg.move_hidden_gate, cfg.head_width) == (16, 1, 1, 64)
    model = with_move_pair_table(trained_looking(mk.Model(cfg, seed=9), rng), rng)
    path = export_onnx(model, tmp_path / "m.onnx")
    feeds = [inputs(rng, cfg, B, L) for B, L in [(1, 1), (3, 600), (8, 120), (2, 37)]]
    for feed in feeds[1:]:
        assert (feed["counts"] < feed["legal"].shape[1]).any() and (feed["tokens"][:, 0] == -1).any()
    sess = session(path)
    check_runs(sess, model, feeds)
    gate_nodes(path)
    gate_changes_the_logits(sess, model, feeds[2], tmp_path)


def every_kind_appears(cfg, feeds):
    """Asserts the feeds' used slots hold labels of every kind (labels drawn from all M)."""
    R = cfg.num_moves // cfg.move_kinds
    kinds = set()
    for feed in feeds:
        used = np.arange(feed["legal"].shape[1])[None, :] < feed["counts"][:, None]
        kinds |= set(np.unique(feed["legal"][used] // R).tolist())
    assert kinds == set(range(cfg.move_kinds))


def kind_nodes(path):
    """The move kinds' nodes: the labels split in int64 by Mod and Div (R) and Mod (C), the
    move table read at the move row, the kind table's scores gathered at the kind row."""
    proto = onnx.load(os.fspath(path))
    nodes = {n.output[0]: n for n in proto.graph.node}
    ops = {name: nodes[name].op_type for name in ("move_kind_move_row", "move_kind_kind", "move_kind_class",
                                                  "move_kind_kind_offset", "move_kind_row", "move_kind_scores",
                                                  "move_kind_logits", "legal_scores", "legal_scores_with_move_kinds")}
    assert ops == {"move_kind_move_row": "Mod", "move_kind_kind": "Div", "move_kind_class": "Mod",
                   "move_kind_kind_offset": "Mul", "move_kind_row": "Add", "move_kind_scores": "Gemm",
                   "move_kind_logits": "GatherElements", "legal_scores": "GatherElements",
                   "legal_scores_with_move_kinds": "Add"}
    assert list(nodes["legal_scores"].input) == ["move_scores", "move_kind_move_row"]
    assert list(nodes["move_kind_scores"].input) == ["policy_vector", "move_kind_table"]
    assert list(nodes["move_kind_logits"].input) == ["move_kind_scores", "move_kind_row"]
    assert {n.domain for n in proto.graph.node} == {""}, "only standard ONNX operators"
    shapes = {t.name: list(t.dims) for t in proto.graph.initializer}
    cfg = mk.ModelConfig(**json.loads({p.key: p.value for p in proto.metadata_props}["manaka_config"]))
    W = cfg.head_width
    assert shapes["move_table"] == [cfg.num_moves // cfg.move_kinds, W]
    assert shapes["move_kind_table"] == [max(cfg.move_pairs, 1) * cfg.move_kinds, W]


def kinds_change_the_logits(sess, model, feed, tmp_path):
    """The graph's logits on `feed` differ from those of the same model with its kind table
    at 0 (each label read at its move alone), whose own graph gives mk.Model.forward's
    numbers too."""
    state = model.state_dict()
    state["move_kind_table"] = np.zeros_like(state["move_kind_table"])
    without = mk.Model(model.config)
    without.load_state_dict(state)
    other = session(export_onnx(without, tmp_path / "without-kinds.onnx")).run(["logits"], feed)[0]
    used = np.arange(feed["legal"].shape[1])[None, :] < feed["counts"][:, None]
    assert np.abs(sess.run(["logits"], feed)[0] - other)[used].max() > 0.5
    np.testing.assert_allclose(other, forward(without, feed)[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["move-kinds", "move-kinds-no-pairs", "move-kinds-all"])
def test_move_kinds_are_in_the_graph(tmp_path, rng, name):
    cfg = mk.ModelConfig(**CONFIGS[name])
    model = with_move_pair_table(trained_looking(mk.Model(cfg, seed=7), rng), rng)
    path = export_onnx(model, tmp_path / "m.onnx")
    sess = session(path)
    feeds = [inputs(rng, cfg, B, L) for B, L in [(1, 1), (1, 9), (6, 13), (9, cfg.num_moves), (3, 5)]]
    every_kind_appears(cfg, feeds[3:4])
    check_runs(sess, model, feeds)
    kind_nodes(path)
    kinds_change_the_logits(sess, model, feeds[3], tmp_path)

    # a label the graph cannot read is still an error: the kind table's row of label M or -1 (read as M)
    feed = inputs(rng, cfg, 4, 6, zero_counts=False)
    sess.run(None, feed)
    for bad in (cfg.num_moves, -1, cfg.num_moves + 5):
        wrong = {k: v.copy() for k, v in feed.items()}
        wrong["legal"][1, 0] = bad
        with pytest.raises(Exception, match="GatherElements"):  # onnxruntime's own exception types
            sess.run(None, wrong)


def test_move_kinds_at_the_shogi_recipe_shapes(tmp_path, rng):
    """The shogi recipe with moves "capture-defended-check-escape-mover" (manaka.shogi.recipe:
    V = 2,344, T = 40, M = 3,674,160 labels of 14 kinds of R = 262,440 moves in C = 2,187
    classes, the 9 x 9 board of 28 token kinds, D = 16, W = 64, the shared move embeddings:
    1,680 groups), every parameter away from its start and the kind table far from 0:
    onnxruntime against mk.Model.forward with L up to 600, labels drawn from all M (every
    kind), empty slots and padded slots holding garbage; and the kind table changes the logits."""
    from manaka.shogi import recipe
    cfg = recipe.model_config(recipe.recipe(moves="capture-defended-check-escape-mover"))
    assert (cfg.num_moves, cfg.move_kinds, cfg.move_pairs, cfg.head_width) == (3674160, 14, 2187, 64)
    assert cfg.move_hidden == 16 and cfg.move_shared == 1 and cfg.board_kinds == 28
    model = with_move_pair_table(trained_looking(mk.Model(cfg, seed=9), rng), rng)
    path = export_onnx(model, tmp_path / "m.onnx")
    feeds = [inputs(rng, cfg, B, L) for B, L in [(1, 1), (3, 600), (8, 120), (2, 37)]]
    for feed in feeds[1:]:
        assert (feed["counts"] < feed["legal"].shape[1]).any() and (feed["tokens"][:, 0] == -1).any()
    every_kind_appears(cfg, feeds[1:2])
    sess = session(path)
    check_runs(sess, model, feeds)
    kind_nodes(path)
    kinds_change_the_logits(sess, model, feeds[2], tmp_path)


def value_head_checks(path, model, feeds):
    """The value head's hidden layer in the graph at `path`: its nodes (Gemm by
    value_hidden.weight and .bias of the trunk's output, Relu, the value Gemm by
    value.weight [1, Hv]) and initializers' shapes; and, running the graph with the trunk's
    output and the layer's pre-activations as extra outputs, the value against NumPy in
    float64 from those: pre = x value_hidden.weight^T + b (of both signs, most units
    both ways over the feeds), value = sigmoid(relu(pre) value.weight^T + value.bias), which the same sum
    without the Relu misses."""
    cfg, p = model.config, model.state_dict()
    Hv, x_n = cfg.value_hidden, ("value_power_sums" if cfg.value_power_sums else f"x{len(cfg.hidden)}")
    proto = onnx.load(os.fspath(path))
    nodes = {n.output[0]: n for n in proto.graph.node}
    assert {k: nodes[k].op_type for k in ("value_hidden_linear", "value_hidden", "value_logit")} == \
        {"value_hidden_linear": "Gemm", "value_hidden": "Relu", "value_logit": "Gemm"}
    assert list(nodes["value_hidden_linear"].input) == [x_n, "value_hidden.weight", "value_hidden.bias"]
    assert list(nodes["value_hidden"].input) == ["value_hidden_linear"]
    assert list(nodes["value_logit"].input) == ["value_hidden", "value.weight", "value.bias"]
    assert {n.domain for n in proto.graph.node} == {""}, "only standard ONNX operators"
    shapes = {t.name: list(t.dims) for t in proto.graph.initializer}
    H = cfg.hidden[-1] if cfg.hidden else cfg.num_features
    if cfg.value_power_sums:  # the power sums [B, 2 K D], reshaped from the features' first part
        H = 2 * cfg.orders * cfg.embed_dim
        assert nodes["value_power_sums"].op_type == "Reshape"
    assert shapes["value_hidden.weight"] == [Hv, H] and shapes["value_hidden.bias"] == [Hv]
    assert shapes["value.weight"] == [1, Hv]

    for name in (x_n, "value_hidden_linear"):
        proto.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    W, b, w, c = (np.float64(p[k]) for k in ("value_hidden.weight", "value_hidden.bias", "value.weight", "value.bias"))
    pres = []
    for feed in feeds:
        value, x, pre = sess.run(["value", x_n, "value_hidden_linear"], feed)
        if cfg.value_power_sums:  # x is the power sums of mk.Model's own features
            K, D = cfg.orders, cfg.embed_dim
            want_x = ref.power_sums(np.float64(p["embedding"]), feed["tokens"], K).reshape(len(x), 2 * K * D)
            np.testing.assert_allclose(x, want_x, rtol=1e-5, atol=1e-5)
        want_pre = np.float64(x) @ W.T + b
        np.testing.assert_allclose(pre, want_pre, rtol=1e-4, atol=1e-5)
        want = 1 / (1 + np.exp(-(np.maximum(want_pre, 0) @ w[0] + c[0])))
        np.testing.assert_allclose(value, want, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(value, forward(model, feed)[1], rtol=1e-4, atol=1e-6)
        pres.append(want_pre)
    pre = np.concatenate(pres)
    want = 1 / (1 + np.exp(-(np.maximum(pre, 0) @ w[0] + c[0])))
    linear = 1 / (1 + np.exp(-(pre @ w[0] + c[0])))
    assert 0.2 < (pre > 0).mean() < 0.8                           # the Relu cuts some entries, not all
    assert ((pre > 0).any(axis=0) & (pre < 0).any(axis=0)).mean() >= 0.5  # most units of both signs
    assert np.abs(linear - want).max() > 1e-3                     # the Relu changes the value


@pytest.mark.parametrize("name", ["value-hidden", "value-hidden-features", "value-hidden-all", "value-power-sums",
                                  "value-power-sums-all"])
def test_value_hidden_is_in_the_graph(tmp_path, rng, name):
    cfg = mk.ModelConfig(**CONFIGS[name])
    model = trained_looking(mk.Model(cfg, seed=7), rng)
    if cfg.move_pairs:
        model = with_move_pair_table(model, rng)
    path = export_onnx(model, tmp_path / "m.onnx")
    feeds = [inputs(rng, cfg, B, L) for B, L in [(1, 1), (1, 9), (6, 13), (9, cfg.num_moves), (3, 5)]]
    check_runs(session(path), model, feeds)
    value_head_checks(path, model, feeds)
    if cfg.move_kinds:
        every_kind_appears(cfg, feeds[3:4])
        kind_nodes(path)

    # without the layer (value_hidden = 0) the value Gemm reads the trunk's output itself
    plain = mk.ModelConfig(**{**CONFIGS[name], "value_hidden": 0, "value_power_sums": 0})
    proto = onnx.load(export_onnx(mk.Model(plain), tmp_path / "plain.onnx"))
    nodes = {n.output[0]: n for n in proto.graph.node}
    assert "value_hidden" not in nodes and "value_hidden_linear" not in nodes
    assert list(nodes["value_logit"].input) == [f"x{len(plain.hidden)}", "value.weight", "value.bias"]


def test_value_hidden_at_the_shogi_recipe_shapes(tmp_path, rng):
    """The shogi recipe with --set moves=capture-defended-check-escape-mover --set
    value_hidden=64 (manaka.shogi.recipe.parse_setting, as bench strength reads them): the
    value head's 64 units over the power sums (the recipe's value_power_sums: 2 x 4 x 32 =
    256 inputs, not the trunk's 512 outputs), beside move kinds (M = 3,674,160
    labels of 14 kinds), the 9 x 9 board's relative part, MoveHidden and the shared move
    embeddings; every parameter away from its start: onnxruntime against mk.Model.forward
    with L up to 600, and the value head against NumPy from the graph's own power sums."""
    from manaka.shogi import recipe
    settings = dict(recipe.parse_setting(s) for s in ("moves=capture-defended-check-escape-mover", "value_hidden=64"))
    cfg = recipe.model_config(recipe.recipe(**settings))
    assert cfg.value_hidden == 64 and cfg.value_power_sums == 1 and cfg.hidden == (512,)
    assert (cfg.num_moves, cfg.move_kinds, cfg.move_pairs, cfg.board_kinds, cfg.move_hidden) == (3674160, 14, 2187,
                                                                                               28, 16)
    model = with_move_pair_table(trained_looking(mk.Model(cfg, seed=9), rng), rng)
    assert list(model.shapes)[-2:] == ["value_hidden.weight", "value_hidden.bias"]
    assert model.shapes["value_hidden.weight"] == (64, 256) and model.shapes["value.weight"] == (1, 64)
    path = export_onnx(model, tmp_path / "m.onnx")
    feeds = [inputs(rng, cfg, B, L) for B, L in [(1, 1), (3, 600), (8, 120), (2, 37)]]
    every_kind_appears(cfg, feeds[1:2])
    check_runs(session(path), model, feeds)
    value_head_checks(path, model, feeds)
    kind_nodes(path)


@pytest.mark.parametrize("board, move_hidden, move_shared, gate, kinds, value_hidden",
                         [(None, 0, 0, 0, 0, 0), ((3, 2, 2), 0, 0, 0, 0, 0), ((3, 2, 2), 4, 0, 0, 0, 0),
                          (None, 0, 1, 0, 0, 0), ((3, 2, 2), 4, 1, 0, 0, 0), ((3, 2, 2), 4, 0, 1, 0, 0),
                          ((3, 2, 2), 4, 1, 1, 0, 0), (None, 0, 0, 0, 3, 0), ((3, 2, 2), 4, 1, 1, 2, 0),
                          (None, 0, 0, 0, 0, 4), ((3, 2, 2), 4, 1, 1, 2, 5)],
                         ids=["table", "table-and-relative", "table-relative-and-move-hidden", "table-and-shared",
                              "table-relative-move-hidden-and-shared", "table-relative-and-gated-move-hidden",
                              "table-relative-gated-move-hidden-and-shared", "table-and-kinds",
                              "table-relative-gated-move-hidden-shared-and-kinds", "table-and-value-hidden",
                              "table-relative-gated-move-hidden-shared-kinds-and-value-hidden"])
def test_a_torch_network_with_a_move_pair_table_exports_the_same(tmp_path, rng, board, move_hidden, move_shared,
                                                                  gate, kinds, value_hidden):
    torch = pytest.importorskip("torch", reason="torch not installed: pip install torch (manaka[torch])")
    import manaka.torch as mkt

    fields = dict(board_width=board[0], board_height=board[1], board_kinds=board[2]) if board else {}
    if move_shared:
        fields.update(move_shared=1, num_moves=42)  # 6 classes of 7 groups
    if kinds:
        fields.update(move_kinds=kinds, num_moves=42 * kinds)  # kinds of 42 moves in 6 classes
    cfg = mk.ModelConfig(**{**CONFIGS["move-pairs"], **fields, "move_hidden": move_hidden, "move_hidden_gate": gate,
                            "value_hidden": value_hidden})
    net = mkt.Network(cfg, seed=2)
    state = net.state_dict()
    for name, scale in [("move_pair_table", 0.7), ("move_pair_relative", 0.7), *MOVE_HIDDEN.items(),
                        *MOVE_SHARED.items(), *MOVE_HIDDEN_GATE.items(), *MOVE_KINDS.items(),
                        ("value_hidden.bias", 0.3)]:
        if name in state:
            state[name] = torch.from_numpy(rng.normal(0, scale, tuple(state[name].shape)).astype(np.float32))
    net.load_state_dict(state)
    names = {n.output[0] for n in onnx.load(mkt.export_onnx(net, tmp_path / "n.onnx")).graph.node}
    assert ("move_hidden" in names) == bool(move_hidden) and ("move_shared_group_part" in names) == bool(move_shared)
    assert ("move_hidden_readout" in names) == bool(gate) and ("move_kind_logits" in names) == bool(kinds)
    assert ("value_hidden" in names) == bool(value_hidden)
    path = mkt.export_onnx(net, tmp_path / "net.onnx")
    feed = inputs(rng, cfg, 7, 12)
    logits, value = session(path).run(["logits", "value"], feed)
    with torch.no_grad():
        want_logits, want_value = net(*(torch.from_numpy(feed[k]) for k in ("tokens", "legal", "counts")))
    check_outputs(logits, value, want_logits.numpy(), want_value.numpy(), feed)
    mkt.export_onnx(net.to_model(), tmp_path / "model.onnx")
    assert (tmp_path / "net.onnx").read_bytes() == (tmp_path / "model.onnx").read_bytes()


def test_networks_that_compute_something_else_are_refused(tmp_path):
    torch = pytest.importorskip("torch", reason="torch not installed: pip install torch (manaka[torch])")
    import manaka.torch as mkt

    cfg = mk.ModelConfig(**CONFIGS["small"])

    class Tanh(mkt.Network):
        def body(self, x):
            return torch.tanh(x)

    class Extra(mkt.Network):
        def __init__(self, config):
            super().__init__(config)
            self.scale = torch.nn.Parameter(torch.ones(1))

    class OtherPairs(mkt.Network):
        def move_pair_sums(self, tokens, legal, counts):
            return 2 * super().move_pair_sums(tokens, legal, counts)

    class OtherRelative(mkt.Network):
        def move_pair_relative_sums(self, tokens, legal, counts):
            return 2 * super().move_pair_relative_sums(tokens, legal, counts)

    with pytest.raises(TypeError, match="OtherPairs overrides move_pair_sums"):
        mkt.export_onnx(OtherPairs(mk.ModelConfig(**CONFIGS["move-pairs"])), tmp_path / "d.onnx")
    relative = mk.ModelConfig(**{**CONFIGS["move-pairs"], "board_width": 3, "board_height": 2, "board_kinds": 2})
    with pytest.raises(TypeError, match="OtherRelative overrides move_pair_relative_sums"):
        mkt.export_onnx(OtherRelative(relative), tmp_path / "e.onnx")
    mkt.export_onnx(mkt.Network(relative), tmp_path / "f.onnx")  # its index buffers are no extra state
    os.remove(tmp_path / "f.onnx")

    class OtherHidden(mkt.Network):
        def move_hidden(self, tokens, legal, counts):
            return torch.tanh(super().move_hidden(tokens, legal, counts))

    with pytest.raises(TypeError, match="OtherHidden overrides move_hidden"):
        mkt.export_onnx(OtherHidden(mk.ModelConfig(**{**relative.to_dict(), "hidden": (10,), "move_hidden": 3})),
                        tmp_path / "g.onnx")

    def refused_but_plain_exports(subclass, name, method):
        """`subclass` (overriding `method`) refused, writing nothing; a plain Network of the
        same config exports."""
        config = mk.ModelConfig(**CONFIGS[name])
        with pytest.raises(TypeError, match=f"{subclass.__name__} overrides {method}"):
            mkt.export_onnx(subclass(config), tmp_path / "refused.onnx")
        mkt.export_onnx(mkt.Network(config), tmp_path / "plain.onnx")
        os.remove(tmp_path / "plain.onnx")

    class OtherShared(mkt.Network):
        def move_shared(self, q, legal, counts):
            return 2 * super().move_shared(q, legal, counts)

    class OtherReadout(mkt.Network):
        def move_hidden_readout(self, q=None):
            return torch.tanh(super().move_hidden_readout(q))

    class OtherKind(mkt.Network):
        def move_kind(self, q, legal, counts):
            return 2 * super().move_kind(q, legal, counts)

    class OtherValue(mkt.Network):
        def value_logit(self, x):
            return torch.tanh(super().value_logit(x))

    refused_but_plain_exports(OtherShared, "move-shared", "move_shared")
    refused_but_plain_exports(OtherReadout, "move-hidden-gate", "move_hidden_readout")
    refused_but_plain_exports(OtherKind, "move-kinds", "move_kind")
    refused_but_plain_exports(OtherValue, "value-hidden", "value_logit")
    with pytest.raises(TypeError, match="Tanh overrides body"):
        mkt.export_onnx(Tanh(cfg), tmp_path / "a.onnx")
    with pytest.raises(TypeError, match=r"Extra has parameters or buffers .*'scale'"):
        mkt.export_onnx(Extra(cfg), tmp_path / "b.onnx")
    with pytest.raises(TypeError, match="must be a manaka.Model or a manaka.torch.Network"):
        mkt.export_onnx(torch.nn.Linear(2, 2), tmp_path / "c.onnx")
    # the same changes made to one instance (the class check alone exported the plain graph)
    net = mkt.Network(mk.ModelConfig(**CONFIGS["value-hidden"]))
    net.value_logit = lambda x: torch.tanh(mkt.Network.value_logit(net, x))
    with pytest.raises(TypeError, match="this Network has value_logit replaced on the instance"):
        mkt.export_onnx(net, tmp_path / "d.onnx")
    net = mkt.Network(mk.ModelConfig(**CONFIGS["value-hidden"]))
    handle = net.trunk[0].register_forward_hook(lambda module, args, out: 2 * out)
    with pytest.raises(TypeError, match="forward hooks on trunk.0 may change what the network computes"):
        mkt.export_onnx(net, tmp_path / "e.onnx")
    handle.remove()
    net.register_forward_pre_hook(lambda module, args: args)
    with pytest.raises(TypeError, match="forward hooks on the network"):
        mkt.export_onnx(net, tmp_path / "e.onnx")
    assert not os.listdir(tmp_path)


def test_bad_calls_write_nothing(tmp_path):
    model = mk.Model(mk.ModelConfig(**CONFIGS["small"]))
    path = tmp_path / "m.onnx"
    path.write_bytes(b"keep me")
    with pytest.raises(FileExistsError, match="m.onnx' exists; pass overwrite=True"):
        export_onnx(model, path)
    assert path.read_bytes() == b"keep me"
    for opset in (12, 10**6, 17.0, True):
        with pytest.raises(ValueError, match="opset must be an int"):
            export_onnx(model, tmp_path / "x.onnx", opset=opset)
    with pytest.raises(IsADirectoryError, match="is a directory"):
        export_onnx(model, tmp_path)
    with pytest.raises(TypeError, match="model must be a manaka.Model"):
        export_onnx(model.state_dict(), tmp_path / "x.onnx")
    assert sorted(os.listdir(tmp_path)) == ["m.onnx"]
    diverged = mk.Model(mk.ModelConfig(**CONFIGS["small"]))
    name = sorted(diverged.parameters())[-1]
    diverged.parameters()[name].reshape(-1)[3] = np.nan  # a live view on the CPU
    with pytest.raises(ValueError, match=f"export_onnx: {name} holds a non-finite value .* nothing was written"):
        export_onnx(diverged, path, overwrite=True)
    assert path.read_bytes() == b"keep me"
    export_onnx(model, path, overwrite=True)
    assert len(onnx.load(os.fspath(path)).graph.node) > 0 and sorted(os.listdir(tmp_path)) == ["m.onnx"]


def run_cli(*args, cwd):
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "manaka.export", *map(str, args)], capture_output=True,
                          text=True, timeout=300, cwd=cwd, env=env)


def test_command(tmp_path, rng):
    cfg = mk.ModelConfig(**CONFIGS["small"])
    model = mk.Model(cfg, seed=8)
    model.save(tmp_path / "m.manaka")
    done = run_cli("m.manaka", "m.onnx", "--opset", "18", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "wrote m.onnx" in done.stdout and "legal int32 [batch, legal_moves]" in done.stdout
    check_runs(session(tmp_path / "m.onnx"), model, [inputs(rng, cfg, 5, 9)])
    before = (tmp_path / "m.onnx").read_bytes()

    for args, message in [(("m.manaka", "m.onnx"), "m.onnx exists; pass --overwrite to replace it"),
                          (("missing.manaka", "n.onnx"), "No such file or directory: 'missing.manaka'"),
                          (("m.onnx", "n.onnx"), "'m.onnx': is not a manaka file"),
                          (("m.manaka", "n.onnx", "--opset", "9"), "opset must be an int in [13,")]:
        done = run_cli(*args, cwd=tmp_path)
        assert done.returncode == 2 and done.stdout == "", (args, done.stdout)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("python -m manaka.export: ") and message in lines[0], lines
    assert (tmp_path / "m.onnx").read_bytes() == before and not (tmp_path / "n.onnx").exists()
    assert run_cli("m.manaka", "m.onnx", "--overwrite", cwd=tmp_path).returncode == 0

    # OUT naming MODEL: "m.manaka exists; pass --overwrite", and with it the model was replaced
    # by its export; a path under a file was reported as existing (the hint then misled)
    saved = (tmp_path / "m.manaka").read_bytes()
    for args, message in [(("m.manaka", "m.manaka", "--overwrite"), "m.manaka is the model file MODEL: the export "
                                                                     "would replace the model"),
                          (("m.manaka", "./m.manaka"), "./m.manaka is the model file MODEL"),
                          (("m.manaka", "m.manaka/x.onnx"), "cannot create the folder")]:
        done = run_cli(*args, cwd=tmp_path)
        assert done.returncode == 2 and message in done.stderr and "pass --overwrite" not in done.stderr, \
            (args, done.stderr)
    assert (tmp_path / "m.manaka").read_bytes() == saved

    # a saved model with the move-pair table's relative part: the file keeps it, the command writes it
    relative = mk.ModelConfig(**{**CONFIGS["move-pairs"], "board_width": 3, "board_height": 2, "board_kinds": 2})
    model = with_move_pair_table(mk.Model(relative, seed=8), rng)
    model.save(tmp_path / "r.manaka")
    done = run_cli("r.manaka", "r.onnx", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    check_runs(session(tmp_path / "r.onnx"), model, [inputs(rng, relative, 5, 9)])

    # and with MoveHidden, the shared move embeddings, MoveHidden's gated readout, move kinds and
    # the value head's hidden layer: each in the graph
    for name, config, node in [
            ("h", mk.ModelConfig(**{**relative.to_dict(), "hidden": (10,), "move_hidden": 3}), "move_hidden"),
            ("s", mk.ModelConfig(**CONFIGS["move-shared"]), "move_shared_group_part"),
            ("g", mk.ModelConfig(**CONFIGS["move-hidden-gate"]), "move_hidden_readout"),
            ("k", mk.ModelConfig(**CONFIGS["move-kinds-all"]), "move_kind_logits"),
            ("v", mk.ModelConfig(**CONFIGS["value-hidden-all"]), "value_hidden")]:
        model = with_move_pair_table(mk.Model(config, seed=8), rng)
        model.save(tmp_path / f"{name}.manaka")
        done = run_cli(f"{name}.manaka", f"{name}.onnx", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert node in {n.output[0] for n in onnx.load(tmp_path / f"{name}.onnx").graph.node}, name
        check_runs(session(tmp_path / f"{name}.onnx"), model, [inputs(rng, config, 5, 9)])


def test_command_ctrl_c_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys):
    """Ctrl-C while the graph was built or checked printed a KeyboardInterrupt traceback."""
    from manaka import export

    mk.Model(mk.ModelConfig(**CONFIGS["small"]), seed=8).save(tmp_path / "m.manaka")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(export, "export_onnx", interrupted)
    out = tmp_path / "m.onnx"
    assert export.main([str(tmp_path / "m.manaka"), str(out)]) == 130
    said = capsys.readouterr().err
    assert said == f"python -m manaka.export: interrupted; nothing was written ({out} is as it was)\n"
    assert sorted(os.listdir(tmp_path)) == ["m.manaka"]
