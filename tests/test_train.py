"""The main job: `python -m manaka.train`, and mk.fit / mk.evaluate with the real Model."""
import re
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

import manaka as mk
from test_fit import LOG
from test_fit_eval import EVAL_LOG

SMALL = SimpleNamespace(num_tokens=300, num_moves=500, tokens_per_side=8, orders=2)
TINY = ["--embed-dim", "8", "--pair-dim", "2", "--hidden", "16", "--head-width", "16"]


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


def small_run(ds, steps, path=None, resume=False, stop=None):
    cfg = mk.ModelConfig(num_tokens=300, num_moves=500, tokens_per_side=8, embed_dim=8, orders=2, pair_dim=2,
                         hidden=(16,), head_width=8)
    model = mk.Model(cfg, seed=0)
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
    assert "python -m manaka.train: Dataset.open(" in err and "not a directory" in err
    assert train.main(["--resume"]) == 2
