"""Shogi rules in C (csrc/shogi/position.c) against cshogi, the oracle: the set of legal
moves, their dlshogi labels and the tokens, on random-game positions and on hand-built
positions for each rule. tools/shogi_oracle.py runs the same comparison at scale."""
import numpy as np
import pytest

from shogi_reference import (c_position, cshogi, hand_heavy_positions, handicap_positions, labels,
                             random_endgames, random_positions, tokens)

from manaka import shogi
from manaka import _core


def assert_agrees(board):
    cells, hand, side = c_position(board)
    status, moves, got_labels, got_tokens = _core.shogi_analyse(cells, hand, side)
    assert status == 0, board.sfen()
    assert sorted(shogi.move_to_usi(int(m)) for m in moves) == sorted(
        cshogi.move_to_usi(m) for m in board.legal_moves), board.sfen()
    np.testing.assert_array_equal(np.sort(got_labels), labels(board), err_msg=board.sfen())
    np.testing.assert_array_equal(got_tokens, tokens(board), err_msg=board.sfen())
    return len(moves)


@pytest.mark.parametrize("seed", [11, 12])
def test_random_games_agree_with_cshogi(seed):
    seed = seed * 1000 + np.random.SeedSequence().entropy % 1000  # fresh games every run
    total, drops, promotions, checks = 0, 0, 0, 0
    for board in random_positions(1500, seed):
        total += assert_agrees(board)
        moves = list(board.legal_moves)
        drops += any(cshogi.move_is_drop(m) for m in moves)
        promotions += any(cshogi.move_is_promotion(m) for m in moves)
        checks += board.is_check()
    # The games must reach the rules the test is for.
    assert drops > 300 and promotions > 300 and checks > 50, (drops, promotions, checks)


@pytest.mark.parametrize("source", ["hand_heavy", "endgames", "handicap"])
def test_hand_heavy_and_handicap_positions_agree_with_cshogi(source):
    """The positions with the most legal moves (many pieces in hand) and those with pieces
    left out of the game, which random games from the start rarely or never reach."""
    seed = 31_000 + np.random.SeedSequence().entropy % 1000
    boards = {"hand_heavy": hand_heavy_positions, "endgames": random_endgames,
              "handicap": handicap_positions}[source](400, seed)
    counts = [assert_agrees(board) for board in boards]
    if source != "handicap":
        assert sum(c > 256 for c in counts) > 100, (seed, sorted(counts)[-5:])


RULE_POSITIONS = {
    # P*9b would mate (the gold on 8c guards 9b and 8b, the knight blocks 8a): illegal;
    # without the gold the same drop only checks: legal
    "pawn_drop_mate": "kn7/9/1G7/9/9/9/9/9/8K b P 1",
    "pawn_drop_check": "k8/9/9/9/9/9/9/9/8K b P 1",
    "two_pawns": "4k4/9/9/9/9/9/4P4/9/4K4 b P 1",
    "pinned_rook": "4k4/9/4r4/9/9/9/4R4/9/4K4 b - 1",
    "pinned_bishop_diagonal": "8k/9/9/9/4b4/9/6B2/9/8K b - 1",
    "double_check": "4k4/9/9/9/9/9/3n5/4r4/4K4 b G 1",
    "forced_promotion": "4k4/P1L6/2N6/9/9/9/9/9/4K4 b - 1",
    "evasion_by_drop": "4k4/9/9/9/4r4/9/9/9/4K4 b BG 1",
    "white_to_move": "4k4/4p4/9/9/9/9/9/9/4K4 w rb 1",
    # the known maximum: 593 legal moves
    "most_moves": "R8/2K1S1SSk/4B4/9/9/9/9/9/1L1L1L3 b RBGSNLP3g3n17p 1",
}


@pytest.mark.parametrize("name", sorted(RULE_POSITIONS))
def test_rule_positions_agree_with_cshogi(name):
    board = cshogi.Board(RULE_POSITIONS[name])
    assert assert_agrees(board) > 0


def test_rule_positions_say_what_they_test():
    assert "P*9b" not in shogi.legal_moves(RULE_POSITIONS["pawn_drop_mate"])
    assert "P*9c" in shogi.legal_moves(RULE_POSITIONS["pawn_drop_mate"])
    assert "P*9b" in shogi.legal_moves(RULE_POSITIONS["pawn_drop_check"])
    assert not any(m.startswith("P*5") for m in shogi.legal_moves(RULE_POSITIONS["two_pawns"]))
    pinned = [m for m in shogi.legal_moves(RULE_POSITIONS["pinned_rook"]) if m.startswith("5g")]
    assert pinned and all(m[2] == "5" for m in pinned)  # along the file only
    double = shogi.legal_moves(RULE_POSITIONS["double_check"])
    assert double and all(m.startswith("5i") for m in double)  # only the king moves
    forced = shogi.legal_moves(RULE_POSITIONS["forced_promotion"])
    assert "9b9a+" in forced and "9b9a" not in forced and "7c8a" not in forced
    assert len(shogi.legal_moves(RULE_POSITIONS["most_moves"])) == 593


