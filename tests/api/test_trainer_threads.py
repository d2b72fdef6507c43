"""Trainer state under other threads: a failed load_state_dict changes
nothing, the step_count and fused setters and the load take the model like a step does, and
each Stats belongs to its own step."""
import threading

import numpy as np
import pytest

import manaka as mk

import model_cases as cases
from model_cases import staged_twin


def state_of(trainer):
    """The trainer's whole state as plain values, for a bitwise comparison."""
    s = trainer.state_dict()
    return (s["step_count"], s["hyperparameters"], s["pair_state_dtype"],
            {k: {n: a.tobytes() for n, a in s[k].items()} for k in ("exp_avg", "exp_avg_sq")})


def other_state(trainer, step_count=7):
    """A valid state that differs from `trainer`'s in every part."""
    s = trainer.state_dict()
    rng = np.random.default_rng(1)
    return {"step_count": step_count, "pair_state_dtype": "float32",
            "hyperparameters": dict(lr=0.5, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.0, warmup_steps=3,
                                    schedule="cosine", total_steps=100, min_lr=1e-4, value_weight=0.5),
            "exp_avg": {n: rng.standard_normal(a.shape).astype(np.float32) for n, a in s["exp_avg"].items()},
            "exp_avg_sq": {n: rng.random(a.shape).astype(np.float32) for n, a in s["exp_avg_sq"].items()}}


def test_a_load_that_fails_late_changes_nothing():
    """A step count that does not fit int64 used to fail after the hyperparameters and
    moments were replaced."""
    cfg = cases.config()
    trainer = mk.Trainer(mk.Model(cfg, seed=0), lr=1e-3)
    trainer.step(cases.batch(cfg))
    before = state_of(trainer)
    for bad in (2**63, 2**64 + 5, -1):
        with pytest.raises(ValueError, match="step_count"):
            trainer.load_state_dict(other_state(trainer, step_count=bad))
        assert state_of(trainer) == before


def test_load_racing_a_stepping_thread_is_all_or_nothing():
    """A thread steps while this one loads states: each load either applies completely or
    fails ("in use") leaving hyperparameters, moments and step count as they were. The old
    load replaced the hyperparameters first and then failed on a moment."""
    cfg = cases.config(num_tokens=64, num_moves=300, T=16, D=32, hidden=(128,), W=64)
    trainer = mk.Trainer(mk.Model(cfg, seed=0), lr=1e-3)
    b = cases.batch(cfg, B=64, L=32)
    trainer.step(b)
    states = [trainer.state_dict(), other_state(trainer)]  # loaded in turn
    hyper = []
    for state in states[::-1]:  # what each applies (with the model free)
        trainer.load_state_dict(state)
        hyper.insert(0, trainer.hyperparameters)
    assert hyper[0] != hyper[1]
    stop, errors = threading.Event(), []

    def stepper():
        try:
            while not stop.is_set():
                try:
                    trainer.step(b)
                except RuntimeError as e:  # a load, or a setter, held the model
                    assert "in use" in str(e), e
        except Exception as e:  # surfaced below
            errors.append(e)

    worker = threading.Thread(target=stepper)
    worker.start()
    failed = applied = 0
    current = trainer.hyperparameters
    try:
        for attempt in range(400):
            want = states[attempt % 2]
            try:
                trainer.load_state_dict(want)
            except RuntimeError as e:
                assert "in use" in str(e), e
                # steps never change hyperparameters: a failed load must not have either
                assert trainer.hyperparameters == current, attempt
                failed += 1
            else:
                current = trainer.hyperparameters
                assert current == hyper[attempt % 2]
                applied += 1
            for setter in ("fused", "step_count"):  # take the model too: "in use" or applied
                try:
                    setattr(trainer._core, setter, True if setter == "fused" else trainer._core.step_count)
                except RuntimeError as e:
                    assert "in use" in str(e), e
    finally:
        stop.set()
        worker.join()
    assert not errors, errors
    assert failed > 0  # the race was exercised (a step held the model during some loads)
    for want in states:  # with the model free, a load applies exactly what it was given
        trainer.load_state_dict(want)
        assert state_of(trainer)[0] == want["step_count"]
        got = trainer.state_dict()
        for k in ("exp_avg", "exp_avg_sq"):
            for n, a in want[k].items():
                np.testing.assert_array_equal(got[k][n], a, err_msg=f"{k} {n}")


