"""mk.fit: loop, log line, lazy loss reads, checkpoints, exact resume, Ctrl-C."""
import os
import re
import signal
import sys
import threading
import time

import numpy as np
import pytest

import manaka as mk
from manaka import checkpoint as ckpt
from fake_training import FakeModel, FakeTrainer
from model_cases import SMALL, SMALL_MODEL
from train_cli import LOG


@pytest.fixture(scope="module")
def ds():
    return mk.Dataset.synthetic(500, SMALL, seed=0)


def run(ds, steps, **kw):
    model = FakeModel()
    trainer = FakeTrainer(model)
    lines = []
    loader = mk.Loader(ds, batch_size=32, producers=2, seed=1)
    history = mk.fit(model, loader, steps=steps, trainer=trainer, log=lines.append, progress=False, **kw)
    return model, trainer, history, lines, loader


def test_log_line_history_and_lazy_reads(ds):
    model, trainer, history, lines, loader = run(ds, 40, log_every=10)
    assert len(lines) == 4 and all(LOG.match(line) for line in lines), lines
    assert [r["step"] for r in history] == [10, 20, 30, 40]
    assert history["loss"].shape == (4,) and np.isfinite(history["loss"]).all()
    assert 0 <= history["wait_share"].min() and history["wait_share"].max() <= 1
    # the loss is read back only on logging steps
    reads = [s.reads for s in trainer.stats]
    assert sum(reads) == 4 and all(reads[k - 1] == 1 for k in (10, 20, 30, 40))
    # 40 steps of 16 batches per epoch: epochs continue across the loader's boundary
    assert loader.epoch == 2 and loader.batch_index == 8
    assert history.last["epoch"] == pytest.approx(2.5)


def test_epochs_and_final_log(ds):
    _, trainer, history, lines, _ = run(ds, None, epochs=1.5, log_every=100)
    assert trainer.t == 24 and len(lines) == 1 and "step=24" in lines[0]


def test_resume_is_bitwise_exact(ds, tmp_path):
    path = str(tmp_path / "run.ckpt")
    full, full_trainer, *_ = run(ds, 37, log_every=5)
    model = FakeModel()
    trainer = FakeTrainer(model)
    loader = mk.Loader(ds, batch_size=32, producers=2, seed=1)
    mk.fit(model, loader, steps=23, trainer=trainer, checkpoint=path, checkpoint_every=10, log_every=5,
           progress=False, log=lambda s: None)
    assert ckpt.load(path)["step"] == 23
    # a fresh process-like start: new objects, restored from the file
    model = FakeModel(seed=99)
    trainer = FakeTrainer(model)
    loader = mk.Loader(ds, batch_size=32, producers=4, seed=1)
    history = mk.fit(model, loader, steps=37, trainer=trainer, checkpoint=path, resume=True, log_every=5,
                     progress=False, log=lambda s: None)
    assert trainer.seen == full_trainer.seen[23:]
    for k in full.params:
        assert np.array_equal(model.params[k], full.params[k]), k
    assert [r["step"] for r in history] == [5, 10, 15, 20, 23, 25, 30, 35, 37]  # 23: the first run's end


def test_interrupt_saves_a_checkpoint_that_resumes_exactly_and_leaves_no_threads(ds, default_sigint, tmp_path):
    """Ctrl-C lands anywhere in the loop (here in the middle of a step): the step finishes,
    the checkpoint is saved at it, and resuming from it gives the bits of a run that was
    never interrupted."""
    path = str(tmp_path / "run.ckpt")
    warm = threading.Thread(target=lambda: None)  # a sanitizer runtime starts its own thread
    warm.start(), warm.join()                      # with the first one: count it in the base
    base = len(os.listdir("/proc/self/task"))

    class SlowTrainer(FakeTrainer):
        def step(self, batch):
            time.sleep(0.002)
            return super().step(batch)

    model = FakeModel()
    loader = mk.Loader(ds, batch_size=32, producers=4, seed=1)
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    lines = []
    with pytest.raises(KeyboardInterrupt):
        mk.fit(model, loader, steps=100000, trainer=SlowTrainer(model), checkpoint=path, checkpoint_every=7,
               log_every=1000, progress=False, log=lines.append)
    timer.join()
    m = re.fullmatch(r"interrupted at step (\d+); saved the checkpoint (.+) at step (\d+)", lines[-1])
    assert m and m.group(1) == m.group(3) and m.group(2) == path, lines
    for _ in range(100):
        if len(os.listdir("/proc/self/task")) <= base:
            break
        time.sleep(0.01)
    assert len(os.listdir("/proc/self/task")) <= base
    assert os.listdir(tmp_path) == ["run.ckpt"]  # no temporary left behind
    stopped = int(m.group(1))
    assert ckpt.load(path)["step"] == stopped and stopped > 0
    # resumed to a later step: the same bits as one uninterrupted run
    total = stopped + 9
    full, full_trainer, *_ = run(ds, total, log_every=1000)
    model = FakeModel(seed=5)
    trainer = FakeTrainer(model)
    mk.fit(model, mk.Loader(ds, batch_size=32, producers=2, seed=1), steps=total, trainer=trainer, checkpoint=path,
           resume=True, log_every=1000, progress=False, log=lambda s: None)
    assert trainer.seen == full_trainer.seen[stopped:]
    for k in full.params:
        assert np.array_equal(model.params[k], full.params[k]), k


