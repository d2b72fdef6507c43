"""HCPE's position code written by manaka (csrc/shogi/records.c, mk_shogi_encode_hcp)
against cshogi's Board.to_hcp, bit for bit, on random-game positions (pieces in hand,
promoted pieces, both sides to move), and decoded back by manaka's own decoder."""
import numpy as np
import pytest

from shogi_reference import c_position, cshogi, random_positions

from manaka import _core, shogi


def cshogi_hcp(board) -> bytes:
    out = np.zeros(1, cshogi.HuffmanCodedPos)
    board.to_hcp(out)
    return out.tobytes()


@pytest.mark.parametrize("seed", [31, 32])
def test_random_positions_match_cshogi_bit_for_bit(seed):
    seed = seed * 1000 + np.random.SeedSequence().entropy % 1000  # fresh games every run
    n, in_hand, promoted, white = 0, 0, 0, 0
    records = []
    for board in random_positions(3000, seed):
        cells, hand, side = c_position(board)
        got = _core.shogi_encode_hcp(cells, hand, side)
        assert got == cshogi_hcp(board), board.sfen()
        records.append((got, cells, hand, side))
        n += 1
        in_hand += sum(hand) > 3
        promoted += any(c and (c & 15) - 1 >= 8 for c in cells)
        white += side
    assert n == 3000 and in_hand > 500 and promoted > 300 and white > 1000, (n, in_hand, promoted, white)
    # and manaka's decoder reads the codes back to the same positions
    data = np.zeros((len(records), 38), np.uint8)
    for i, (code, *_) in enumerate(records):
        data[i, :32] = np.frombuffer(code, np.uint8)
    board_out, hand_out, side_out, _, _, _, status = shogi.decode(data, shogi.HCPE)
    assert not status.any()
    for i, (_, cells, hand, side) in enumerate(records):
        assert bytes(board_out[i]) == cells and bytes(hand_out[i].ravel()) == hand and side_out[i] == side


def test_many_pieces_in_hand():
    for sfen in ["4k4/9/9/9/9/9/9/9/4K4 b RBGSNLPrb3g3s3n3l17p 1",   # 38 in hand
                 "4k4/9/9/9/9/9/9/9/4K4 w 2R2B4G4S4N4L18P 1",           # all Black's
                 "lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1"]:
        board = cshogi.Board(sfen)
        cells, hand, side = c_position(board)
        assert _core.shogi_encode_hcp(cells, hand, side) == cshogi_hcp(board), sfen


def test_positions_that_cannot_be_encoded():
    pos = shogi.parse_sfen("4k4/9/9/9/9/9/9/9/4K4 b G 1")  # a problem position: 3 pieces
    with pytest.raises(ValueError, match="all 40 pieces"):
        _core.shogi_encode_hcp(pos.board, pos.hand, pos.side)
    pos = shogi.parse_sfen("4k4/9/9/9/9/9/9/9/9 b - 1")  # no Black king
    with pytest.raises(ValueError, match="king"):
        _core.shogi_encode_hcp(pos.board, pos.hand, pos.side)
    with pytest.raises(ValueError, match="81 bytes"):
        _core.shogi_encode_hcp(b"\0" * 80, b"\0" * 14, 0)
