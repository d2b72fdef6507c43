"""Handicap positions (pieces left out of the game) in HCPE and PSV records, as cshogi
writes them: every standard handicap, from its start and after some moves, and random
endgames with pieces left out, decode to cshogi's position, move and result and to the
reference row (fewer than 40 tokens). A left-out piece has its own code among the hand
codes (csrc/shogi/records.c); codes that cshogi never writes, or more left-out pieces than
a set holds, are refused. A handicap CSA game converts and trains."""
import numpy as np
import pytest

from shogi_reference import (HANDICAPS, c_position, cshogi, handicap_positions, labels, random_endgames,
                             tokens)

import cshogi.CSA  # noqa: E402

from manaka import shogi
from manaka import _core
from manaka.shogi import convert
from shogi_reference import records


def result_for_side(fmt, record, turn):
    if fmt == shogi.HCPE:
        r = int(record["gameResult"])
        return 0.5 if r == 0 else float((r == 1) == (turn == 0))
    return {1: 1.0, 0: 0.5, -1: 0.0}[int(record["game_result"])]


def pieces(board) -> int:
    return sum(1 for p in board.pieces if p) + int(sum(map(sum, board.pieces_in_hand)))


@pytest.mark.parametrize("fmt", [shogi.HCPE, shogi.PSV])
def test_handicap_records_decode_like_cshogi(tmp_path, fmt):
    seed = int(np.random.SeedSequence().entropy % 100_000)
    rng = np.random.default_rng(seed)
    boards = [cshogi.Board(sfen) for sfen in HANDICAPS.values()]  # each start
    boards += [b.copy() for b in handicap_positions(270, seed)]  # 30 per handicap, moves played
    boards += [b.copy() for b in random_endgames(60, seed, absent=1.0)]  # pieces left out at random
    short = sum(pieces(b) < 40 for b in boards)
    assert short >= 300, f"{short} positions with pieces left out (seed {seed})"
    arr, moves = records(boards, fmt, rng)
    raw = arr.view(np.uint8).reshape(len(arr), -1)
    board, hand, side, move, _, result, status = shogi.decode(raw, fmt)
    assert not status.any(), [boards[i].sfen() for i in np.nonzero(status)[0][:3]]
    tok, off, lab, target, value, status = _core.shogi_rows(fmt, raw, 0.0)
    assert not status.any()
    for i, (b, m) in enumerate(zip(boards, moves)):
        cells, h, turn = c_position(b)
        where = f"{b.sfen()} (seed {seed})"
        assert bytes(board[i]) == cells and bytes(hand[i].reshape(-1)) == h and side[i] == turn, where
        assert move[i] == cshogi.move16(m) and result[i] == result_for_side(fmt, arr[i], turn), where
        want = labels(b)
        np.testing.assert_array_equal(lab[off[i]:off[i + 1]], want, err_msg=where)
        np.testing.assert_array_equal(tok[i], tokens(b), err_msg=where)
        assert (tok[i] >= 0).sum() == 2 * pieces(b), where  # one token per piece per perspective
        assert want[target[i]] == cshogi.dlshogi.make_move_label(m, b.turn), where
        assert value[i] == result_for_side(fmt, arr[i], turn), where
    # and through a record file: ds[i] and the loader's producers
    path = tmp_path / ("h.hcpe" if fmt == shogi.HCPE else "h.bin")
    arr.tofile(path)
    ds = shogi.open_records(str(path), fmt)
    for i in range(0, len(boards), 7):
        np.testing.assert_array_equal(ds[i].legal_moves, labels(boards[i]))
    import manaka as mk
    seen = 0
    with mk.Loader(ds, batch_size=64, producers=2, shuffle=True, seed=1) as loader:
        for batch in loader:
            for r, i in enumerate(loader.last_indices):
                np.testing.assert_array_equal(batch.tokens[r], tokens(boards[int(i)]))
                seen += 1
    assert seen == len(boards) and loader.stats["skipped"] == 0


