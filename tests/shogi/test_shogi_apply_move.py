"""Playing a move (csrc/shogi/move_apply.c) against cshogi, the oracle: the position after
every legal move of random-game positions is cshogi's Board.push, and in_check is cshogi's
is_check; moves that are not legal, or not moves, are refused with a ValueError."""
import re

import numpy as np
import pytest

from shogi_reference import c_position, cshogi, random_positions

from manaka import shogi
from manaka.shogi import position as shogi_position


def c_pos(board):
    cells, hand, side = c_position(board)
    return shogi_position.Position(cells, hand, side)


@pytest.mark.parametrize("seed", [21, 22])
def test_every_legal_move_agrees_with_cshogi(seed):
    seed = seed * 1000 + np.random.SeedSequence().entropy % 1000  # fresh games every run
    played, captures, drops, promotions, checks = 0, 0, 0, 0, 0

    def covered():
        return played > 10000 and captures > 300 and drops > 1000 and promotions > 100 and checks > 100

    # 300 random positions give ~10,000 moves, a little less in some draws: more positions
    # (at most 4 x 300) until every kind of move has been played often enough.
    boards = (b for chunk in range(4) for b in random_positions(300, seed + 100_000 * chunk))
    for board in boards:
        if covered():
            break
        pos = c_pos(board)
        sfen = board.sfen()
        for move in board.legal_moves:
            usi = cshogi.move_to_usi(move)
            assert shogi.usi_to_move(usi) == cshogi.move16(move), usi
            captures += board.piece(cshogi.move_to(move)) != 0
            drops += cshogi.move_is_drop(move)
            promotions += cshogi.move_is_promotion(move)
            after, check = pos.play(usi)
            board.push(move)
            try:
                assert after == c_pos(board), (sfen, usi)
                assert check == board.is_check(), (sfen, usi)
                checks += check
                # the SFEN text too, move number included
                assert shogi.apply_move(sfen, usi) == board.sfen(), (sfen, usi)
            finally:
                board.pop()
            played += 1
    assert covered(), (played, captures, drops, promotions, checks)


def test_in_check_agrees_with_cshogi():
    seen = 0
    for board in random_positions(2000, 23 + np.random.SeedSequence().entropy % 1000):
        assert shogi.in_check(board.sfen()) == board.is_check(), board.sfen()
        seen += board.is_check()
    assert seen > 20


def test_illegal_and_malformed_moves_are_refused():
    start = shogi.STARTING_SFEN
    for usi in ["7g7e", "5i5g", "P*5e", "8h2b", "2h2a+", "7g7f+"]:  # well-formed, not legal here
        with pytest.raises(ValueError, match="not a legal move"):
            shogi.apply_move(start, usi)
        # Position.play names the move as given (the C core's message has its move16 number)
        with pytest.raises(ValueError, match=f"shogi: {re.escape(usi)} is not a legal move of '{re.escape(start)}'"):
            shogi.parse_sfen(start).play(usi)
    for usi in ["", "7g", "7g7g", "0a1b", "7g7f++", "K*5e", "p*5e", "7j7f", "resign"]:
        with pytest.raises(ValueError, match="not a USI move"):
            shogi.apply_move(start, usi)
    with pytest.raises(TypeError):
        shogi.usi_to_move(7)
    with pytest.raises(ValueError, match="not a valid position"):
        shogi.apply_move("4k4/9/9/9/9/9/9/9/9 b - 1", "5a5b")  # one king only
    with pytest.raises(ValueError, match="move number"):
        shogi.apply_move("lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL b - x", "7g7f")


def test_move_to_usi_is_usi_to_move_s_inverse_and_refuses_what_is_no_move():
    for board in random_positions(30, 24):
        for move in board.legal_moves:
            usi = cshogi.move_to_usi(move)
            assert shogi.move_to_usi(shogi.usi_to_move(usi)) == usi == shogi.move_to_usi(cshogi.move16(move))
    # numbers that are no move16 were spelled from their bits: "1a1a", "1a15b", "1a10a", "P*10a",
    # an IndexError for a drop of no piece or a negative number
    for bad in (0, 127, 81, 81 | 81 << 7, 5 | 100 << 7, 1 << 16, 2**40, -5, 40 | 81 << 7 | 1 << 14, 10 | 10 << 7):
        with pytest.raises(ValueError, match=f"^shogi: {bad} is not a move16"):
            shogi.move_to_usi(bad)
    for bad in (1.5, None, True):
        with pytest.raises(TypeError, match="^shogi: a move16 must be an int"):
            shogi.move_to_usi(bad)
    assert shogi.move_to_usi(np.int32(shogi.usi_to_move("8h2b+"))) == "8h2b+"


def test_a_move_that_is_no_int_is_refused_and_a_game_is_left_as_it_was():
    from manaka.shogi.game import Game

    start = shogi.parse_sfen(shogi.STARTING_SFEN).play("7g7f")[0]
    # 1.5 was int()-ed to move 1 (1a1b, legal for White here) and played; True was move 1 too
    for bad in (1.5, True, None):
        with pytest.raises(TypeError, match="^shogi: a move must be USI text or a move16 int, got "):
            start.play(bad)
    with pytest.raises(ValueError, match=f"^shogi: move must be a 16-bit move, got {2**40}$"):
        start.play(2**40)  # an OverflowError
    # Game.play replaced its position before the move's text failed: the game was a move
    # ahead of its `moves` (USI text, 1.5 played as 1a1b)
    game = Game(start.sfen())
    for bad in ("7g7f", 1.5, shogi.usi_to_move("7g7e")):
        with pytest.raises((TypeError, ValueError)):
            game.play(bad)
        assert game.position == start and game.ply == 0
    game.play("3c3d")
    game.play(shogi.usi_to_move("2g2f"))
    assert game.moves == ["3c3d", "2g2f"] and game.position.sfen() == shogi.apply_move(
        shogi.apply_move(start.sfen(), "3c3d"), "2g2f")


def test_move_number_and_side():
    after = shogi.apply_move("sfen " + shogi.STARTING_SFEN.replace(" 1", " 41"), "7g7f")
    assert after == "lnsgkgsnl/1r5b1/ppppppppp/9/9/2P6/PP1PPPPPP/1B5R1/LNSGKGSNL w - 42"
    assert shogi.apply_move(shogi.STARTING_SFEN.rsplit(" ", 1)[0], "7g7f").endswith(" w - 2")
    # a capture of a promoted piece goes to the hand unpromoted; a drop takes it from there
    after = shogi.apply_move("4k4/4r4/9/9/4+R4/9/9/9/4K4 w - 1", "5b5e")
    assert after == "4k4/9/9/9/4r4/9/9/9/4K4 b r 2"
    assert shogi.in_check(after)
    assert shogi.apply_move("4k4/9/9/9/9/9/9/9/4K4 w r 2", "R*5h") == "4k4/9/9/9/9/9/9/4r4/4K4 b - 3"
