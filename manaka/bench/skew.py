"""A batch with the skew of real positions: in real games a few token ids (pieces on their
usual squares), and so a few pairs, and a few moves carry most occurrences. The uniform seed
batch (bench/step.py) spreads them evenly; the deterministic scatters of the backward passes
(bucket by id, then sum each bucket in order) are slowest on long buckets, which only a
skewed batch makes."""
from __future__ import annotations

import numpy as np

import manaka as mk


def zipf_ids(rng: np.random.Generator, n: int, shape, exponent: float) -> np.ndarray:
    """Ids in [0, n) drawn with probability proportional to 1 / rank**exponent, the ranks
    shuffled over the ids (the hot ones are not simply 0, 1, 2, ...)."""
    p = 1.0 / np.arange(1, n + 1) ** exponent
    p /= p.sum()
    return rng.permutation(n)[rng.choice(n, size=shape, p=p)].astype(np.int32)


def skewed_batch(cfg: mk.ModelConfig, B: int, L: int, seed: int = 0, exponent: float = 1.1) -> mk.Batch:
    """The seed batch's shapes and move counts (bench/step.py seed_batch), with tokens and
    legal moves drawn Zipf(`exponent`): distinct moves per position, padded with -1."""
    if not 8 <= L <= cfg.num_moves:
        raise ValueError(f"skewed_batch: L must be in [8, num_moves = {cfg.num_moves}], got {L}")
    rng = np.random.default_rng(seed)
    counts = np.clip(np.round(rng.lognormal(np.log(90), 0.6, B)), 1, L - 7).astype(np.int32)
    tokens = zipf_ids(rng, cfg.num_tokens, (B, 2, cfg.tokens_per_side), exponent)
    # Moves: Gumbel top-k over Zipf log-weights gives distinct moves, hot ones most often.
    order = rng.permutation(cfg.num_moves)
    logw = -exponent * np.log(np.arange(1, cfg.num_moves + 1))[np.argsort(order)]
    keys = logw[None, :] + rng.gumbel(size=(B, cfg.num_moves))
    legal = np.argsort(-keys, axis=1)[:, :L].astype(np.int32)
    legal[np.arange(L)[None, :] >= counts[:, None]] = -1
    target = (rng.random(B) * counts).astype(np.int32)
    value = rng.choice(np.float32([0.0, 0.5, 1.0]), B)
    return mk.Batch(tokens, legal, counts, target, value)


def hottest_share(ids: np.ndarray, top: int = 10) -> float:
    """The share of the valid (>= 0) occurrences that the `top` most frequent ids carry."""
    ids = ids[ids >= 0]
    counts = np.sort(np.bincount(ids))[::-1]
    return float(counts[:top].sum() / max(counts.sum(), 1))
