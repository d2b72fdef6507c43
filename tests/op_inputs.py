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


def tokens(rng, B, S, T, V, empty=0.25):
    tok = rng.integers(0, V, (B, S, T), dtype=np.int32)
    tok[rng.random(tok.shape) < empty] = -1
    return tok
