"""mk.fit: loop, log line, lazy loss reads, checkpoints, exact resume, Ctrl-C."""
import os
import re
import signal
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

import manaka as mk
from manaka import checkpoint as ckpt
from fake_training import FakeModel, FakeTrainer

SMALL = SimpleNamespace(num_tokens=300, num_moves=500, tokens_per_side=8, orders=2)
LOG = re.compile(r"^\[[0-9hms.]+\] step=\d+ loss=[-\d.na]+ acc=[\d.na]+ lr=[\d.e+-]+ \| [\d.]+[kM]? pos/s \| "
                 r"q=\[\d+/\d+\] wait=[\d.]+% \| epoch [\d.]+ ETA \S+$")


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


def test_interrupt_leaves_no_threads_and_no_partial_checkpoint(ds, tmp_path):
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
    assert "interrupted at step" in lines[-1]
    for _ in range(100):
        if len(os.listdir("/proc/self/task")) <= base:
            break
        time.sleep(0.01)
    assert len(os.listdir("/proc/self/task")) <= base
    assert os.listdir(tmp_path) == ["run.ckpt"]  # no temporary left behind
    assert ckpt.load(path)["step"] % 7 == 0


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