def test_each_stats_fetches_its_own_step():
    """Two threads step one device-path model (stats kept on the device, fetched by step
    number): every Stats has a distinct step and that step's numbers, as a single thread
    stepping the same batch computes them. (A regression guard: the old read of step_count
    after the step released the model raced a CUDA step, whose C part only enqueues work; on
    the CPU the other thread's step is still running then, and this test did not catch it.)"""
    cfg = cases.config()
    b = cases.batch(cfg, seed=3)
    total = 60
    ref = mk.Trainer(mk.Model(cfg, seed=2), lr=1e-2)
    want = {s + 1: ref.step(b).as_dict() for s in range(total + 2)}  # each thread may take one more
    trainer = mk.Trainer(staged_twin(mk.Model(cfg, seed=2)), lr=1e-2)
    got, lock, errors = [], threading.Lock(), []

    def stepper():
        try:
            while True:
                with lock:
                    if len(got) >= total:
                        return
                try:
                    stats = trainer.step(b)
                except RuntimeError as e:
                    assert "in use" in str(e), e
                    continue
                with lock:
                    got.append(stats)
        except Exception as e:
            errors.append(e)

    workers = [threading.Thread(target=stepper) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors, errors
    steps = sorted(s.step for s in got)
    assert steps == list(range(1, len(got) + 1))
    for s in got:
        assert s.as_dict() == want[s.step], s.step


def _step_in_forked_child(trainer, batch, results):
    """Runs in a child of fork(): a step, then an attempt to use 2 threads."""
    trainer.step(batch)
    try:
        mk.set_num_threads(2)
        results.put(("set_num_threads(2) was accepted", mk.get_num_threads()))
    except ValueError as e:
        results.put((str(e), mk.get_num_threads()))


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork()")
def test_a_forked_child_steps_on_one_thread_instead_of_hanging():
    """libgomp keeps the parent's thread team after fork(), and the child's first parallel
    region waited for it forever: a child of a process that trained runs on one thread,
    and asking it for more says why."""
    import multiprocessing

    cfg = cases.config(num_tokens=64, num_moves=300, T=16, D=32, hidden=(256, 256), W=64)
    trainer = mk.Trainer(mk.Model(cfg, seed=0))
    batch = cases.batch(cfg, B=64, L=32)
    mk.set_num_threads(2)
    try:
        trainer.step(batch)  # the parent's team of 2 threads exists now
        fork = multiprocessing.get_context("fork")
        results = fork.Queue()
        child = fork.Process(target=_step_in_forked_child, args=(trainer, batch, results), daemon=True)
        child.start()
        child.join(30)
        if child.exitcode is None:
            child.kill()
        assert child.exitcode == 0, "the forked child hung or failed"
        message, threads = results.get(timeout=10)
        assert "fork()" in message and "'spawn'" in message and threads == 1
        assert mk.get_num_threads() == 2  # the parent keeps its threads
    finally:
        mk.set_num_threads(0)


class _StepsAfterFirstWrite:
    """A model's core that, once its first parameter write has returned, starts a step on
    another thread and returns only when that step holds the model: a step that lands
    between two writes of one load, deterministically."""

    def __init__(self, core, trainer, batch):
        self._real, self._trainer, self._batch = core, trainer, batch
        self.stepper = None

    def __getattr__(self, name):
        return getattr(self._real, name)

    def _after_write(self):
        if self.stepper is not None:
            return
        self.stepper = threading.Thread(target=self._trainer.step, args=(self._batch,))
        self.stepper.start()
        while self.stepper.is_alive():
            try:
                self._real.read("value.bias")
            except RuntimeError:  # "in use by another thread": the step holds the model
                return

    def write(self, name, array):
        self._real.write(name, array)
        self._after_write()

    def write_all(self, pairs):
        self._real.write_all(pairs)
        self._after_write()


def test_model_load_state_dict_is_not_split_by_a_step_on_another_thread():
    """Model.load_state_dict wrote its tensors one call each: a step starting between two of
    them made the next fail ("in use"), leaving the model half loaded. It writes them all
    under one hold of the model: loaded whole (or, refused, unchanged)."""
    cfg = cases.config(num_tokens=64, num_moves=300, T=16, D=32, hidden=(256, 256), W=64)
    model = mk.Model(cfg, seed=0)
    trainer = mk.Trainer(model, lr=0.0, weight_decay=0.0)  # its steps leave the parameters alone
    before = model.state_dict()
    state = {name: np.full_like(a, 0.25) for name, a in before.items()}
    core = model._core
    model._core = racing = _StepsAfterFirstWrite(core, trainer, cases.batch(cfg, B=512, L=64))
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        assert "in use" in str(e), e
    finally:
        model._core = core
        if racing.stepper is not None:
            racing.stepper.join()
    after = model.state_dict()
    loaded = [name for name in after if np.array_equal(after[name], state[name])]
    assert loaded in ([], list(after)), f"half loaded: {loaded}"
    assert loaded == list(after)  # the step came after the whole load
