"""python -m manaka.train on shogi records: --data and --eval-data chosen by suffix
(.hcpe: dlshogi HCPE, .bin: YaneuraOu PSV), files written by cshogi."""
import numpy as np
import pytest

from shogi_reference import make_records
from train_cli import TINY, cli, one_line

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
    # the glob took in the held-out file: its figures were printed as held-out without a word
    assert f"note: --eval-data {tmp_path / 'held.hcpe'} and --data {tmp_path / '*.hcpe'} share 1 file(s)" in out
    assert train.main(["--data", str(tmp_path / "train.hcpe"), "--eval-data", str(tmp_path / "held.hcpe"), *base]) == 0
    assert "note: --eval-data" not in capsys.readouterr().out
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



def test_held_out_records_all_skipped_are_one_line(tmp_path, capsys):
    """--eval-data whose every record --on-bad skip leaves out ended the run at its first
    evaluation with evaluate's ValueError as a traceback."""
    _, hcpe, _ = make_records(60, 33)
    hcpe[:40].tofile(tmp_path / "train.hcpe")
    held = hcpe[40:].copy()
    held["gameResult"] = 9
    held.tofile(tmp_path / "held.hcpe")
    assert train.main(["--data", str(tmp_path / "train.hcpe"), "--eval-data", str(tmp_path / "held.hcpe"),
                       "--on-bad", "skip", "--steps", "3", "--batch-size", "16", "--no-progress", "--no-save",
                       *TINY]) == 2
    err = capsys.readouterr().err
    assert err == (f"python -m manaka.train: evaluate: no position to evaluate in {str(tmp_path / 'held.hcpe')!r}: "
                   "all 20 record(s) read were bad and skipped (on_bad='skip'); a mean over no position is not a "
                   "loss\n")

import os  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import cshogi  # noqa: E402
import cshogi.dlshogi  # noqa: E402
import pytest  # noqa: E402

import manaka as mk  # noqa: E402
from manaka import shogi  # noqa: E402

QUICK = ["--no-progress", "--batch-size", "32", "--device", "cpu", "--no-save", *TINY]


def test_value_and_on_bad_reach_the_records_and_baselines_are_printed(tmp_path, capsys):
    boards, hcpe, _ = make_records(300, 33)
    hcpe[:240].tofile(tmp_path / "train.hcpe")
    hcpe[240:].tofile(tmp_path / "held.hcpe")
    args = ["--data", str(tmp_path / "train.hcpe"), "--eval-data", str(tmp_path / "held.hcpe"), "--steps", "3",
            "--value", "0.25", "--on-bad", "skip", "--moves", "dlshogi", *QUICK]
    assert train.main(args) == 0
    out = capsys.readouterr().out
    assert "data: shogi.RecordFiles(240 HCPE records in 1 file(s), value=0.25, on_bad='skip'" in out, out
    # the baselines, from cshogi's moves: chance = mean 1 / legal count; frequency = the legal
    # move most often played in training (ties: the lowest label, the loader's list order)
    label = lambda board, move: cshogi.dlshogi.make_move_label(move, board.turn)
    played = {}
    for board, move in boards[:240]:
        played[label(board, move)] = played.get(label(board, move), 0) + 1
    chance = np.mean([1 / len(list(b.legal_moves)) for b, _ in boards[240:]])
    hits = 0
    for board, move in boards[240:]:
        legal = sorted(label(board, m) for m in board.legal_moves)
        best = max(legal, key=lambda x: (played.get(x, 0), -x))
        hits += best == label(board, move)
    assert hits > 0  # the test data exercises the frequency baseline
    m = re.search(r"held-out \(60 positions\): .*accuracy [\d.]+ \(chance ([\d.]+), frequency ([\d.]+)\)", out)
    assert m, out
    assert m.group(1) == f"{chance:.3f}" and m.group(2) == f"{hits / 60:.3f}", (m.groups(), chance, hits)
    assert "the legal move played most often in 240 training positions" in out