def bits_of(record):
    return [int(record[i // 8]) >> (i % 8) & 1 for i in range(256)]


def with_last_bits(record, code):
    """The record with its last len(code) position bits replaced by code (read first bit first)."""
    out = record.copy()
    bits = bits_of(record)
    bits[256 - len(code):] = [int(c) for c in code]
    for i in range(32):
        out[i] = sum(bits[8 * i + j] << j for j in range(8))
    return out


@pytest.mark.parametrize("fmt", [shogi.HCPE, shogi.PSV])
def test_left_out_codes_cshogi_never_writes_are_refused(fmt):
    # The rook handicap with nothing in hand: the left-out rook is the last code.
    arr, _ = records([cshogi.Board(HANDICAPS["rook"])], fmt, np.random.default_rng(0))
    raw = arr.view(np.uint8).reshape(1, -1)[0]
    rook, white_rook, bishop = ("1111010", "1111011", "1111000") if fmt == shogi.HCPE else (
        "1111110", "1111111", "1111010")
    assert "".join(map(str, bits_of(raw)[-7:])) == rook  # how cshogi writes a left-out rook
    status = lambda rec: int(shogi.decode(rec[None], fmt)[-1][0])  # noqa: E731
    assert status(raw) == 0
    # a "left-out" piece with the colour bit set: not a code, for cshogi either
    assert _core.shogi_reason(status(with_last_bits(raw, white_rook))) == "the position's Huffman code is invalid"
    with pytest.raises(RuntimeError, match="incorrect Huffman code"):
        set_position(cshogi.Board(), with_last_bits(raw, white_rook), fmt)
    # a third bishop: two on the board and one left out
    assert _core.shogi_reason(status(with_last_bits(raw, bishop))) == "more pieces of a kind than a set holds"


def set_position(board, record, fmt):
    (board.set_hcp if fmt == shogi.HCPE else board.set_psfen)(np.frombuffer(record[:32].tobytes(), np.uint8))


@pytest.mark.parametrize("fmt", [shogi.HCPE, shogi.PSV])
def test_mutated_hand_codes_against_cshogi(fmt):
    """Records of positions with pieces in hand or left out, one to three of the last 64
    bits flipped (the hand and left-out codes, and the last board codes): what manaka
    accepts, cshogi reads as the same position; what cshogi refuses, manaka refuses. (cshogi
    accepts more: a code that runs past bit 256, more pieces than a set holds.)"""
    seed = int(np.random.SeedSequence().entropy % 100_000)
    rng = np.random.default_rng(seed)
    boards = [cshogi.Board(sfen) for sfen in HANDICAPS.values()]
    boards += [b.copy() for b in random_endgames(100, seed, absent=0.5)]
    boards += [b.copy() for b in handicap_positions(100, seed)]
    arr, _ = records(boards, fmt, rng)
    raw = arr.view(np.uint8).reshape(len(arr), -1)
    mutated = raw[rng.integers(len(raw), size=4000)].copy()
    for r in mutated:
        for bit in rng.integers(192, 256, size=int(rng.integers(1, 4))):
            r[bit // 8] ^= np.uint8(1 << (bit % 8))
    cells, hands, sides, _, _, _, status = shogi.decode(mutated, fmt)
    accepted = 0
    for i, r in enumerate(mutated):
        b = cshogi.Board()
        try:
            set_position(b, r, fmt)
        except RuntimeError:
            assert status[i] != 0, f"cshogi refuses what manaka reads (seed {seed}, record {i})"
            continue
        if status[i] == 0:
            accepted += 1
            want_cells, want_hand, turn = c_position(b)
            assert (bytes(cells[i]), bytes(hands[i].reshape(-1)), sides[i]) == (want_cells, want_hand, turn), (
                f"seed {seed}, record {i}: {b.sfen()}")
    assert accepted > 200, (seed, accepted)


CSA_ROOK_HANDICAP = """V2.2
N+shitate
N-uwate
PI82HI
-
-3334FU
+7776FU
-2288UM
+7988GI
-0055KA
%TORYO
"""


def test_a_converted_handicap_game_trains(tmp_path, capsys):
    from train_cli import TINY

    from manaka import train

    (tmp_path / "rook.csa").write_text(CSA_ROOK_HANDICAP)
    # the same game through cshogi's CSA writer (the whole board instead of PI82HI)
    board = cshogi.Board(HANDICAPS["rook"])
    e = cshogi.CSA.Exporter(str(tmp_path / "board.csa"))
    e.info(board, ["shitate", "uwate"])
    played = []
    for usi in ["3c3d", "7g7f", "2b8h+", "7i8h", "B*5e"]:
        m = board.move_from_usi(usi)
        e.move(m)
        board.push(m)
        played.append(m)
    e.endgame("%TORYO")
    e.close()
    out = tmp_path / "handicap.hcpe"
    assert convert.main([str(out), str(tmp_path / "rook.csa"), str(tmp_path / "board.csa")]) == 0
    records = np.fromfile(out, cshogi.HuffmanCodedPosAndEval)
    assert len(records) == 10
    b, hand, side, move, _, result, status = shogi.decode(records.view(np.uint8).reshape(-1, 38), shogi.HCPE)
    assert not status.any()
    for game in range(2):
        replay = cshogi.Board(HANDICAPS["rook"])
        for k, m in enumerate(played):
            i = 5 * game + k
            cells, h, turn = c_position(replay)
            assert bytes(b[i]) == cells and bytes(hand[i].reshape(-1)) == h and side[i] == turn
            assert move[i] == cshogi.move16(m)
            assert result[i] == float(turn == 1)  # Black, to move after White's last move, resigned
            replay.push(m)
    capsys.readouterr()
    assert train.main(["--data", str(out), "--steps", "3", "--no-progress", "--batch-size", "4", "--device", "cpu",
                       "--no-save", *TINY]) == 0
    said = capsys.readouterr().out
    assert "data: shogi.RecordFiles(10 HCPE records in 1 file(s)" in said, said
