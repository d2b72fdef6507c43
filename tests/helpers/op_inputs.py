"""Random inputs for the op tests: one place that knows how to make legal batches."""
import numpy as np


def legal_batch(rng, B, L, W, M, counts="random", pad=-1):
    hidden = rng.standard_normal((B, W), dtype=np.float32)
    table = rng.standard_normal((M, W), dtype=np.float32)
    indices = rng.integers(0, M, (B, L), dtype=np.int32)
    if counts == "random":
        counts = rng.integers(0, L + 1, B, dtype=np.int32)
    elif counts == "full":
        counts = np.full(B, L, np.int32)
    elif counts == "none":
        counts = None
    if counts is not None:
        pad_value = rng.integers(-10**6, 10**6, (B, L)) if pad == "garbage" else pad
        indices = np.where(np.arange(L)[None] < counts[:, None], indices, pad_value).astype(np.int32)
    return hidden, table, indices, counts


def legal_indices(rng, B, L, M, counts=True, collide=None):
    """indices [B, L] and counts [B] (the first row empty, the last full), with -1 padding
    beyond counts[b]; counts=False: every slot legal and counts None. `collide` draws moves
    from the first `collide` ids only (many (b, l) sharing a row)."""
    indices = rng.integers(0, collide or M, size=(B, L)).astype(np.int32)
    if not counts:
        return indices, None
    c = rng.integers(0, L + 1, size=B).astype(np.int32)
    c[0], c[-1] = 0, L
    indices[np.arange(L)[None, :] >= c[:, None]] = -1
    return indices, c


def tokens(rng, B, S, T, V, empty=0.25):
    tok = rng.integers(0, V, (B, S, T), dtype=np.int32)
    tok[rng.random(tok.shape) < empty] = -1
    return tok


def policy_head_batch(rng, B, L, W, M, counts="random", soft=False, scale=1.0):
    """Inputs of the fused policy head: (q, table, legal, counts, target, policy_target).
    counts: "random" in [1, L], "one", or "full"; padded slots hold garbage ids (and NaN
    soft targets), which the op must never read. `scale` sets the logits' spread."""
    q = (rng.standard_normal((B, W)) * scale / np.sqrt(W)).astype(np.float32)
    table = rng.standard_normal((M, W), dtype=np.float32)
    n = {"random": lambda: rng.integers(1, L + 1, B), "one": lambda: np.ones(B),
         "full": lambda: np.full(B, L)}[counts]().astype(np.int32)
    valid = np.arange(L)[None] < n[:, None]
    legal = np.where(valid, rng.integers(0, M, (B, L)), rng.integers(-10**6, 10**6, (B, L)))
    legal = legal.astype(np.int32)
    target = (rng.random(B) * n).astype(np.int32)
    policy_target = None
    if soft:
        w = rng.random((B, L)) ** 2
        w = np.where(valid, w, 0.0)
        policy_target = np.where(valid, w / w.sum(axis=1, keepdims=True), np.nan).astype(np.float32)
    return q, table, legal, n, target, policy_target
