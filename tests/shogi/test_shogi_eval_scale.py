"""eval_scale: the evaluation's scale in the value target sigmoid(eval / s), as a number and
fitted to the records' results, checked against cshogi's decoding and a NumPy grid search."""
import math
import os

import numpy as np
import pytest

from paths import ROOT
from shogi_reference import cshogi, make_records

import manaka as mk
from manaka import _core, shogi
from manaka.shogi.eval_scale import EvalScaleFitError, fit_eval_scale

GAMES = os.path.join(ROOT, "examples", "data", "fsf-train.hcpe")  # shipped engine games


def side_results(hcpe):
    """(eval, result for the side to move) of HCPE records, through cshogi."""
    board, turns = cshogi.Board(), np.empty(len(hcpe), np.int8)
    for i in range(len(hcpe)):
        board.set_hcp(hcpe["hcp"][i])
        turns[i] = board.turn
    r = hcpe["gameResult"]
    won = ((r == cshogi.BLACK_WIN) & (turns == cshogi.BLACK)) | ((r == cshogi.WHITE_WIN) & (turns == cshogi.WHITE))
    return hcpe["eval"].astype(np.float64), np.where(r == cshogi.DRAW, 0.5, won.astype(np.float64))


def grid_fit(ev, res):
    """The s of the lowest BCE of sigmoid(ev / s) against res, on a fine log grid."""
    s = np.exp(np.linspace(np.log(50), np.log(5000), 4001))
    p = 1 / (1 + np.exp(-ev[None, :] / s[:, None]))
    p = np.clip(p, 1e-12, 1 - 1e-12)
    bce = -(res * np.log(p) + (1 - res) * np.log(1 - p)).mean(axis=1)
    return float(s[np.argmin(bce)])


def test_the_fit_equals_a_grid_search_on_engine_games():
    hcpe = np.fromfile(GAMES, dtype=cshogi.HuffmanCodedPosAndEval)
    want = grid_fit(*side_results(hcpe))
    got = fit_eval_scale([hcpe.view(np.uint8).reshape(len(hcpe), -1)], shogi.HCPE, GAMES)
    assert got == pytest.approx(want, rel=2e-3)  # the grid's step is 0.115 %
    assert 300 < got < 1500  # an engine's evaluation in centipawn-like units
    ds = shogi.open_hcpe(GAMES, value="eval", eval_scale="fit")
    assert ds.eval_scale == got and ds.meta["eval_scale"] == got and "eval_scale=" in repr(ds)


@pytest.fixture(scope="module")
def records():
    return make_records(120, 7 + np.random.SeedSequence().entropy % 1000)


@pytest.mark.parametrize("fmt,value,scale", [(shogi.HCPE, "eval", 300.0), (shogi.PSV, 0.25, 1234.5),
                                             (shogi.HCPE, 0.5, 756)])
def test_values_use_the_scale_in_every_path(tmp_path, records, fmt, value, scale):
    boards, hcpe, psv = records
    arr, suffix = (hcpe, ".hcpe") if fmt == shogi.HCPE else (psv, ".bin")
    arr.tofile(tmp_path / f"a{suffix}")
    open_ = shogi.open_hcpe if fmt == shogi.HCPE else shogi.open_psv
    ds = open_(str(tmp_path / f"a{suffix}"), value=value, eval_scale=scale, mirror=True)
    lam = 1.0 if value == "eval" else value
    want = []
    for i, (b, _) in enumerate(boards):
        if fmt == shogi.HCPE:
            r = int(hcpe["gameResult"][i])
            res = 0.5 if r == 0 else float((r == 1) == (b.turn == 0))
        else:
            res = {1: 1.0, 0: 0.5, -1: 0.0}[int(psv["game_result"][i])]
        want.append((1 - lam) * res + lam / (1 + math.exp(-int(hcpe["eval"][i]) / scale)))
    want = np.array(want * 2)  # the mirrors keep their records' values
    np.testing.assert_allclose([ds[i].value for i in range(len(ds))], want, atol=1e-6)  # one row at a time
    np.testing.assert_allclose(ds.to_dataset().value, want, atol=1e-6)  # every row at once
    got = np.zeros(len(ds))
    with mk.Loader(ds, batch_size=32, producers=2, shuffle=False) as loader:  # the C producers
        for batch in loader:
            got[loader.last_indices] = batch.value[:len(loader.last_indices)]
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_the_hcpe3_values_use_the_scale(tmp_path):
    from test_shogi_hcpe3 import play_games

    data, recs, _ = play_games(4, 9, start_plies=20)
    (tmp_path / "a.hcpe3").write_bytes(data)
    ds = shogi.open_hcpe3(str(tmp_path / "a.hcpe3"), value="eval", eval_scale=400)
    for i in range(0, len(recs), 3):
        assert ds[i].value == pytest.approx(1 / (1 + np.exp(-recs[i]["eval"] / 400)), rel=1e-6)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), True, "fitted", None, "756", [756]])
def test_a_bad_scale_is_refused_by_name(tmp_path, records, bad):
    records[1].tofile(tmp_path / "a.hcpe")
    with pytest.raises(ValueError, match="eval_scale must be a positive finite number or 'fit'"):
        shogi.open_hcpe(str(tmp_path / "a.hcpe"), value="eval", eval_scale=bad)
    raw = records[1].view(np.uint8).reshape(len(records[1]), -1)
    if isinstance(bad, float):  # the C entry points refuse it too
        with pytest.raises(ValueError, match="eval_scale must be a positive finite number"):
            _core.shogi_rows(shogi.HCPE, raw, 1.0, False, 0, bad)
        with pytest.raises(ValueError, match="eval_scale must be a positive finite number"):
            _core.shogi_game(shogi.HCPE, 1.0, False, 0, None, bad)


def test_records_that_cannot_fit_a_scale(tmp_path, records):
    hcpe = records[1].copy()
    hcpe["gameResult"] = cshogi.DRAW  # no decisive record
    hcpe.tofile(tmp_path / "draws.hcpe")
    with pytest.raises(EvalScaleFitError, match=r"needs at least 100 decisive records .*draws\.hcpe.* have 0"):
        shogi.open_hcpe(str(tmp_path / "draws.hcpe"), value="eval", eval_scale="fit")
    assert shogi.open_hcpe(str(tmp_path / "draws.hcpe"), value="result", eval_scale="fit").eval_scale is None
    games = np.fromfile(GAMES, dtype=cshogi.HuffmanCodedPosAndEval)
    games["eval"] = -games["eval"]  # evaluations that predict the other side's win
    games.tofile(tmp_path / "upside-down.hcpe")
    with pytest.raises(EvalScaleFitError, match="do not predict their game results"):
        shogi.open_hcpe(str(tmp_path / "upside-down.hcpe"), value="eval", eval_scale="fit")


def test_the_scale_is_part_of_the_records_identity(tmp_path, records):
    records[1].tofile(tmp_path / "a.hcpe")
    path = str(tmp_path / "a.hcpe")
    dlshogi = shogi.open_hcpe(path, value="eval")
    assert "eval_scale" not in dlshogi.identity  # identities saved before eval_scale= stay valid
    other = shogi.open_hcpe(path, value="eval", eval_scale=600)
    assert other.identity["eval_scale"] == 600.0 and other.fingerprint != dlshogi.fingerprint
    assert other.identity_differences(dlshogi.identity) == ["eval_scale= 756.0 then, 600.0 now"]