def test_value_and_on_bad_are_refused_for_a_dataset_folder(tmp_path, capsys):
    from model_cases import SMALL
    mk.Dataset.synthetic(100, SMALL, seed=0).save(tmp_path / "ds")
    assert train.main(["--data", str(tmp_path / "ds"), "--value", "eval", *QUICK]) == 2
    assert "--value, --eval-scale, --on-bad and --moves apply to shogi records" in capsys.readouterr().err
    assert train.main(["--data", str(tmp_path / "ds"), "--moves", "capture", *QUICK]) == 2
    assert "--value, --eval-scale, --on-bad and --moves apply to shogi records" in capsys.readouterr().err
    assert train.main(["--data", str(tmp_path / "ds"), "--eval-scale", "600", *QUICK]) == 2
    assert "--value, --eval-scale, --on-bad and --moves apply to shogi records" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train.main(["--data", str(tmp_path / "ds"), "--value", "1.5", *QUICK])
    assert "expected result, eval or a weight in [0, 1], got '1.5'" in capsys.readouterr().err


def test_a_run_where_every_record_is_skipped_stops_with_one_line(tmp_path):
    _, hcpe, _ = make_records(40, 34)
    hcpe["gameResult"] = 9  # every record bad
    hcpe.tofile(tmp_path / "bad.hcpe")
    out = cli(["--data", "bad.hcpe", "--on-bad", "skip", "--time-limit", "600", *QUICK], tmp_path, timeout=120)
    line = one_line(out)
    assert "fit: a whole epoch of shogi.RecordFiles(40 HCPE records" in line and "yielded no batch" in line
    from manaka.shogi.recipe import RECIPE
    assert f"{40 * (2 if RECIPE['mirror'] else 1)} skipped" in line  # the recipe's mirrors are skipped too
    loader = mk.Loader(shogi.open_hcpe(tmp_path / "bad.hcpe", on_bad="skip"), batch_size=16)
    model = mk.Model(mk.ModelConfig(num_tokens=shogi.NUM_TOKENS, num_moves=shogi.NUM_LABELS, embed_dim=4,
                                    pair_dim=1, hidden=(8,), head_width=8))
    with pytest.raises(ValueError, match="yielded no batch"):
        mk.fit(model, loader, epochs=3, progress=False, log=lambda s: None)


def test_resuming_on_other_records_is_refused_naming_what_differs(tmp_path):
    _, hcpe, _ = make_records(200, 35)
    hcpe[:100].tofile(tmp_path / "a.hcpe")
    base = ["--steps", "2", "--checkpoint", "c.ckpt", *QUICK]
    assert cli(["--data", "a.hcpe", *base], tmp_path).returncode == 0
    more = ["--steps", "4", "--checkpoint", "c.ckpt", "--resume", *QUICK]
    hcpe[100:].tofile(tmp_path / "b.hcpe")  # same size, other records
    line = one_line(cli(["--data", "b.hcpe", *more], tmp_path))
    assert "c.ckpt" in line and "other records" in line and "file 1 was a.hcpe (3,800 bytes), is b.hcpe" in line
    os.replace(tmp_path / "b.hcpe", tmp_path / "a.hcpe")  # the same name and size, other records
    line = one_line(cli(["--data", "a.hcpe", *more], tmp_path))
    assert "the same file names and sizes, but other records" in line
    hcpe[:100].tofile(tmp_path / "a.hcpe")
    from manaka.shogi.recipe import RECIPE
    other = "result" if RECIPE["value"] != "result" else "eval"  # not the recipe's value target
    line = one_line(cli(["--data", "a.hcpe", "--value", other, *more], tmp_path))
    assert f"value= {RECIPE['value']!r} then, {other!r} now" in line
    hcpe[:101].tofile(tmp_path / "a.hcpe")
    assert "a.hcpe (3,800 bytes), is a.hcpe (3,838 bytes)" in one_line(cli(["--data", "a.hcpe", *more], tmp_path))
    hcpe[:100].tofile(tmp_path / "a.hcpe")
    os.mkdir(tmp_path / "moved")
    os.replace(tmp_path / "a.hcpe", tmp_path / "moved" / "a.hcpe")  # the same records elsewhere: continues
    out = cli(["--data", "moved/a.hcpe", *more], tmp_path)
    assert out.returncode == 0 and "done: step 4" in out.stdout, out.stderr


