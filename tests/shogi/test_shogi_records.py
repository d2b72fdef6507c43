"""HCPE and PSV files written by cshogi, decoded by manaka (csrc/shogi/records.c): the
same positions (hand-heavy and handicap ones among them), moves, results and
evaluations; training rows equal to the Python reference encoding; every kind of bad
record, in the middle of a file and at its end."""
import math

import numpy as np
import pytest

from shogi_reference import c_position, cshogi, labels, make_records, tokens

import manaka as mk
from manaka import shogi


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


def epoch_rows(ds, producers=2):
    """Every row one epoch of a Loader delivers, in dataset order: {index: (tokens, legal, target, value)}."""
    rows = {}
    with mk.Loader(ds, batch_size=16, producers=producers, shuffle=False) as loader:
        for batch in loader:
            for r, i in enumerate(loader.last_indices):
                legal = batch.legal[r, :batch.counts[r]].copy()
                assert (batch.legal[r, batch.counts[r]:] == -1).all()  # padding, after any row left out
                rows[int(i)] = (batch.tokens[r].copy(), legal, int(batch.target[r]), float(batch.value[r]))
        return rows, loader.stats


def test_loader_batches_equal_the_reference(tmp_path, records):
    boards, hcpe, _ = records
    hcpe.tofile(tmp_path / "all.hcpe")
    ds = shogi.open_hcpe(tmp_path / "all.hcpe")
    rows, stats = epoch_rows(ds, producers=3)
    assert sorted(rows) == list(range(len(boards))) and stats["skipped"] == 0
    for i, (b, m) in enumerate(boards):
        tok, legal, target, value = rows[i]
        np.testing.assert_array_equal(tok, tokens(b))
        np.testing.assert_array_equal(legal, labels(b))
        assert legal[target] == cshogi.dlshogi.make_move_label(m, b.turn)
        assert value == result_for_side(shogi.HCPE, hcpe[i], b.turn)
    # the in-memory conversion gives the same rows
    whole = ds.to_dataset()
    for i in range(0, len(boards), 37):
        np.testing.assert_array_equal(whole[i].legal_moves, rows[i][1])


BAD_CASES = [(kind, where) for kind in ("code", "illegal_move", "result") for where in ("middle", "end")]


@pytest.mark.parametrize("fmt", [shogi.HCPE, shogi.PSV])
@pytest.mark.parametrize("kind,where", BAD_CASES)
def test_bad_records_name_file_and_record_or_are_skipped(tmp_path, records, fmt, kind, where):
    boards, hcpe, psv = records
    arr = (hcpe if fmt == shogi.HCPE else psv)[:50].copy()
    i = 20 if where == "middle" else len(arr) - 1
    path = tmp_path / ("x.hcpe" if fmt == shogi.HCPE else "x.bin")
    open_ = shogi.open_hcpe if fmt == shogi.HCPE else shogi.open_psv
    corrupt(arr, fmt, i, kind)
    arr.tofile(path)
    reason = {"code": "Huffman|king", "illegal_move": "not legal", "result": "result"}[kind]
    message = rf"x\.(hcpe|bin): record {i}: .*({reason})"
    ds = open_(str(path))
    with pytest.raises(ValueError, match=message):
        ds[i]
    with pytest.raises(ValueError, match=message):  # from the producers
        epoch_rows(ds)
    with pytest.raises(ValueError, match=message):
        ds.to_dataset()
    rows, stats = epoch_rows(open_(str(path), on_bad="skip"))
    assert sorted(rows) == [k for k in range(50) if k != i] and stats["skipped"] == 1
    b, _ = boards[i - 1]  # the good records are still the right ones
    np.testing.assert_array_equal(rows[i - 1][0], tokens(b))
    clean = tmp_path / ("clean" + path.suffix)  # and every kept row, in a batch with a gap, is whole
    (hcpe if fmt == shogi.HCPE else psv)[:50].tofile(clean)
    want, _ = epoch_rows(open_(str(clean)))
    for k in rows:
        for got, expected in zip(rows[k], want[k]):
            np.testing.assert_array_equal(got, expected)
    assert len(open_(str(path), on_bad="skip").to_dataset()) == 49


@pytest.mark.parametrize("fmt", [shogi.HCPE, shogi.PSV])
def test_a_record_cut_short_at_the_end(tmp_path, records, fmt):
    arr = (records[1] if fmt == shogi.HCPE else records[2])[:50]
    path = tmp_path / ("x.hcpe" if fmt == shogi.HCPE else "x.bin")
    path.write_bytes(arr.tobytes()[:-5])
    open_ = shogi.open_hcpe if fmt == shogi.HCPE else shogi.open_psv
    with pytest.raises(ValueError, match=r"x\.(hcpe|bin).*not a whole number.*record 49"):
        open_(str(path))
    ds = open_(str(path), on_bad="skip")
    assert len(ds) == 49 and ds.meta["cut_short_files"] == 1


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="value must be"):
        shogi.open_hcpe(str(tmp_path), value="margin")
    with pytest.raises(ValueError, match="on_bad must be"):
        shogi.open_hcpe(str(tmp_path), on_bad="ignore")
    with pytest.raises(ValueError, match="no HCPE file"):
        shogi.open_hcpe(str(tmp_path))
    with pytest.raises(ValueError, match="no file matches"):
        shogi.open_psv(str(tmp_path / "*.bin"))


def test_a_bad_format_or_records_array_is_refused_by_name(tmp_path, records):
    # fmt 2 was a KeyError, "hcpe" and 2**70 unnamed TypeError / OverflowError; a 1-d or an
    # int32 array NumPy's "object of too small depth" / "Cannot cast array data"
    hcpe = records[0] if isinstance(records, tuple) else records
    path = tmp_path / "x.hcpe"
    np.zeros((2, 38), np.uint8).tofile(path)
    for fmt, exc in ((2, ValueError), (-1, ValueError), (2**70, ValueError), ("hcpe", TypeError), (None, TypeError),
                     (True, TypeError), (1.0, TypeError)):
        for call in (lambda: shogi.decode(np.zeros((1, 38), np.uint8), fmt), lambda: shogi.read_records(str(path), fmt),
                     lambda: shogi.open_records(str(path), fmt)):
            with pytest.raises(exc, match=r"^shogi: fmt must be shogi.HCPE \(0\) or shogi.PSV \(1\), got "):
                call()
    rows = np.zeros((3, 38), np.uint8)
    for bad, exc, part in ((rows.ravel(), ValueError, "got 1 dimension"), (rows[None], ValueError, "got 3 dimension"),
                           (None, ValueError, "got 0 dimension"), (rows.astype(np.int32), TypeError, "got dtype int32"),
                           (rows.astype(np.float32), TypeError, "got dtype float32"),
                           ([[0] * 38, [0] * 5], (TypeError, ValueError), "")):  # ragged: per NumPy version
        with pytest.raises(exc, match=rf"^shogi: decode: records must be uint8 \[N, 38\].*{part}"):
            shogi.decode(bad, shogi.HCPE)
    assert len(shogi.decode(rows.tolist(), np.int64(shogi.HCPE))[0]) == 3  # a list of byte rows, a NumPy int
