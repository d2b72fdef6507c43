"""HCPE and PSV files written by cshogi, decoded by manaka (csrc/shogi/records.c): the
same positions, moves, results and evaluations; training rows equal to the Python
reference encoding; every kind of bad record, in the middle of a file and at its end."""
import math

import numpy as np
import pytest

from shogi_reference import c_position, cshogi, labels, random_positions, tokens

from manaka import shogi


def make_records(n, seed):
    """cshogi boards with a random legal move, result and evaluation, as HCPE and PSV."""
    rng = np.random.default_rng(seed)
    hcpe = np.zeros(n, cshogi.HuffmanCodedPosAndEval)
    psv = np.zeros(n, cshogi.PackedSfenValue)
    boards = []
    for i, board in enumerate(random_positions(n, seed)):
        move = list(board.legal_moves)[int(rng.integers(len(list(board.legal_moves))))]
        board.to_hcp(hcpe["hcp"][i])
        board.to_psfen(psv["sfen"][i])
        hcpe["bestMove16"][i] = cshogi.move16(move)
        psv["move"][i] = cshogi.move16_to_psv(cshogi.move16(move))
        hcpe["eval"][i] = psv["score"][i] = int(rng.integers(-3000, 3000))
        hcpe["gameResult"][i] = int(rng.integers(0, 3))
        psv["game_result"][i] = int(rng.integers(-1, 2))
        psv["gamePly"][i] = i
        boards.append((board.copy(), move))
    return boards, hcpe, psv


@pytest.fixture(scope="module")
def records():
    return make_records(400, 20 + np.random.SeedSequence().entropy % 1000)


def result_for_side(fmt, record, turn):
    if fmt == shogi.HCPE:
        r = int(record["gameResult"])
        return 0.5 if r == 0 else float((r == 1) == (turn == 0))
    return {1: 1.0, 0: 0.5, -1: 0.0}[int(record["game_result"])]


@pytest.mark.parametrize("fmt", [shogi.HCPE, shogi.PSV])
def test_decode_equals_cshogi(records, fmt):
    boards, hcpe, psv = records
    arr = hcpe if fmt == shogi.HCPE else psv
    board, hand, side, move, ev, result, status = shogi.decode(arr.view(np.uint8).reshape(len(arr), -1), fmt)
    assert not status.any()
    for i, (b, m) in enumerate(boards):
        cells, h, turn = c_position(b)
        assert bytes(board[i]) == cells and bytes(hand[i].reshape(-1)) == h and side[i] == turn
        assert move[i] == cshogi.move16(m)
        assert ev[i] == hcpe["eval"][i]
        assert result[i] == result_for_side(fmt, arr[i], turn)


@pytest.mark.parametrize("fmt,value", [(shogi.HCPE, "result"), (shogi.PSV, "eval"), (shogi.HCPE, 0.25)])
def test_files_open_as_a_dataset_equal_to_the_reference(tmp_path, records, fmt, value):
    boards, hcpe, psv = records
    arr = hcpe if fmt == shogi.HCPE else psv
    suffix = ".hcpe" if fmt == shogi.HCPE else ".bin"
    arr[:150].tofile(tmp_path / f"a{suffix}")  # two files: one dataset, in file order
    arr[150:].tofile(tmp_path / f"b{suffix}")
    open_ = shogi.open_hcpe if fmt == shogi.HCPE else shogi.open_psv
    ds = open_(str(tmp_path / f"*{suffix}"), value=value)
    assert len(ds) == len(boards) and ds.num_tokens == 2344 and ds.num_moves == 2187
    lam = {"result": 0.0, "eval": 1.0}.get(value, value)
    for i, (b, m) in enumerate(boards):
        p = ds[i]
        np.testing.assert_array_equal(p.tokens, tokens(b))
        want = labels(b)
        np.testing.assert_array_equal(p.legal_moves, want)
        assert want[p.target] == cshogi.dlshogi.make_move_label(m, b.turn)
        r = result_for_side(fmt, arr[i], b.turn)
        e = 1 / (1 + math.exp(-int(hcpe["eval"][i]) / 756))
        assert p.value == pytest.approx((1 - lam) * r + lam * e, abs=1e-6)


def corrupt(arr, fmt, i, kind):
    raw = arr.view(np.uint8).reshape(len(arr), -1)
    if kind == "code":
        raw[i, :32] = 0xFF  # kings on square 127 and no valid code
    elif kind == "illegal_move":
        if fmt == shogi.HCPE:
            arr["bestMove16"][i] = 0  # 1a -> 1a
        else:
            arr["move"][i] = 0
    elif kind == "result":
        if fmt == shogi.HCPE:
            arr["gameResult"][i] = 7
        else:
            arr["game_result"][i] = 5


@pytest.mark.parametrize("fmt", [shogi.HCPE, shogi.PSV])
@pytest.mark.parametrize("kind", ["code", "illegal_move", "result", "truncated"])
@pytest.mark.parametrize("where", ["middle", "end"])
def test_bad_records_name_file_and_record_or_are_skipped(tmp_path, records, fmt, kind, where):
    boards, hcpe, psv = records
    arr = (hcpe if fmt == shogi.HCPE else psv)[:50].copy()
    i = 20 if where == "middle" else len(arr) - 1
    path = tmp_path / ("x.hcpe" if fmt == shogi.HCPE else "x.bin")
    open_ = shogi.open_hcpe if fmt == shogi.HCPE else shogi.open_psv
    if kind == "truncated":
        if where == "middle":
            pytest.skip("a cut-short record is always the file's last")
        data = arr.tobytes()[:-5]
        path.write_bytes(data)
        with pytest.raises(ValueError, match=r"x\.(hcpe|bin).*not a whole number.*record 49"):
            open_(str(path))
        assert len(open_(str(path), on_bad="skip")) == 49
        return
    corrupt(arr, fmt, i, kind)
    arr.tofile(path)
    reason = {"code": "Huffman|king", "illegal_move": "not legal", "result": "result"}[kind]
    with pytest.raises(ValueError, match=rf"x\.(hcpe|bin): record {i}: .*({reason})"):
        open_(str(path))
    ds = open_(str(path), on_bad="skip")
    assert len(ds) == 49 and ds.meta["skipped"] == 1
    # The good records are still the right ones, in order.
    b, _ = boards[i + 1 if i + 1 < 50 else 0]
    np.testing.assert_array_equal(ds[i if i + 1 < 50 else 0].tokens, tokens(b))


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="value must be"):
        shogi.open_hcpe(str(tmp_path), value="margin")
    with pytest.raises(ValueError, match="on_bad must be"):
        shogi.open_hcpe(str(tmp_path), on_bad="ignore")
    with pytest.raises(ValueError, match="no HCPE file"):
        shogi.open_hcpe(str(tmp_path))
    with pytest.raises(ValueError, match="no file matches"):
        shogi.open_psv(str(tmp_path / "*.bin"))
