"""mk.fit(eval_data=..., eval_every=N): held-out loss and accuracy in the log line and the
History, equal to mk.evaluate on the same model at those steps, kept across a resume."""
import os
import re

import numpy as np
import pytest

import manaka as mk
from manaka import checkpoint as ckpt
from model_cases import SMALL, SMALL_MODEL as CFG
from train_cli import EVAL_LOG, TINY

HELD = ("eval_loss", "eval_policy_loss", "eval_value_loss", "eval_accuracy", "eval_positions")


@pytest.fixture(scope="module")
def data():
    # 400 positions, 9 batches of 48 per epoch: the runs cross an epoch; 130 held out,
    # evaluated in batches of 1024 and of 50 (a partial last batch).
    return mk.Dataset.synthetic(400, SMALL, seed=0), mk.Dataset.synthetic(130, SMALL, seed=5)


def train(ds, held, total, stop=None, path=None, resume=False, lines=None, **kw):
    model = mk.Model(CFG, seed=0)
    trainer = mk.Trainer(model, lr=1e-2, warmup_steps=3, schedule="cosine", total_steps=total, value_weight=0.7)
    loader = mk.Loader(ds, batch_size=48, producers=2, seed=7)
    history = mk.fit(model, loader, steps=stop or total, trainer=trainer, log_every=4, checkpoint=path,
                     resume=resume, progress=False, log=(lines.append if lines is not None else lambda s: None),
                     eval_data=held, **kw)
    return model, history


def held_out(history):
    return {r["step"]: {k: r[k] for k in HELD} for r in history if "eval_loss" in r}


def test_held_out_values_are_mk_evaluate_at_those_steps(data):
    ds, held = data
    lines = []
    _, history = train(ds, held, 12, lines=lines, eval_every=5, eval_batch_size=50)
    got = held_out(history)
    assert sorted(got) == [5, 10, 12]  # every 5 steps and at the end
    assert [r["step"] for r in history] == [4, 5, 8, 10, 12]  # evaluation steps are logged too

    # The same run, stopped at each of those steps to call mk.evaluate on the model.
    model = mk.Model(CFG, seed=0)
    trainer = mk.Trainer(model, lr=1e-2, warmup_steps=3, schedule="cosine", total_steps=12, value_weight=0.7)
    loader = mk.Loader(ds, batch_size=48, producers=2, seed=7)
    for step, more in ((5, 5), (10, 5), (12, 2)):  # fit's steps count from 0 in each call without resume
        mk.fit(model, loader, steps=more, trainer=trainer, progress=False, log=lambda s: None)
        assert trainer.step_count == step
        want = mk.evaluate(model, held, batch_size=50, value_weight=0.7)
        assert got[step] == {f"eval_{k}" if k != "positions" else "eval_positions": want[k]
                             for k in ("loss", "policy_loss", "value_loss", "accuracy", "positions")}, step
        assert got[step]["eval_positions"] == 130
        # the value loss weighs in as in training: loss = policy + 0.7 value
        assert got[step]["eval_loss"] == pytest.approx(want["policy_loss"] + 0.7 * want["value_loss"])

    # the log line of each evaluation step shows them; the others do not
    shown = {int(m.group(1)): (float(m.group(2)), float(m.group(3))) for m in map(EVAL_LOG.match, lines) if m}
    assert sorted(shown) == [5, 10, 12] and len(lines) == 5, lines
    for step, (loss, acc) in shown.items():
        assert loss == float(f"{got[step]['eval_loss']:.4f}") and acc == float(f"{got[step]['eval_accuracy']:.3f}")
    steps, acc = history.series("eval_accuracy")
    assert list(steps) == [5, 10, 12] and list(acc) == [got[s]["eval_accuracy"] for s in (5, 10, 12)]
    assert np.isnan(history["eval_loss"][0]) and "eval_loss=" in repr(history)


def test_without_eval_every_only_the_end_is_evaluated(data):
    ds, held = data
    _, history = train(ds, held, 9)
    assert sorted(held_out(history)) == [9] and [r["step"] for r in history] == [4, 8, 9]


def test_resume_keeps_the_held_out_history(data, tmp_path):
    ds, held = data
    full_model, full = train(ds, held, 14, eval_every=3)
    path = str(tmp_path / "run.ckpt")
    train(ds, held, 14, stop=7, path=path, eval_every=3)
    saved = held_out(ckpt.load(path)["history"])
    assert sorted(saved) == [3, 6, 7]  # 7: the end of the first part
    model, resumed = train(ds, held, 14, path=path, resume=True, eval_every=3)
    got, want = held_out(resumed), held_out(full)
    assert sorted(got) == [3, 6, 7, 9, 12, 14] and sorted(want) == [3, 6, 9, 12, 14]
    for step in (3, 6, 9, 12, 14):  # a resumed CPU run is bitwise the uninterrupted one
        assert got[step] == want[step], step
    for name, value in full_model.state_dict().items():
        assert np.array_equal(model.state_dict()[name], value), name


