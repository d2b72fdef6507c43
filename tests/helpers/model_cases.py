"""Small random configurations, batches and dataset arrays shared by the tests: the one
place that holds the small configuration (SMALL, SMALL_MODEL)."""
from types import SimpleNamespace

import numpy as np

import manaka as mk


# The shape of the small datasets of the data, fit and checkpoint tests
# (mk.Dataset.synthetic(N, SMALL)) ...
SMALL = SimpleNamespace(num_tokens=300, num_moves=500, tokens_per_side=8, orders=2)
# ... and the small model trained on them.
SMALL_MODEL = mk.ModelConfig(num_tokens=300, num_moves=500, tokens_per_side=8, embed_dim=8, orders=2, pair_dim=2,
                             hidden=(16,), head_width=8)


def arrays(N=6, T=4, V=50, M=40, seed=0, soft=False):
    """Keyword arguments of mk.Dataset.from_arrays: N random positions of up to 8 legal moves
    among M, T tokens a side below V (some -1), soft policy targets when `soft`."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 9, N)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    moves = np.concatenate([rng.choice(M, c, replace=False) for c in counts])
    tokens = rng.integers(-1, V, (N, 2, T))
    out = dict(tokens=tokens, legal_offsets=offsets, legal_moves=moves,
               target=rng.integers(0, counts), value=rng.random(N), num_tokens=V, num_moves=M)
    if soft:
        p = rng.random(len(moves))
        out["policy_target"] = p / np.repeat(np.add.reduceat(p, offsets[:-1]), counts)
    return out


def config(hidden=(12,), orders=3, pair_dim=4, num_tokens=11, num_moves=17, T=6, D=5, W=7, move_pairs=0,
           board=(0, 0, 0), move_hidden=0, move_shared=0, move_hidden_gate=0, move_kinds=0,
           value_hidden=0, value_power_sums=0):
    """board: (W, H, K) of the move-pair table's relative part; move_hidden: MoveHidden's units;
    move_shared: the shared move embeddings (num_moves a multiple of move_pairs);
    move_hidden_gate: MoveHidden's readout gated by q; move_kinds: F kinds of each move
    (num_moves / F a multiple of move_pairs); value_hidden: the value head's hidden layer;
    value_power_sums: that layer reads the power sums, not the trunk."""
    return mk.ModelConfig(num_tokens=num_tokens, num_moves=num_moves, tokens_per_side=T,
                          embed_dim=D, orders=orders, pair_dim=pair_dim, hidden=hidden, head_width=W,
                          move_pairs=move_pairs, board_width=board[0], board_height=board[1],
                          board_kinds=board[2], move_hidden=move_hidden, move_shared=move_shared,
                          move_hidden_gate=move_hidden_gate, move_kinds=move_kinds,
                          value_hidden=value_hidden, value_power_sums=value_power_sums)


def model(cfg, seed=0):
    """mk.Model(cfg, seed) with a random move_pair_table, move_pair_relative,
    move_hidden_out, shared move rows, gate and kind table if it has them (they start at 0, which would test
    nothing)."""
    m = mk.Model(cfg, seed=seed)
    rng = np.random.default_rng(seed)
    for name in ("move_pair_table", "move_pair_relative", "move_hidden_out", "move_shared_class",
                 "move_shared_group", "move_hidden_gate", "move_kind_table"):
        table = m.parameters().get(name)
        if table is not None:
            table[...] = rng.standard_normal(table.shape, dtype=np.float32)
    return m


def batch(cfg, B=6, L=9, seed=0, soft=False, empty_fraction=0.25):
    """A valid random batch: some empty token slots, legal ids garbage (-1) in padded slots."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, cfg.num_tokens, (B, 2, cfg.tokens_per_side))
    tokens[rng.random(tokens.shape) < empty_fraction] = -1
    counts = rng.integers(1, L + 1, B)
    legal = np.full((B, L), -1)
    for b in range(B):
        legal[b, :counts[b]] = rng.choice(cfg.num_moves, counts[b], replace=counts[b] > cfg.num_moves)
    target = (rng.random(B) * counts).astype(np.int64)
    value = rng.choice([0.0, 0.5, 1.0], B).astype(np.float32)
    policy_target = None
    if soft:
        policy_target = np.zeros((B, L), np.float32)
        for b in range(B):
            w = rng.random(counts[b]) ** 2
            policy_target[b, :counts[b]] = w / w.sum()
    return mk.Batch(tokens, legal, counts, target, value, policy_target)


def rel_err(got, want):
    """Norm-wise relative error (robust to entries that are ~0 in both)."""
    got, want = np.float64(got), np.float64(want)
    scale = max(np.abs(want).max(), 1e-30)
    return float(np.abs(got - want).max() / scale)


def assert_parameters_match(got, want, tol=None):
    """Every parameter of model `got` equals model `want`'s: exactly (tol None), or to a
    rel_err(got, want) below `tol`."""
    have = got.state_dict()
    for name, a in want.state_dict().items():
        if tol is None:
            np.testing.assert_array_equal(have[name], a, err_msg=name)
        else:
            assert rel_err(have[name], a) < tol, name


def assert_moments_match(got, want, tol):
    """Both AdamW moments of every tensor of trainer `got` are within rel_err `tol` of
    trainer `want`'s."""
    g, w = got.state_dict(), want.state_dict()
    for kind in ("exp_avg", "exp_avg_sq"):
        for name in w[kind]:
            assert rel_err(g[kind][name], w[kind][name]) < tol, (kind, name)


def snapshot(model, trainer):
    """Copies of a model's parameters and its trainer's state, for assert_unchanged."""
    return ({n: np.array(a, copy=True) for n, a in model.state_dict().items()},
            trainer.state_dict(), trainer.step_count)


def assert_unchanged(model, trainer, snap):
    """The model's parameters, the trainer's moments and step count are exactly as in `snap`
    (a refused batch must leave no trace)."""
    params, state, steps = snap
    assert trainer.step_count == steps
    for n, a in model.state_dict().items():
        np.testing.assert_array_equal(a, params[n], err_msg=n)
    after = trainer.state_dict()
    for kind in ("exp_avg", "exp_avg_sq"):
        for n in state[kind]:
            np.testing.assert_array_equal(after[kind][n], state[kind][n], err_msg=f"{kind} {n}")


def state_bytes(model, trainer):
    """Every parameter and moment as bytes, plus the step count: two are equal exactly when
    the states are bitwise equal."""
    state = trainer.state_dict()
    out = {f"p.{n}": a.tobytes() for n, a in model.state_dict().items()}
    for kind in ("exp_avg", "exp_avg_sq"):
        out.update({f"{kind}.{n}": a.tobytes() for n, a in state[kind].items()})
    out["step_count"] = trainer.step_count
    return out


def staged_twin(model):
    """The same model on the "cpu_staged" backend: CPU kernels behind the device-memory path
    of model.c and trainer.c (batches staged with to_device, results read with to_host, the
    non-finite guard left to AdamW's device-side flag) -- the path a GPU backend takes."""
    twin = mk.Model.__new__(mk.Model)
    twin.config, twin.device, twin.seed = model.config, "cpu_staged", model.seed
    twin.policy_head = model.policy_head
    twin._core = mk._core.Model(*model.config.to_dict().values(), backend="cpu_staged", seed=model.seed,
                                fused_head=model.policy_head == "fused")
    twin._shapes = model.shapes
    twin.load_state_dict(model.state_dict())  # a move_pair_table made random by `model()`
    return twin
