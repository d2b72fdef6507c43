"""open_hcpe / open_psv(mirror=True): rows [n, 2n) are the left-right mirrors of the records,
made by the C producers; each equals the row manaka makes from the record cshogi mirrors
(the SFEN's files reversed, the USI move's files mirrored), through ds[i], to_dataset()
and the Loader."""
import numpy as np
import pytest

from shogi_reference import cshogi

import manaka as mk
from manaka import shogi
from manaka.bench.strength_mirror import mirror_sfen, mirror_usi
from shogi_reference import make_records


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("mirror")
    boards, hcpe, psv = make_records(300, 60 + np.random.SeedSequence().entropy % 1000)
    m_hcpe, m_psv = hcpe.copy(), psv.copy()
    for i, (board, move) in enumerate(boards):
        mb = cshogi.Board(mirror_sfen(board.sfen()))
        mm = mb.move_from_usi(mirror_usi(cshogi.move_to_usi(move)))
        assert mb.is_legal(mm)
        mb.to_hcp(m_hcpe["hcp"][i])
        mb.to_psfen(m_psv["sfen"][i])
        m_hcpe["bestMove16"][i] = cshogi.move16(mm)
        m_psv["move"][i] = cshogi.move16_to_psv(cshogi.move16(mm))
    for name, arr in (("a.hcpe", hcpe), ("m.hcpe", m_hcpe), ("a.psv", psv), ("m.psv", m_psv)):
        arr.tofile(d / name)
    return d, len(hcpe)


@pytest.mark.parametrize("suffix", ["hcpe", "psv"])
def test_mirrored_rows_equal_cshogi_mirrors(files, suffix):
    d, n = files
    opener = shogi.open_hcpe if suffix == "hcpe" else shogi.open_psv
    both = opener(str(d / f"a.{suffix}"), value=0.5, mirror=True)
    plain = opener(str(d / f"a.{suffix}"), value=0.5)
    oracle = opener(str(d / f"m.{suffix}"), value=0.5)
    assert len(both) == 2 * n and "mirrors" in repr(both)
    for i in range(0, n, 7):
        for got, want in ((both[i], plain[i]), (both[n + i], oracle[i])):
            assert np.array_equal(got.tokens, want.tokens)
            assert np.array_equal(got.legal_moves, want.legal_moves)
            assert got.target == want.target and got.value == want.value
        assert both.locate(n + i) == both.locate(i)
    a, b, c = both.to_dataset(), plain.to_dataset(), oracle.to_dataset()
    assert len(a) == 2 * n
    for field in ("tokens", "target", "value"):
        x = np.asarray(getattr(a, field))
        assert np.array_equal(x[:n], np.asarray(getattr(b, field))) and np.array_equal(x[n:], np.asarray(getattr(c, field)))


def test_the_loader_packs_the_mirrors(files):
    d, n = files
    both = shogi.open_hcpe(str(d / "a.hcpe"), mirror=True)
    oracle = shogi.open_hcpe(str(d / "m.hcpe"))
    rows = []
    for batch in mk.Loader(both, batch_size=64, producers=2, shuffle=False):
        for r in range(len(batch)):
            c = int(batch.counts[r])
            rows.append((np.array(batch.tokens[r]), np.array(batch.legal[r, :c]), int(batch.target[r]),
                         float(batch.value[r])))
    assert len(rows) == 2 * n
    for i in range(n):
        want = oracle[i]
        tokens, legal, target, value = rows[n + i]
        assert np.array_equal(tokens, want.tokens) and np.array_equal(legal, want.legal_moves)
        assert target == want.target and value == want.value


def test_mirror_argument_checked(files):
    d, _ = files
    with pytest.raises(TypeError, match="mirror"):
        shogi.open_hcpe(str(d / "a.hcpe"), mirror=1)
