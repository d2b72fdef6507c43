"""bench/skew.py: a batch with real positions' skew is a valid batch (the model accepts it)
whose hot ids carry most occurrences, unlike the uniform seed batch."""
import numpy as np
import pytest

import manaka as mk
from manaka.bench.skew import hottest_share, skewed_batch, zipf_ids
from manaka.bench.step import seed_batch

CFG = mk.ModelConfig(num_tokens=300, num_moves=400, tokens_per_side=12, embed_dim=8, orders=2, pair_dim=4,
                     hidden=(16,), head_width=8)


def test_skewed_batch_is_a_valid_batch_with_distinct_moves():
    seed = int(np.random.default_rng().integers(1 << 30))
    b = skewed_batch(CFG, 64, 120, seed=seed)
    assert b.tokens.shape == (64, 2, 12) and b.legal.shape == (64, 120)
    assert b.tokens.min() >= 0 and b.tokens.max() < CFG.num_tokens
    for row, n in zip(b.legal, b.counts):
        assert 1 <= n <= 120 - 7
        assert (row[:n] >= 0).all() and (row[:n] < CFG.num_moves).all() and (row[n:] == -1).all()
        assert len(np.unique(row[:n])) == n
    assert ((b.target >= 0) & (b.target < b.counts)).all()
    model = mk.Model(CFG, seed=seed)
    loss = model.loss_and_grad(b)[0]["loss"]
    assert np.isfinite(loss)


def test_hot_ids_carry_most_occurrences_unlike_the_uniform_batch():
    skewed, uniform = skewed_batch(CFG, 256, 120), seed_batch(CFG, 256, 120)
    assert hottest_share(skewed.tokens) > 0.3 > 3 * hottest_share(uniform.tokens)
    assert hottest_share(skewed.legal) > 2 * hottest_share(uniform.legal)


def test_zipf_ids_follow_the_rank_law():
    rng = np.random.default_rng()
    ids = zipf_ids(rng, 50, 200_000, 1.0)
    counts = np.sort(np.bincount(ids, minlength=50))[::-1]
    expected = 200_000 / np.arange(1, 51) / (1.0 / np.arange(1, 51)).sum()
    np.testing.assert_allclose(counts[:5], expected[:5], rtol=0.05)


def test_hottest_share_counts_only_valid_ids():
    assert hottest_share(np.array([3, 3, 3, 1, -1, -1]), top=1) == pytest.approx(0.75)


def test_bad_max_legal_raises_naming_it():
    with pytest.raises(ValueError, match="L must be"):
        skewed_batch(CFG, 4, 5)
