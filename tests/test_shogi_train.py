"""python -m manaka.train on shogi records: --data and --eval-data chosen by suffix
(.hcpe: dlshogi HCPE, .bin: YaneuraOu PSV), files written by cshogi."""
import numpy as np

from test_shogi_records import make_records
from test_train import TINY

from manaka import train


def test_cli_trains_on_hcpe_and_psv_files(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the model is saved here
    _, hcpe, psv = make_records(300, 31)
    hcpe[:240].tofile(tmp_path / "train.hcpe")
    hcpe[240:].tofile(tmp_path / "held.hcpe")
    psv.tofile(tmp_path / "games.bin")
    base = ["--steps", "3", "--no-progress", "--batch-size", "32", "--device", "cpu", *TINY]
    assert train.main(["--data", str(tmp_path / "*.hcpe"), "--eval-data", str(tmp_path / "held.hcpe"), *base]) == 0
    out = capsys.readouterr().out
    assert "data: shogi.RecordFiles(300 HCPE records in 2 file(s)" in out and "held-out (60 positions)" in out, out
    assert train.main(["--data", str(tmp_path / "games.bin"), *base]) == 0
    assert "data: shogi.RecordFiles(300 PSV records in 1 file(s)" in capsys.readouterr().out


def test_cli_names_a_bad_record_in_one_line(tmp_path, capsys):
    _, hcpe, _ = make_records(40, 32)
    hcpe["gameResult"][17] = 9
    hcpe.tofile(tmp_path / "bad.hcpe")
    assert train.main(["--data", str(tmp_path / "bad.hcpe"), "--steps", "3", "--batch-size", "16", "--no-progress", *TINY]) == 2
    err = capsys.readouterr().err
    assert "bad.hcpe: record 17: the game result is out of range" in err
    assert np.all(hcpe["gameResult"][:17] <= 2)
