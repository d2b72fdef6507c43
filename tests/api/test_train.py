"""The main job: `python -m manaka.train`, and mk.fit / mk.evaluate with the real Model."""
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

import manaka as mk
from model_cases import SMALL, SMALL_MODEL
from train_cli import CLI, ENV, EVAL_LOG, TINY, cli, one_line


def test_help_explains_the_options():
    out = subprocess.run([sys.executable, "-m", "manaka.train", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    for option in ("--data", "--steps", "--epochs", "--batch-size", "--device", "--producers", "--lr",
                   "--log-every", "--checkpoint", "--resume", "--embed-dim", "--hidden"):
        assert option in out.stdout


def test_cli_runs_a_few_steps_and_prints_the_log_line(capsys, tmp_path):
    from manaka import train
    args = ["--steps", "4", "--synthetic", "1500", "--eval-positions", "200", "--log-every", "2", "--no-progress",
            "--batch-size", "64", "--device", "cpu", "--checkpoint", str(tmp_path / "c.ckpt"), *TINY]
    assert train.main(args) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("[")]
    # 4 steps: by default the held-out data is evaluated on every logging step here
    assert len(lines) == 2 and all(EVAL_LOG.match(line) for line in lines), out
    assert "done: step 4" in out and "held-out (200 positions)" in out and "teacher's ceiling" in out
    # resuming at the end runs nothing more; further steps continue from the checkpoint
    assert train.main(args[:1] + ["6"] + args[2:] + ["--resume"]) == 0
    out = capsys.readouterr().out
    assert "step=6" in out and "done: step 6" in out


def test_move_pairs_option_gives_the_model_its_table(tmp_path):
    from manaka import train
    out = tmp_path / "m.manaka"
    assert train.main(["--steps", "2", "--synthetic", "300", "--eval-positions", "0", "--no-progress",
                       "--batch-size", "32", "--device", "cpu", "--save", str(out), "--move-pairs", "7", *TINY]) == 0
    model = mk.Model.load(out)
    assert model.config.move_pairs == 7
    table = model.parameters()["move_pair_table"]
    assert table.shape == (model.config.num_tokens, 7) and np.abs(table).max() > 0  # trained from 0


def test_move_pair_board_option_gives_the_model_its_relative_part(tmp_path, capsys):
    from manaka import train
    out = tmp_path / "m.manaka"
    args = ["--steps", "2", "--synthetic", "300", "--eval-positions", "0", "--no-progress", "--batch-size", "32",
            "--device", "cpu", "--move-pairs", "8", *TINY]
    assert train.main(args + ["--save", str(out), "--move-pair-board", "2,2,1"]) == 0
    model = mk.Model.load(out)
    assert (model.config.board_width, model.config.board_height, model.config.board_kinds) == (2, 2, 1)
    rel = model.parameters()["move_pair_relative"]
    assert rel.shape == (1 * 3 * 3, 2) and np.abs(rel).max() > 0  # trained from 0
    capsys.readouterr()
    for bad, words in (("2,2", "--move-pair-board: expected three integers W,H,K, got '2,2'"),
                       ("2,2,x", "--move-pair-board: expected three integers W,H,K, got '2,2,x'"),
                       ("3,2,1", "relative move pairs need move_pairs, a multiple of board_width * board_height = 6")):
        assert train.main(args + ["--move-pair-board", bad]) == 2
        assert words in capsys.readouterr().err
    # --hidden names itself too (int() said only "invalid literal")
    for bad in ("a", "8;8", "1e3"):
        assert train.main(args + ["--hidden", bad]) == 2
        assert f"--hidden: expected comma-separated integer widths (e.g. 512,512), got {bad!r}" in \
            capsys.readouterr().err


def test_move_hidden_option_gives_the_model_its_layer(tmp_path, capsys):
    from manaka import train
    out = tmp_path / "m.manaka"
    args = ["--steps", "2", "--synthetic", "300", "--eval-positions", "0", "--no-progress", "--batch-size", "32",
            "--device", "cpu", "--move-pairs", "8", *TINY]
    assert train.main(args + ["--save", str(out), "--move-pair-board", "2,2,1", "--move-hidden", "5"]) == 0
    model = mk.Model.load(out)
    assert model.config.move_hidden == 5
    p = model.parameters()
    assert p["move_hidden_relative"].shape == (1 * 3 * 3 * 2, 5) and p["move_hidden_class"].shape == (8, 5)
    assert np.abs(p["move_hidden_out"]).max() > 0  # trained from 0
    capsys.readouterr()
    assert train.main(args + ["--move-hidden", "5"]) == 2  # no board
    assert "move_hidden = 5 needs the relative move pairs" in capsys.readouterr().err
    assert train.main(args + ["--move-pair-board", "2,2,1", "--move-hidden", "-1"]) == 2
    assert "move_hidden must be >= 0, got -1" in capsys.readouterr().err


def small_run(ds, steps, path=None, resume=False, stop=None):
    model = mk.Model(SMALL_MODEL, seed=0)
    trainer = mk.Trainer(model, lr=1e-2, warmup_steps=3, schedule="cosine", total_steps=steps)
    loader = mk.Loader(ds, batch_size=48, producers=3, seed=7)
    history = mk.fit(model, loader, steps=stop or steps, trainer=trainer, log_every=4, checkpoint=path,
                     resume=resume, progress=False, log=lambda s: None)
    return model, history


def test_real_model_resume_is_bitwise_exact(tmp_path):
    ds = mk.Dataset.synthetic(400, SMALL, seed=0)  # 9 batches per epoch: the run crosses epochs
    full, _ = small_run(ds, 25)
    path = str(tmp_path / "run.ckpt")
    small_run(ds, 25, path=path, stop=11)
    resumed, history = small_run(ds, 25, path=path, resume=True)
    a, b = full.state_dict(), resumed.state_dict()
    assert a.keys() == b.keys()
    for name in a:
        assert np.array_equal(a[name], b[name]), name
    assert history.last["step"] == 25


def test_student_learns_the_teacher():
    """Learning is real: held-out accuracy rises well above chance, towards the ceiling."""
    train_set = mk.Dataset.synthetic(4000, SMALL, seed=0)
    test_set = mk.Dataset.synthetic(1000, SMALL, seed=1)
    cfg = mk.ModelConfig(num_tokens=300, num_moves=500, tokens_per_side=8, embed_dim=16, orders=2, pair_dim=2,
                         hidden=(64,), head_width=32)
    model = mk.Model(cfg, seed=0)
    before = mk.evaluate(model, test_set)
    mk.fit(model, mk.Loader(train_set, batch_size=128), epochs=4, trainer=mk.Trainer(model, lr=3e-3),
           progress=False, log=lambda s: None)
    after = mk.evaluate(model, test_set)
    chance, ceiling = test_set.meta["chance_accuracy"], test_set.meta["teacher_accuracy_ceiling"]
    assert after["loss"] < before["loss"]
    assert after["accuracy"] > max(5 * chance, before["accuracy"] + 0.05)
    assert after["accuracy"] <= ceiling + 0.05


def test_cli_reports_bad_data_in_one_line(tmp_path, capsys):
    from manaka import train
    assert train.main(["--data", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert "python -m manaka.train: --data " in err and "missing: no such file or folder; --data takes a dataset " \
        "folder with meta.json" in err
    assert train.main(["--resume"]) == 2


QUICK = ["--synthetic", "600", "--eval-positions", "0", "--batch-size", "64", "--device", "cpu", "--no-progress",
         *TINY]


def test_an_existing_checkpoint_is_continued_or_replaced_only_when_asked(tmp_path):
    path = tmp_path / "c.ckpt"
    first = cli(["--steps", "4", "--checkpoint", path, *QUICK], tmp_path)
    assert first.returncode == 0, first.stderr
    before = path.read_bytes()
    line = one_line(cli(["--steps", "2", "--checkpoint", path, *QUICK], tmp_path))
    assert f"the checkpoint {path} exists: continue it with --resume, or replace it with --force" in line
    assert path.read_bytes() == before
    forced = cli(["--steps", "2", "--checkpoint", path, "--force", *QUICK], tmp_path)
    assert forced.returncode == 0 and mk.checkpoint.load(path)["step"] == 2, forced.stderr
    (tmp_path / "dir.ckpt").mkdir()
    assert "--checkpoint dir.ckpt is a folder; give a file path" in one_line(
        cli(["--steps", "2", "--checkpoint", "dir.ckpt", "--force", *QUICK], tmp_path))
    fresh = cli(["--steps", "2", "--checkpoint", tmp_path / "new.ckpt", "--resume", *QUICK], tmp_path)
    assert fresh.returncode == 0, fresh.stderr
    assert f"no checkpoint at {tmp_path / 'new.ckpt'} yet: this run starts at step 0 and will write it" in fresh.stdout
    assert mk.checkpoint.load(tmp_path / "new.ckpt")["step"] == 2


def test_the_model_is_saved_without_replacing_a_file_nobody_named(tmp_path):
    out = cli(["--steps", "3", "--checkpoint", "run.ckpt", *QUICK], tmp_path)
    assert out.returncode == 0 and "saved the model (step 3) to run.manaka" in out.stdout, out.stderr
    assert mk.Model.load(tmp_path / "run.manaka").config.embed_dim == 8
    (tmp_path / "other.manaka").write_bytes(b"someone's model")
    out = cli(["--steps", "3", "--checkpoint", "other.ckpt", *QUICK], tmp_path)
    assert out.returncode == 0 and "saved the model (step 3) to other-1.manaka" in out.stdout, out.stderr
    assert (tmp_path / "other.manaka").read_bytes() == b"someone's model"
    out = cli(["--steps", "2", *QUICK], tmp_path)  # no checkpoint: model.manaka in the current folder
    assert out.returncode == 0 and "saved the model (step 2) to model.manaka" in out.stdout, out.stderr
    out = cli(["--steps", "2", "--save", "other.manaka", *QUICK], tmp_path)  # named: replaced
    assert out.returncode == 0 and mk.Model.load(tmp_path / "other.manaka").config.pair_dim == 2
    out = cli(["--steps", "2", "--no-save", *QUICK], tmp_path)
    assert out.returncode == 0 and "saved the model" not in out.stdout
    assert sorted(os.listdir(tmp_path)) == ["model.manaka", "other-1.manaka", "other.ckpt", "other.manaka",
                                            "run.ckpt", "run.manaka"]


def test_an_output_that_is_the_other_output_or_an_input_is_refused_before_anything_is_written(tmp_path):
    # --save over --checkpoint: the model would replace the checkpoint the run just wrote
    line = one_line(cli(["--steps", "2", "--checkpoint", "run.ckpt", "--save", "./run.ckpt", *QUICK], tmp_path))
    assert "--checkpoint run.ckpt and --save ./run.ckpt name the same file" in line, line
    assert os.listdir(tmp_path) == []
    # an output that is a file the run reads: refused whatever --force or --save say
    data = mk.Dataset.synthetic(300, SMALL, seed=1)
    data.save(str(tmp_path / "ds"))
    (tmp_path / "ds" / "notes.txt").write_text("mine")
    before = {n: (tmp_path / "ds" / n).read_bytes() for n in os.listdir(tmp_path / "ds")}
    base = ["--steps", "2", "--batch-size", "32", "--device", "cpu", "--no-progress", *TINY]
    for option, path, extra in (("--save", "ds/meta.json", []), ("--checkpoint", "ds/tokens.npy", ["--force"]),
                                ("--checkpoint", "ds/legal_moves.npy", ["--resume"])):
        for data_option in ("--data", "--eval-data"):
            data_args = ["--data", "ds"] if data_option == "--data" else ["--data", "ds", "--eval-data", "ds"]
            line = one_line(cli(base + data_args + [option, path, *extra], tmp_path))
            assert f"{option} {path} is a file of --data ds" in line and "replace the data" in line, line
    assert {n: (tmp_path / "ds" / n).read_bytes() for n in os.listdir(tmp_path / "ds")} == before
    assert sorted(os.listdir(tmp_path)) == ["ds"]
    # a thread count the core refuses: one line (it was a traceback)
    line = one_line(cli(base + ["--data", "ds", "--threads", "5000"], tmp_path))
    assert line == ("python -m manaka.train: --threads: set_num_threads: n must be at most 4096 (more threads than "
                    "any machine's cores, which the system may not be able to start), got 5000"), line
    # a path under a file cannot be written: refused now, not once the run has trained
    (tmp_path / "afile").write_text("x")
    for option in ("--save", "--checkpoint"):
        line = one_line(cli(base + ["--data", "ds", option, "afile/sub/m.out"], tmp_path))
        assert f"{option} afile/sub/m.out cannot be written: {tmp_path / 'afile'} is a file" in line, line
        # a folder's name ("runs/new/"): the run trained, then its rename failed ("Not a directory")
        line = one_line(cli(base + ["--data", "ds", option, "runs/new/"], tmp_path))
        assert f"{option} runs/new/ cannot be written: it ends with a path separator, which names a folder" in line
    assert (tmp_path / "afile").read_text() == "x"
    # a meta.json holding the synthetic data's figure keys with other values: the summary
    # formatted them and failed after training, before the model was saved (a traceback)
    import json
    meta = json.load(open(tmp_path / "ds" / "meta.json"))
    meta.update(teacher_accuracy_ceiling="high", teacher_policy_loss_floor=None)
    json.dump(meta, open(tmp_path / "ds" / "meta.json", "w"))
    out = cli(base + ["--data", "ds", "--save", "odd-meta.manaka"], tmp_path)
    assert out.returncode == 0 and "saved the model (step 2) to odd-meta.manaka" in out.stdout, out.stderr
    assert "teacher's ceiling" not in out.stdout
    os.remove(tmp_path / "odd-meta.manaka")
    # a file in the data's folder that the run does not read may be named
    out = cli(base + ["--data", "ds", "--save", "ds/notes.txt"], tmp_path)
    assert out.returncode == 0 and mk.Model.load(tmp_path / "ds" / "notes.txt").config.embed_dim == 8, out.stderr


def _interrupt(args, cwd, signum=signal.SIGINT):
    """Starts a run, sends signum once it has logged step 3 (from inside the run), and
    returns (return code, stdout, stderr)."""
    proc = subprocess.Popen(CLI + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=cwd, env=ENV)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if "step=3 " in line:
                proc.send_signal(signum)
                break
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    return proc.returncode, "".join(lines) + out, err


def test_ctrl_c_saves_the_checkpoint_and_says_so_without_a_traceback(tmp_path):
    path = tmp_path / "int.ckpt"
    code, out, err = _interrupt(["--steps", "100000", "--log-every", "1", "--checkpoint", path, *QUICK], tmp_path)
    assert code == 130 and "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    m = re.search(r"interrupted at step (\d+); saved the checkpoint (\S+) at step (\d+)\n", out)
    assert m and m.group(1) == m.group(3) and m.group(2) == str(path), out[-3000:]
    step = int(m.group(1))
    assert step >= 3 and mk.checkpoint.load(path)["step"] == step
    assert not (tmp_path / "int.manaka").exists()  # an interrupted run saves its checkpoint, not a model
    resumed = cli(["--steps", step + 2, "--log-every", "1", "--checkpoint", path, "--resume", *QUICK], tmp_path)
    assert resumed.returncode == 0 and f"done: step {step + 2}," in resumed.stdout, resumed.stderr
    assert f"step={step + 1} " in resumed.stdout and f"step={step} " not in resumed.stdout


def test_sigterm_saves_the_checkpoint_at_the_end_of_its_step_and_exits_143(tmp_path):
    # kill PID or a job scheduler's time limit: the steps since the last checkpoint are kept
    path = tmp_path / "term.ckpt"
    code, out, err = _interrupt(["--steps", "100000", "--log-every", "1", "--checkpoint", path, *QUICK], tmp_path,
                                signal.SIGTERM)
    assert code == 143 and "Traceback" not in err, err[-3000:]
    m = re.search(r"interrupted at step (\d+); saved the checkpoint (\S+) at step (\d+)\n", out)
    assert m and m.group(1) == m.group(3) and m.group(2) == str(path), out[-3000:]
    assert int(m.group(1)) >= 3 and mk.checkpoint.load(path)["step"] == int(m.group(1))


def test_ctrl_c_without_a_checkpoint_says_nothing_was_saved(tmp_path):
    code, out, err = _interrupt(["--steps", "100000", "--log-every", "1", *QUICK], tmp_path)
    assert code == 130 and "Traceback" not in err, err[-3000:]
    assert re.search(r"interrupted at step \d+: no checkpoint path was given; nothing was saved", out), out[-3000:]
    assert os.listdir(tmp_path) == []


def test_non_positive_sizes_are_refused_and_zero_steps_says_nothing_was_trained(tmp_path):
    for option in ("--batch-size", "--log-every", "--producers"):
        out = cli(["--steps", "1", *QUICK, option, "0"], tmp_path)
        assert out.returncode == 2 and f"argument {option}: must be > 0, got 0" in out.stderr, out.stderr
    out = cli(["--steps", "0", "--checkpoint", "c.ckpt", *QUICK], tmp_path)
    assert out.returncode == 0, out.stderr
    assert "no step was run (--steps 0): nothing was trained, and no checkpoint written" in out.stdout
    assert "the model was not saved: no step was run" in out.stdout and "holds" not in out.stdout
    assert os.listdir(tmp_path) == []


def test_infinite_run_lengths_and_rates_are_refused_naming_the_option(tmp_path):
    """Before, --epochs inf failed after the model was built with "cannot convert float
    infinity to integer", and --time-limit / --lr inf with fit's and Trainer's names."""
    for option in ("--epochs", "--time-limit", "--lr", "--dist-timeout"):
        out = cli([*QUICK, option, "inf"], tmp_path)
        assert out.returncode == 2 and f"argument {option}: must be a finite number, got inf" in out.stderr, out.stderr
    assert os.listdir(tmp_path) == []


def test_a_seed_too_large_for_the_data_order_is_refused_naming_the_option(tmp_path):
    # before: "Loader: seed must be <= ...", naming no option of the command
    out = cli([*QUICK, "--steps", "1", "--seed", str(2**63)], tmp_path)
    assert out.returncode == 2 and f"argument --seed: must be <= 2**62, got {2**63}" in out.stderr, out.stderr
    out = cli([*QUICK, "--steps", "1", "--no-save", "--seed", str(2**62)], tmp_path)
    assert out.returncode == 0, out.stderr


def test_an_empty_path_is_refused_not_read_as_an_option_not_given(tmp_path):
    """Before, --data "" trained on synthetic data, --eval-data "" and --checkpoint "" ran
    without them, and --save "" saved to model.manaka, each without a word."""
    for option in ("--data", "--eval-data", "--checkpoint", "--save"):
        out = cli(["--steps", "1", *QUICK, option, ""], tmp_path)
        assert out.returncode == 2, out.stdout
        assert f"argument {option}: an empty path (an unset shell variable?)" in out.stderr, out.stderr
    assert os.listdir(tmp_path) == []


def test_steps_and_epochs_together_are_refused(tmp_path):
    """Before, --steps won and --epochs was ignored without a word (--steps 1000 --epochs 0.02
    trained 2.5 epochs)."""
    out = cli([*QUICK, "--steps", "3", "--epochs", "0.5"], tmp_path)
    assert out.returncode == 2 and "argument --epochs: not allowed with argument --steps" in out.stderr, out.stderr
    assert os.listdir(tmp_path) == []


def test_epochs_of_less_than_a_step_are_refused(tmp_path):
    """--epochs 0.001 rounded to 0 steps, and the run said "no step was run (--steps 0)",
    naming an option it was not given, and exited 0."""
    line = one_line(cli([*QUICK, "--epochs", "0.001"], tmp_path))  # 600 positions: 10 steps of 64 an epoch
    assert line == "python -m manaka.train: --epochs 0.001 is less than half a step of the 10 of an epoch: " \
                   "nothing would be trained"
    assert os.listdir(tmp_path) == []


def test_data_given_twice_is_refused(tmp_path):
    """--data a --data b trained on b alone (argparse: the last wins), without a word."""
    for option in ("--data", "--eval-data"):
        out = cli([*QUICK, "--steps", "1", option, "a.hcpe", option, "b.hcpe"], tmp_path)
        assert out.returncode == 2, out.stdout
        assert (f"argument {option}: given twice (a.hcpe and b.hcpe); name several files with one glob or folder"
                in out.stderr), out.stderr
    assert os.listdir(tmp_path) == []


def test_a_time_limit_alone_trains_until_it_over_many_epochs(tmp_path):
    """Before, a time limit alone still stopped after one epoch (4 steps here)."""
    mk.Dataset.synthetic(128, SMALL, seed=0).save(tmp_path / "train")
    mk.Dataset.synthetic(64, SMALL, seed=1).save(tmp_path / "held")
    out = cli(["--time-limit", "4", "--data", "train", "--eval-data", "held", "--batch-size", "32", "--threads", "1",
               "--log-every", "5", "--no-save", "--device", "cpu", "--no-progress", *TINY], tmp_path)
    assert out.returncode == 0, out.stderr
    assert "held-out: 64 positions, evaluated about every 0.4s and at the end" in out.stdout
    done = re.search(r"done: step (\d+), epoch ([\d.]+), ([\d.]+)s", out.stdout)
    assert done and float(done.group(2)) > 1 and float(done.group(3)) >= 4.0, out.stdout
    # one evaluation at the first step after each tenth of the budget, and one at the end
    evaluations = [line for line in out.stdout.splitlines() if EVAL_LOG.match(line)]
    assert 2 <= len(evaluations) <= 11, out.stdout


def test_move_shared_option_gives_the_model_its_rows(tmp_path, capsys):
    from manaka import train
    out = tmp_path / "m.manaka"
    args = ["--steps", "2", "--synthetic", "300", "--eval-positions", "0", "--no-progress", "--batch-size", "32",
            "--device", "cpu", *TINY]
    moves = mk.Dataset.synthetic(300).num_moves
    C = next(c for c in (8, 7, 6, 5, 4, 3, 2) if moves % c == 0)  # classes that divide the moves
    assert train.main(args + ["--save", str(out), "--move-pairs", str(C), "--move-shared", "1"]) == 0
    model = mk.Model.load(out)
    assert model.config.move_shared == 1
    p = model.parameters()
    assert p["move_shared_class"].shape == (C, model.config.head_width)
    assert p["move_shared_group"].shape == (moves // C, model.config.head_width)
    assert np.abs(p["move_shared_class"]).max() > 0 and np.abs(p["move_shared_group"]).max() > 0  # trained from 0
    capsys.readouterr()
    assert train.main(args + ["--move-shared", "1"]) == 2  # no classes
    assert "move_shared = 1 needs move_pairs = C >= 1 classes" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train.main(args + ["--move-pairs", str(C), "--move-shared", "2"])


def test_move_hidden_gate_option_gives_the_model_its_gate(tmp_path, capsys):
    from manaka import train
    out = tmp_path / "m.manaka"
    args = ["--steps", "2", "--synthetic", "300", "--eval-positions", "0", "--no-progress", "--batch-size", "32",
            "--device", "cpu", *TINY]
    assert train.main(args + ["--save", str(out), "--move-pairs", "4", "--move-pair-board", "2,2,1",
                              "--move-hidden", "3", "--move-hidden-gate", "1"]) == 0
    model = mk.Model.load(out)
    assert model.config.move_hidden_gate == 1
    gate = model.parameters()["move_hidden_gate"]
    assert gate.shape == (model.config.head_width, 3) and np.abs(gate).max() > 0  # trained from 0
    capsys.readouterr()
    assert train.main(args + ["--move-hidden-gate", "1"]) == 2  # no MoveHidden
    assert "move_hidden_gate = 1 needs MoveHidden's units" in capsys.readouterr().err


def test_value_hidden_option_gives_the_value_head_its_layer(tmp_path, capsys):
    from manaka import train
    out = tmp_path / "m.manaka"
    args = ["--steps", "2", "--synthetic", "300", "--eval-positions", "0", "--no-progress", "--batch-size", "32",
            "--device", "cpu", *TINY]
    assert train.main(args + ["--save", str(out), "--value-hidden", "6"]) == 0
    model = mk.Model.load(out)
    assert model.config.value_hidden == 6
    p = model.parameters()
    assert p["value_hidden.weight"].shape == (6, model.config.hidden[-1]) and p["value.weight"].shape == (1, 6)
    capsys.readouterr()
    assert train.main(args + ["--value-hidden", "-1"]) == 2
    assert "value_hidden must be >= 0, got -1" in capsys.readouterr().err


def test_mover_encoding_trains_a_model_with_move_kinds(tmp_path):
    """--moves capture-defended-check-escape-mover: the model gets move_kinds = 14, its move
    table the 262,440 rows of the encoding without the mover, and a kind table."""
    from manaka import train
    import shogi_reference as sref
    rng = np.random.default_rng(np.random.SeedSequence().entropy)
    boards = [b.copy() for b in sref.random_positions(200, int(rng.integers(1 << 30)))]
    recs, _ = sref.records(boards, mk.shogi.HCPE, rng)
    data = tmp_path / "g.hcpe"
    recs.tofile(data)
    out = tmp_path / "m.manaka"
    assert train.main(["--data", str(data), "--steps", "2", "--eval-positions", "0", "--no-progress", "--batch-size", "32",
                       "--device", "cpu", "--moves", "capture-defended-check-escape-mover", "--hidden", "16",
                       "--save", str(out)]) == 0
    model = mk.Model.load(out)
    assert model.config.move_kinds == 14 and model.config.num_moves == 2187 * 120 * 14
    p = model.parameters()
    assert p["move_table"].shape[0] == 2187 * 120 and p["move_kind_table"].shape[0] == 2187 * 14
    assert np.abs(p["move_kind_table"]).max() > 0  # trained from 0