def test_labels_round_trip_and_bad_input():
    sfen = RULE_POSITIONS["white_to_move"]
    for usi in shogi.legal_moves(sfen):
        assert shogi.label_to_usi(shogi.usi_to_label(usi, sfen), sfen) == usi
    with pytest.raises(ValueError, match="not a legal move"):
        shogi.usi_to_label("5a5i", sfen)
    # arguments of the wrong type are named (int() read "7" and refused None unnamed; 5 was
    # "not a legal move")
    import numpy as np
    for bad in ("7", None, 1.0):
        with pytest.raises(TypeError, match=f"^shogi: label must be an int, got {type(bad).__name__}$"):
            shogi.label_to_usi(bad, sfen)
    usi = shogi.legal_moves(sfen)[0]
    assert shogi.label_to_usi(np.int32(shogi.usi_to_label(usi, sfen)), sfen) == usi
    with pytest.raises(TypeError, match="^shogi: a USI move must be a str, got int$"):
        shogi.usi_to_label(5, sfen)
    with pytest.raises(ValueError, match="9 ranks"):
        shogi.parse_sfen("9/9 b - 1")
    with pytest.raises(ValueError, match="exactly one king"):
        shogi.encode("9/9/9/9/9/9/9/9/4K4 b - 1")
    with pytest.raises(ValueError, match="two unpromoted pawns"):
        shogi.encode("4k4/9/9/9/4P4/4P4/9/9/4K4 b - 1")
    with pytest.raises(ValueError, match="not to move is in check"):
        shogi.encode("4k4/4R4/9/9/9/9/9/9/4K4 b - 1")


def test_sfen_round_trip():
    for board in random_positions(200, 5):
        pos = shogi.parse_sfen(board.sfen())
        assert (pos.board, pos.hand, pos.side) == c_position(board)
        assert cshogi.Board(pos.sfen()).sfen().split()[:3] == board.sfen().split()[:3]


def test_sfen_keeps_the_move_number():
    for board in random_positions(20, 9):
        n = int(np.random.default_rng(board.move_number).integers(1, 400))
        sfen = " ".join(board.sfen().split()[:3] + [str(n)])
        assert shogi.parse_sfen(sfen).sfen() == sfen
        assert shogi.parse_sfen("sfen " + sfen).move_number == n
    start = shogi.STARTING_SFEN.rsplit(" ", 1)[0]
    assert shogi.parse_sfen(start).sfen() == start + " 1"  # no move number: 1
    for bad, part in ((start + " x", "move number"), (start + " -3", "move number"),
                      (start + " 1 moves 7g7f", "'moves 7g7f'")):
        with pytest.raises(ValueError, match=part):
            shogi.parse_sfen(bad)


@pytest.mark.parametrize("hand,part", [("0P", "bad count '0' before 'P'"), ("P2", "ends with the count '2'"),
                                       ("2", "ends with the count '2'"), ("1P", "bad count '1'"),
                                       ("02P", "bad count '02'"), ("19p", "bad count '19'"),
                                       ("2X", "bad hand piece 'X'"), ("R2", "ends with the count '2'")])
def test_malformed_hands_are_refused_naming_the_part(hand, part):
    with pytest.raises(ValueError, match=part):
        shogi.parse_sfen(f"4k4/9/9/9/9/9/9/9/4K4 b {hand} 1")


def test_well_formed_hands_agree_with_cshogi():
    for hand in ("-", "P", "2P", "18p", "RB2G3S4N4Lp", "r2b", "Pp"):
        sfen = f"4k4/9/9/9/9/9/9/9/4K4 b {hand} 1"
        pos = shogi.parse_sfen(sfen)
        assert (pos.board, pos.hand, pos.side) == c_position(cshogi.Board(sfen)), hand
        assert pos.sfen() == cshogi.Board(sfen).sfen(), hand


@pytest.mark.parametrize("row", ["９", "²7", "09", "4０5", "81"])
def test_a_board_digit_other_than_1_to_9_is_refused_naming_the_rank(row):
    # str.isdigit took "９" as 9 and "0" as an empty run of files; "²" failed in int() unnamed
    sfen = f"4k4/9/9/{row}/9/9/9/9/4K4 b - 1"
    if row == "81":  # two digits in a row are unusual but spell 9 files
        assert shogi.parse_sfen(sfen) == shogi.parse_sfen(sfen.replace("81", "9"))
        return
    with pytest.raises(ValueError, match=r"^shogi: .*bad board at rank 4"):
        shogi.parse_sfen(sfen)


def test_a_position_made_by_hand_is_checked_for_its_layout():
    start = shogi.parse_sfen(shogi.STARTING_SFEN)
    Position = type(start)
    for args, part in (((start.board[:80], start.hand, 0), "81-byte board and a 14-byte hand"),
                       ((start.board, start.hand + b"\0", 0), "81-byte board and a 14-byte hand"),
                       ((start.board, start.hand, 2), "side must be 0 .* got 2$"),
                       ((start.board, start.hand, 2**40), "side must be 0"),  # an unnamed OverflowError in C
                       ((start.board, start.hand, 0, -1), "move_number must be >= 0")):
        with pytest.raises(ValueError, match=part):
            Position(*args)
    # a cell that is no piece: sfen() wrote 255 as "+g" (a promoted gold that shogi has not)
    bad = Position(b"\xff" + start.board[1:], start.hand, 0)
    with pytest.raises(ValueError, match="cell 0 holds 255, which is no piece"):
        bad.sfen()
    with pytest.raises(ValueError, match="no piece"):
        shogi.legal_moves(bad)
    assert Position(start.board, start.hand, 0, 7).sfen() == shogi.STARTING_SFEN.replace(" 1", " 7")