def test_shogi_records_and_loaders_as_eval_data(tmp_path):
    pytest.importorskip("cshogi")
    from manaka import shogi
    from shogi_reference import make_records

    _, hcpe, _ = make_records(150, 41)
    hcpe[:100].tofile(tmp_path / "train.hcpe")
    hcpe[100:].tofile(tmp_path / "held.hcpe")
    train_files, held = shogi.open_hcpe(str(tmp_path / "train.hcpe")), shogi.open_hcpe(str(tmp_path / "held.hcpe"))
    cfg = mk.ModelConfig(num_tokens=shogi.NUM_TOKENS, num_moves=shogi.NUM_LABELS, tokens_per_side=40, embed_dim=8,
                         orders=2, pair_dim=2, hidden=(16,), head_width=8)
    model = mk.Model(cfg, seed=0)
    history = mk.fit(model, mk.Loader(train_files, batch_size=32, producers=2), steps=4, eval_data=held,
                     eval_every=2, progress=False, log=lambda s: None)
    assert history.last["eval_positions"] == 50
    assert history.last["eval_loss"] == mk.evaluate(model, held)["loss"]
    # a Loader is evaluated one epoch from its position, and left open for its owner
    loader = mk.Loader(held, batch_size=16, producers=1, shuffle=False)
    history = mk.fit(model, mk.Loader(train_files, batch_size=32, producers=2), steps=2, eval_data=loader,
                     progress=False, log=lambda s: None)
    # the same batches of 16 as the loader's: the same sums, bit for bit
    assert history.last["eval_positions"] == 50
    assert history.last["eval_loss"] == mk.evaluate(model, held, batch_size=16)["loss"]
    assert history.last["eval_accuracy"] == mk.evaluate(model, loader)["accuracy"]


def test_no_thread_is_left_behind(data):
    ds, held = data
    base = len(os.listdir("/proc/self/task"))
    train(ds, held, 6, eval_every=2)
    assert len(os.listdir("/proc/self/task")) <= base


def test_bad_arguments(data):
    ds, held = data
    model = mk.Model(CFG, seed=0)
    loader = mk.Loader(ds, batch_size=48, producers=1)
    with pytest.raises(ValueError, match="eval_every must be an int >= 1"):
        mk.fit(model, loader, steps=1, eval_data=held, eval_every=0, progress=False)
    with pytest.raises(ValueError, match="eval_every needs eval_data"):
        mk.fit(model, loader, steps=1, eval_every=5, progress=False)
    with pytest.raises(ValueError, match="eval_every_seconds needs eval_data"):
        mk.fit(model, loader, steps=1, eval_every_seconds=5, progress=False)
    with pytest.raises(ValueError, match="eval_every_seconds must be a number > 0"):
        mk.fit(model, loader, steps=1, eval_data=held, eval_every_seconds=0, progress=False)
    with pytest.raises(TypeError, match="fit: eval_data must be"):
        mk.fit(model, loader, steps=1, eval_data=object(), progress=False)
    with pytest.raises(TypeError, match="fit: eval_data: Loader: dataset must be"):
        mk.fit(model, loader, steps=1, eval_data=[1, 2], progress=False)
    with pytest.raises(ValueError, match="eval_data holds no position"):
        mk.fit(model, loader, steps=1, eval_data=[], progress=False)
    # the training loader as its own held-out data: the first evaluation restarted it and
    # the next training step failed ("superseded"), the model already trained that far
    before = {k: v.copy() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match="eval_data is the training loader itself"):
        mk.fit(model, loader, steps=4, eval_data=loader, eval_every=2, progress=False)
    assert all(np.array_equal(v, model.state_dict()[k]) for k, v in before.items())
    assert loader.epoch == 0 and loader.batch_index == 0  # refused before any step


def test_cli_evaluates_while_training(capsys, monkeypatch, tmp_path):
    from manaka import train
    monkeypatch.chdir(tmp_path)  # the model is saved here (model.manaka, model-1.manaka, ...)

    base = ["--synthetic", "1500", "--eval-positions", "200", "--no-progress", "--batch-size", "64",
            "--device", "cpu", *TINY]
    assert train.main(["--steps", "6", "--log-every", "2", "--eval-every", "3", *base]) == 0
    out = capsys.readouterr().out
    assert "held-out: 200 positions, evaluated every 3 steps and at the end" in out
    lines = [line for line in out.splitlines() if line.startswith("[")]
    assert [re.search(r"step=(\d+)", line).group(1) for line in lines] == ["2", "3", "4", "6"], out
    evaluated = [m for m in map(EVAL_LOG.match, lines) if m]
    assert [m.group(1) for m in evaluated] == ["3", "6"], out
    # the summary's held-out figures are the last evaluation's
    loss, acc = evaluated[-1].group(2), evaluated[-1].group(3)
    assert re.search(rf"held-out \(200 positions\): loss {loss} \(policy [\d.]+, value [\d.]+\), accuracy {acc}", out), out

    # by default about 10 evaluations, on logging steps; --eval-every 0: only at the end
    assert train.main(["--steps", "40", "--log-every", "3", *base]) == 0
    out = capsys.readouterr().out
    assert "evaluated every 6 steps and at the end" in out
    assert [m.group(1) for m in map(EVAL_LOG.match, out.splitlines()) if m] == ["6", "12", "18", "24", "30", "36", "40"]
    assert train.main(["--steps", "4", "--log-every", "2", "--eval-every", "0", *base]) == 0
    out = capsys.readouterr().out
    assert "evaluated at the end" in out
    assert [m.group(1) for m in map(EVAL_LOG.match, out.splitlines()) if m] == ["4"]
    with pytest.raises(SystemExit) as e:
        train.main(["--steps", "4", "--eval-every", "-1", *base])
    assert e.value.code == 2 and "--eval-every: must be >= 0" in capsys.readouterr().err
    # no held-out data: --eval-every was ignored without a word
    no_held = [a if a != "200" else "0" for a in base]
    assert train.main(["--steps", "4", "--eval-every", "2", *no_held]) == 2
    assert "--eval-every needs held-out data: --eval-data (or --eval-positions > 0)" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "model-3.manaka")  # refused before training: nothing saved