def test_interrupt_without_a_checkpoint_says_nothing_was_saved(ds, default_sigint):
    class InterruptingTrainer(FakeTrainer):
        def step(self, batch):
            if self.t == 5:
                os.kill(os.getpid(), signal.SIGINT)  # arrives inside the step: held until it ends
            return super().step(batch)

    model = FakeModel()
    trainer = InterruptingTrainer(model)
    lines = []
    with pytest.raises(KeyboardInterrupt):
        mk.fit(model, mk.Loader(ds, batch_size=32), steps=100, trainer=trainer, progress=False, log=lines.append)
    assert trainer.t == 6 and lines[-1] == "interrupted at step 6: no checkpoint path was given; nothing was saved"


def test_a_dataset_instead_of_a_loader_is_a_type_error_saying_what_to_do(ds):
    with pytest.raises(TypeError, match=r"fit: loader must be a manaka.Loader, got Dataset \(wrap the data in one: "
                                        r"mk.Loader\(data"):
        mk.fit(FakeModel(), ds, steps=1, trainer=FakeTrainer(FakeModel()), progress=False)


class FakeClock:
    """Stands in for fit's time module: a step takes what the trainer says."""

    def __init__(self):
        self.now = 1000.0

    def perf_counter(self):
        return self.now


def test_positions_per_second_is_positions_over_training_time(ds, monkeypatch):
    """Steps alternately fast and slow, 10 per logged interval: the run's rate is its
    positions over its time (evaluations excluded), not the mean of the intervals' rates."""
    clock = FakeClock()
    monkeypatch.setattr(sys.modules["manaka.fit"], "time", clock)

    class TimedTrainer(FakeTrainer):
        def step(self, batch):
            clock.now += 0.001 if (self.t // 10) % 2 == 0 else 0.5
            return super().step(batch)

    model = FakeModel()
    history = mk.fit(model, mk.Loader(ds, batch_size=32), steps=40, trainer=TimedTrainer(model), log_every=10,
                     progress=False, log=lambda s: None)
    # 40 steps of 32 positions (16 batches of 32 and one of 20 per epoch: 500 positions)
    positions = 2 * 500 + 8 * 32
    seconds = 20 * 0.001 + 20 * 0.5
    assert history.last["positions"] == positions
    assert history.training_time() == pytest.approx(seconds)
    assert history.positions_per_second() == pytest.approx(positions / seconds)
    assert history["positions_per_s"].mean() > 5 * history.positions_per_second()  # what the summary printed before
    from manaka import train
    import io, contextlib
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        train.summary(history, None, ds, None, model, 32)
    assert f"| {positions / seconds:,.0f} positions/s |" in out.getvalue(), out.getvalue()


def test_a_time_budget_alone_runs_every_epoch_it_can_and_evaluates_about_ten_times(ds, monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(sys.modules["manaka.fit"], "time", clock)

    class TimedTrainer(mk.Trainer):
        def step(self, batch):
            clock.now += 0.1
            return super().step(batch)

    model = mk.Model(SMALL_MODEL, seed=0)
    loader = mk.Loader(ds, batch_size=32)
    held = mk.Dataset.synthetic(64, SMALL, seed=4)
    history = mk.fit(model, loader, trainer=TimedTrainer(model), time_limit=20.0, eval_data=held,
                     eval_every_seconds=2.0, log_every=1000, progress=False, log=lambda s: None)
    assert history.last["step"] == 200 and loader.epoch_fraction > 12  # 16 batches per epoch
    steps, _ = history.series("eval_accuracy")
    assert list(steps) == [20, 40, 60, 80, 100, 120, 140, 160, 180, 200]


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    path = str(tmp_path / "c.ckpt")
    ckpt.save(path, {"step": 1})

    def boom(*a, **k):  # interrupted after the bytes are written, before the rename
        raise KeyboardInterrupt
    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save(path, {"step": 2})
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["c.ckpt"] and ckpt.load(path)["step"] == 1


def test_bad_arguments(ds):
    loader = mk.Loader(ds, batch_size=32)
    with pytest.raises(ValueError, match="log_every"):
        mk.fit(FakeModel(), loader, steps=1, trainer=FakeTrainer(FakeModel()), log_every=0)
    with pytest.raises(ValueError, match="checkpoint path"):
        mk.fit(FakeModel(), loader, steps=1, trainer=FakeTrainer(FakeModel()), resume=True)
    # run lengths and budgets named: time_limit NaN never ran out (a time-only run trained
    # forever), epochs NaN / inf failed in int(), -1 as the trainer's total_steps, a float
    # step count was taken and a str failed in a comparison
    for kw, error, words in ((dict(time_limit=float("nan")), ValueError, "time_limit must be a finite number of "
                                                                          "seconds > 0 (or None), got nan"),
                             (dict(time_limit=-1.0), ValueError, "time_limit must be a finite number of seconds > 0"),
                             (dict(time_limit=float("inf")), ValueError, "time_limit must be a finite number"),
                             (dict(epochs=float("nan")), ValueError, "epochs must be a finite number >= 0 (or None), "
                                                                     "got nan"),
                             (dict(epochs=-1), ValueError, "epochs must be a finite number >= 0"),
                             (dict(epochs="1"), TypeError, "epochs must be a finite number >= 0 (or None), got str"),
                             (dict(steps=1.5), TypeError, "steps must be an int, got float"),
                             (dict(steps="3"), TypeError, "steps must be an int, got str"),
                             (dict(steps=True), TypeError, "steps must be an int, got bool"),
                             (dict(steps=2, log_every=1.5), TypeError, "log_every must be an int, got float")):
        model = FakeModel()
        with pytest.raises(error, match=f"^fit: {re.escape(words)}"):
            mk.fit(model, loader, **kw, trainer=FakeTrainer(model), progress=False, log=lambda s: None)



def test_a_checkpoint_that_is_a_file_of_the_data_is_refused_before_anything_is_written(ds, tmp_path):
    # fit(checkpoint=<a file the run reads>) trained, then wrote the checkpoint over the
    # training data (or the held-out data): the data was lost
    train, held = ds.save(str(tmp_path / "train")), ds.save(str(tmp_path / "held"))
    loader = mk.Loader(mk.Dataset.open(train), batch_size=32)
    for path, words, eval_data in ((os.path.join(train, "meta.json"), "of the training data", None),
                                   (os.path.join(held, "meta.json"), "of eval_data", mk.Dataset.open(held))):
        before = open(path, "rb").read()
        model = FakeModel()
        with pytest.raises(ValueError, match=f"^fit: checkpoint {re.escape(repr(path))} is a file {words}: "
                                             "writing it would replace the data"):
            mk.fit(model, loader, steps=2, trainer=FakeTrainer(model), checkpoint=path, eval_data=eval_data,
                   progress=False, log=lambda s: None)
        assert open(path, "rb").read() == before
    # a folder, or a path under a file, was found only when the run's end wrote it
    model = FakeModel()
    trainer = FakeTrainer(model)
    with pytest.raises(IsADirectoryError, match="^.*fit: checkpoint .* is a directory"):
        mk.fit(model, loader, steps=2, trainer=trainer, checkpoint=str(tmp_path), progress=False, log=lambda s: None)
    with pytest.raises(OSError, match="cannot be written: .*meta.json is a file, not a folder"):
        mk.fit(model, loader, steps=2, trainer=trainer, checkpoint=os.path.join(train, "meta.json", "run.ckpt"),
               progress=False, log=lambda s: None)
    with pytest.raises(TypeError, match="^fit: checkpoint must be a path, got int"):
        mk.fit(model, loader, steps=2, trainer=trainer, checkpoint=3, progress=False, log=lambda s: None)
    assert trainer.t == 0


def test_a_trainer_of_another_model_is_refused(ds):
    # fit(model, trainer=mk.Trainer(other)) trained `other` and returned with `model` untouched
    loader = mk.Loader(ds, batch_size=32)
    model, other = FakeModel(), FakeModel()
    trainer = FakeTrainer(other)
    with pytest.raises(ValueError, match=r"^fit: trainer trains another model than the one given"):
        mk.fit(model, loader, steps=2, trainer=trainer, progress=False, log=lambda s: None)
    assert trainer.t == 0
    # a trainer that is not one failed at the first step with an AttributeError
    with pytest.raises(TypeError, match="^fit: trainer must be a manaka.Trainer .*got str"):
        mk.fit(model, loader, steps=2, trainer="adamw", progress=False, log=lambda s: None)

def test_progress_bar_leaves_no_thread(ds, capsys):
    before = threading.active_count()
    model = FakeModel()
    mk.fit(model, mk.Loader(ds, batch_size=32), steps=20, trainer=FakeTrainer(model), log_every=10, progress=True)
    assert threading.active_count() == before
    out = capsys.readouterr()
    assert "step=20" in out.out and "20/20" in out.err  # log lines on stdout, the bar on stderr


def test_time_limit_stops_and_logs(ds):
    class SlowTrainer(FakeTrainer):
        def step(self, batch):
            time.sleep(0.01)
            return super().step(batch)

    model = FakeModel()
    lines = []
    history = mk.fit(model, mk.Loader(ds, batch_size=32), trainer=SlowTrainer(model), time_limit=0.3,
                     log_every=1000, progress=False, log=lines.append)
    assert 5 <= history.last["step"] < 1000 and len(lines) == 1 and LOG.match(lines[0])


def test_bar_ends_at_100_percent_with_the_log_lines_eta_when_time_runs_out(ds, capsys):
    """Ten epochs do not fit in 0.3 s: the run stops by its time limit well before 100% of its
    steps, and the bar still ends complete, at the step where the run ended, showing the
    same ETA as the last log line (0.0s), and no tqdm estimate of its own beside it."""
    class SlowTrainer(FakeTrainer):
        def step(self, batch):
            time.sleep(0.01)
            return super().step(batch)

    model = FakeModel()
    loader = mk.Loader(ds, batch_size=32)
    history = mk.fit(model, loader, epochs=10, trainer=SlowTrainer(model), time_limit=0.3, log_every=7,
                     progress=True)
    out = capsys.readouterr()
    n = history.last["step"]
    assert 5 <= n < 10 * len(loader)
    last_log = [line for line in out.out.splitlines() if line.startswith("[")][-1]
    assert LOG.match(last_log) and f"step={n} " in last_log and last_log.endswith("ETA 0.0s")
    final_bar = [frame for frame in re.split(r"[\r\n]", out.err) if frame.strip()][-1]
    assert "100%" in final_bar and f" {n}/{n} " in final_bar, final_bar
    assert final_bar.count("ETA") == 1 and "ETA 0.0s" in final_bar, final_bar
    assert not re.search(r"\d\d:\d\d<", out.err)  # tqdm's "elapsed<remaining" never shown


def test_evaluation_time_is_left_out_of_the_rate_and_of_the_evaluation_cadence(ds, monkeypatch, tmp_path):
    """Each step takes 0.1 s and each evaluation 5 s (fake clock): evaluations come every
    2 s of training, not of wall time, and positions/s counts training time only, over a
    resumed run too."""
    clock = FakeClock()
    monkeypatch.setattr(sys.modules["manaka.fit"], "time", clock)
    evaluate = sys.modules["manaka.evaluate"].evaluate

    def slow_evaluate(*args, **kw):
        r = evaluate(*args, **kw)
        clock.now += 5.0
        return r
    monkeypatch.setattr(sys.modules["manaka.evaluate"], "evaluate", slow_evaluate)

    class TimedTrainer(mk.Trainer):
        def step(self, batch):
            clock.now += 0.1
            return super().step(batch)

    def run(path, resume=False, time_limit=20.0):
        model = mk.Model(SMALL_MODEL, seed=0)
        return mk.fit(model, mk.Loader(ds, batch_size=32), trainer=TimedTrainer(model), time_limit=time_limit,
                      eval_data=mk.Dataset.synthetic(64, SMALL, seed=4), eval_every_seconds=2.0, log_every=1000,
                      checkpoint=path, resume=resume, progress=False, log=lambda s: None)

    path = str(tmp_path / "run.ckpt")
    history = run(path)
    # wall time at step k: 0.1 k + 5 per evaluation before it; the step that passes 20 s ends the run
    assert list(history.series("eval_accuracy")[0]) == [20, 40, 60, 61]
    assert history.last["elapsed"] == pytest.approx(6.1 + 3 * 5.0)
    assert history.training_time() == pytest.approx(6.1)
    assert history.positions_per_second() == pytest.approx(history.last["positions"] / 6.1)
    resumed = run(path, resume=True, time_limit=0.95)  # 10 more steps, evaluated at the end
    assert resumed.last["step"] == 71 and resumed.training_time() == pytest.approx(7.1)
    assert resumed.last["elapsed"] == pytest.approx(7.1 + 4 * 5.0)  # its own evaluation comes after