def test_data_paths_that_are_not_training_data_say_what_they_are(tmp_path):
    (tmp_path / "kifu").mkdir()
    (tmp_path / "kifu" / "g1.csa").write_text("V2.2\nPI\n+\n")
    (tmp_path / "kifu" / "g2.kif").write_text("")
    (tmp_path / "x.hcpe.usi").write_text("position startpos\n")
    (tmp_path / "empty").mkdir()
    os.mkfifo(tmp_path / "fifo.hcpe")
    cases = {"kifu": "a folder of 2 CSA / KIF game record(s), which training does not read; convert CSA / KIF "
                     "game records first: python -m manaka.shogi convert games.hcpe kifu",
             "kifu/g1.csa": "a CSA / KIF game record, which training does not read; convert",
             "x.hcpe.usi": "a file of an unknown kind (.usi); --data takes a dataset folder with meta.json",
             "missing": "no such file or folder; --data takes a dataset folder with meta.json",
             "fifo.hcpe": "not a regular file or folder (a FIFO, socket or device); --data takes",  # was "no such file"
             "empty": "a folder with no meta.json and no record file; --data takes",
             "*.psv": "no file matches this glob"}
    for path, words in cases.items():
        line = one_line(cli(["--data", path, "--steps", "1", *QUICK], tmp_path))
        assert f"--data {path}: {words}" in line, line
        assert "HCPE files (.hcpe), YaneuraOu PSV files (.bin, .psv)" in line or "convert" in line, line


def test_a_glob_is_read_by_the_kind_of_the_files_it_matches(tmp_path, monkeypatch):
    """The kind came from the pattern's suffix: 'games/*' of HCPE files was "a file of an
    unknown kind (no suffix)", and 'g/[ab].*' over HCPE and PSV files "unknown kind (.*)"."""
    from manaka.train import data_kind

    monkeypatch.chdir(tmp_path)
    (tmp_path / "games").mkdir()
    for name in ("a.hcpe", "b.hcpe", "c.bin", "d.txt"):
        (tmp_path / "games" / name).write_bytes(b"")
    assert data_kind("games/[ab]*") == "hcpe" and data_kind("games/c*") == "psv"
    with pytest.raises(ValueError, match=r"--data games/\[ac\]\.\*: the glob matches record files of several kinds "
                                         r"\(games/a.hcpe \(hcpe\), games/c.bin \(psv\)\): name one kind"):
        data_kind("games/[ac].*")
    with pytest.raises(ValueError, match=r"--data games/\* matches games/d.txt: a file of an unknown kind \(.txt\)"):
        data_kind("games/*")


def test_a_model_too_large_for_memory_on_records_is_one_line(tmp_path):
    _, hcpe, _ = make_records(40, 36)
    hcpe.tofile(tmp_path / "x.hcpe")
    line = one_line(cli(["--data", "x.hcpe", "--steps", "1", *QUICK, "--pair-dim", "20000"], tmp_path))
    assert "the model sized by the shogi encoding" in line and "parameters" in line and "GiB" in line


def test_the_eval_scale_is_fitted_given_or_dlshogis(tmp_path, capsys):
    from manaka.shogi.eval_scale import fit_eval_scale
    from manaka.shogi.records import read_records

    from paths import ROOT

    games = os.path.join(ROOT, "examples", "data", "fsf-train.hcpe")
    fitted = fit_eval_scale([read_records(games, 0)[0]], 0, games)
    run = ["--data", games, "--steps", "1", *QUICK]
    assert train.main(run) == 0  # the recipe: value "eval", its scale fitted to the training games
    assert f"value target: 'eval' with sigmoid(eval / {fitted:g}), the scale fitted" in capsys.readouterr().out
    assert train.main([*run, "--eval-scale", "600"]) == 0
    assert "value target: 'eval' with sigmoid(eval / 600), the scale given" in capsys.readouterr().out
    _, hcpe, _ = make_records(200, 34)
    hcpe["gameResult"] = 0  # draws only: nothing to fit
    hcpe.tofile(tmp_path / "draws.hcpe")
    run = ["--data", str(tmp_path / "draws.hcpe"), "--steps", "1", *QUICK]
    assert train.main(run) == 0  # the recipe's fit falls back to dlshogi's scale, and says so
    assert "eval_scale: 756 (dlshogi's): the recipe's fit is not possible here" in capsys.readouterr().out
    assert train.main([*run, "--eval-scale", "fit"]) == 2  # asked for explicitly: an error naming the file
    assert "needs at least 100 decisive records" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train.main([*run, "--eval-scale", "-3"])
    assert "expected fit or a positive number, got '-3'" in capsys.readouterr().err


