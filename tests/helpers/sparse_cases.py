"""The sparse table updates' cases (pair_update, move_update), shared by their CPU tests
(against the float64 reference) and their CUDA tests (against the CPU): hyperparameters, a
schedule, a pair table and a move table that small batches name only a few rows of, and
batches whose rows come back after gaps."""
import manaka as mk
import model_cases as cases

HYPER = dict(lr=3e-2, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)
SCHEDULE = dict(warmup_steps=3, schedule="cosine", total_steps=14, min_lr=1e-3)


def sparse_config():
    """A pair table of 820 rows that batches of 3 positions name only a few of, irregularly."""
    return cases.config(hidden=(8,), num_tokens=40, T=4)


def move_config():
    """sparse_config with a move table of 120 rows, of which batches of 3 positions (up to
    27 legal moves) name only a few."""
    return cases.config(hidden=(8,), num_tokens=40, T=4, num_moves=120)


def batches(cfg, n, seed=0):
    """n batches; every third one repeats the first batch's tokens (the move tests' configs:
    and its legal moves), so some rows come back after gaps of different lengths while most
    stay untouched."""
    out = [cases.batch(cfg, B=3, seed=seed + i, empty_fraction=0.3) for i in range(n)]
    moves = cfg.num_moves == move_config().num_moves
    for i in range(3, n, 3):
        legal = (out[0] if moves else out[i])
        out[i] = mk.Batch(out[0].tokens, legal.legal, legal.counts, legal.target, out[i].value)
    return out
