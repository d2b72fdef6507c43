"""shogi.policy: a model's legal moves with probabilities on one position, against the
same forward pass done by hand on the reference encoding."""
import numpy as np
import pytest

from shogi_reference import cshogi, labels, random_positions, tokens

import manaka as mk
from manaka import shogi


def small_model(seed):
    cfg = mk.ModelConfig(num_tokens=shogi.NUM_TOKENS, num_moves=shogi.NUM_LABELS, tokens_per_side=40,
                         embed_dim=8, pair_dim=2, hidden=(16,), head_width=16)
    return mk.Model(cfg, device="cpu", seed=seed)


def test_policy_equals_a_forward_pass_on_the_reference_encoding():
    model = small_model(int(np.random.SeedSequence().entropy % 1000))
    for board in random_positions(20, 41):
        ranked, value = shogi.policy(model, board.sfen())
        legal = labels(board)[None]
        batch = mk.Batch(tokens(board)[None], legal, np.array([legal.shape[1]], np.int32),
                         np.zeros(1, np.int32), np.full(1, 0.5, np.float32))
        logits, v = model.forward(batch)
        p = np.exp(logits[0] - logits[0].max())
        p /= p.sum()
        want = {cshogi.move_to_usi(m): p[list(legal[0]).index(cshogi.dlshogi.make_move_label(m, board.turn))]
                for m in board.legal_moves}
        assert {u for u, _ in ranked} == set(want)
        for u, prob in ranked:
            assert prob == pytest.approx(want[u], rel=1e-5)
        assert [q for _, q in ranked] == sorted((q for _, q in ranked), reverse=True)
        assert sum(q for _, q in ranked) == pytest.approx(1.0, abs=1e-6)
        assert value == pytest.approx(float(v[0]), rel=1e-6) and 0 < value < 1


def test_policy_refuses_a_bad_position():
    with pytest.raises(ValueError, match="exactly one king"):
        shogi.policy(small_model(0), "9/9/9/9/9/9/9/9/4K4 b - 1")


def test_policy_on_a_mated_position_gives_no_moves_and_the_value():
    model = small_model(int(np.random.SeedSequence().entropy % 1000))
    for sfen in ("4k4/9/9/9/9/9/4p4/4g4/4K4 b 2r 1",             # gold mate, the gold defended
                 "4k4/9/9/9/9/9/9/3+r1+r3/4K4 b - 1"):           # two dragons
        board = cshogi.Board(sfen)
        assert board.is_check() and not list(board.legal_moves)
        ranked, value = shogi.policy(model, sfen)
        assert ranked == []
        # the value head reads only the tokens: any legal list gives the same value
        batch = mk.Batch(tokens(board)[None], np.array([[5, 9]], np.int32), np.array([2], np.int32),
                         np.zeros(1, np.int32), np.full(1, 0.5, np.float32))
        assert value == pytest.approx(float(model.forward(batch)[1][0]), rel=1e-6) and 0 < value < 1


@pytest.mark.parametrize("fields", [dict(num_tokens=50, num_moves=60, tokens_per_side=4),
                                    dict(num_tokens=shogi.NUM_TOKENS, num_moves=shogi.NUM_LABELS, tokens_per_side=30),
                                    dict(num_tokens=100, num_moves=shogi.NUM_LABELS, tokens_per_side=40),
                                    dict(num_tokens=shogi.NUM_TOKENS, num_moves=61, tokens_per_side=40)])
def test_a_model_that_cannot_read_shogi_positions_is_refused_by_name(fields):
    from manaka.shogi import search

    model = mk.Model(mk.ModelConfig(**fields, embed_dim=2, orders=1, pair_dim=1, hidden=(), head_width=2))
    with pytest.raises(ValueError, match=r"^shogi\.policy: .*not a shogi model"):
        shogi.policy(model, shogi.STARTING_SFEN)
    with pytest.raises(ValueError, match=r"^shogi Evaluator: .*not a shogi model"):
        search.Evaluator(model)
    with pytest.raises(TypeError, match="shogi.policy: expected a manaka model"):
        shogi.policy(object(), shogi.STARTING_SFEN)


def test_a_model_with_more_token_ids_than_shogi_reads_it():
    # every shogi token id is in range: such a model plays (the rule evaluate's data check has)
    cfg = mk.ModelConfig(num_tokens=shogi.NUM_TOKENS + 6, num_moves=shogi.NUM_LABELS, embed_dim=2, orders=1,
                         pair_dim=1, hidden=(), head_width=2)
    ranked, _ = shogi.policy(mk.Model(cfg), shogi.STARTING_SFEN)
    assert len(ranked) == 30