def test_a_dataset_folder_of_move_kind_records_trains_the_kind_table(tmp_path):
    """A folder made by to_dataset from records in a move-kind encoding says so in its meta
    (and a folder saved before that entry, by its encoding's name): the model trained on it
    has the kind table and a move table of 262,440 rows, not one row per label (7.3 M)."""
    import json
    from manaka.shogi.position import MOVE_KINDS
    _, hcpe, _ = make_records(120, 37)
    hcpe.tofile(tmp_path / "g.hcpe")
    kinds = "capture-defended-check-escape-mover-supported"
    folders = {"kinds": shogi.open_hcpe(str(tmp_path / "g.hcpe"), moves=kinds).to_dataset().save(tmp_path / "k"),
               "plain": shogi.open_hcpe(str(tmp_path / "g.hcpe")).to_dataset().save(tmp_path / "p")}
    old = shogi.open_hcpe(str(tmp_path / "g.hcpe"), moves=kinds).to_dataset().save(tmp_path / "old")
    meta = json.loads((tmp_path / "old" / "meta.json").read_text())
    assert meta.pop("move_kinds") == MOVE_KINDS[kinds] == 28 and meta["moves"] == kinds
    (tmp_path / "old" / "meta.json").write_text(json.dumps(meta))
    folders["old"] = old
    for name, folder in folders.items():
        assert mk.Dataset.open(folder).move_kinds == (0 if name in ("plain", "old") else 28)
        out = tmp_path / f"{name}.manaka"
        assert train.main(["--data", str(folder), "--steps", "1", "--no-progress", "--batch-size", "16",
                           "--device", "cpu", "--save", str(out), "--preset", "small", *TINY]) == 0
        model = mk.Model.load(str(out))
        want = 0 if name == "plain" else 28
        assert model.config.move_kinds == want, name
        rows = model.state_dict()["move_table"].shape[0]
        assert rows == (model.config.num_moves // 28 if want else model.config.num_moves) == (262_440 if want else 2_187)


def test_a_bad_record_met_late_keeps_the_steps_before_it_in_the_checkpoint(tmp_path):
    # the run ended with the one-line error and nothing saved: every step before it was lost
    import os

    import manaka as mk
    from manaka import shogi

    _, hcpe, _ = make_records(200, 37)
    hcpe["hcp"][199] = 255  # not a position: met at the epoch's last batch (no shuffle)
    hcpe.tofile(tmp_path / "a.hcpe")
    data = shogi.open_hcpe(str(tmp_path / "a.hcpe"))
    model = mk.Model(mk.ModelConfig(num_tokens=data.num_tokens, num_moves=data.num_moves, tokens_per_side=40,
                                    embed_dim=4, orders=2, pair_dim=1, hidden=(8,), head_width=4), seed=0)
    loader = mk.Loader(data, batch_size=20, producers=1, shuffle=False)
    lines, ckpt = [], str(tmp_path / "run.ckpt")
    with pytest.raises(ValueError, match=r"a\.hcpe: record 199"):
        mk.fit(model, loader, steps=30, checkpoint=ckpt, progress=False, log=lines.append)
    assert any("stopped by an error in the data at step 9; saved the checkpoint" in line for line in lines), lines
    from manaka import checkpoint
    saved = checkpoint.load(ckpt)
    assert saved["step"] == 9 and saved["loader"]["batch_index"] == 9  # the failing batch is not counted
    assert all(np.array_equal(v, model.state_dict()[k]) for k, v in saved["model"].items())
    # a run that meets it before any step saves nothing, and says so as before
    os.remove(ckpt)
    loader = mk.Loader(data, batch_size=20, producers=1, shuffle=False)
    loader.load_state_dict({"epoch": 0, "batch_index": 9})
    with pytest.raises(ValueError, match=r"record 199"):
        mk.fit(model, loader, steps=30, checkpoint=ckpt, progress=False, log=lines.append)
    assert not os.path.exists(ckpt)
