"""Loader: C producers, ordered delivery, seeded epochs, padding, clean shutdown."""
import os
import signal
import threading
import time

import numpy as np
import pytest

import manaka as mk
from model_cases import SMALL



@pytest.fixture(scope="module")
def ds():
    return mk.Dataset.synthetic(1000, SMALL, seed=0)


@pytest.fixture(scope="module")
def soft():
    return mk.Dataset.synthetic(300, SMALL, seed=2, soft_targets=True)


def os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def epoch(loader):
    """One epoch as copies: (indices, batch arrays) per batch."""
    out = []
    for b in loader:
        out.append((loader.last_indices.copy(), b.tokens.copy(), b.legal.copy(), b.counts.copy(),
                    b.target.copy(), b.value.copy(), None if b.policy_target is None else b.policy_target.copy()))
    return out


def test_each_position_once_with_its_own_data(ds):
    loader = mk.Loader(ds, batch_size=64, producers=3, prefetch=4, seed=5)
    assert len(loader) == 16
    seen = []
    for idx, tokens, legal, counts, target, value, _ in epoch(loader):
        seen.append(idx)
        assert tokens.dtype == np.int32 and legal.dtype == np.int32
        assert legal.shape[1] == counts.max()  # padded to the batch's own maximum
        for r, i in enumerate(idx):
            p = ds[int(i)]
            assert np.array_equal(tokens[r], p.tokens)
            assert counts[r] == len(p.legal_moves)
            assert np.array_equal(legal[r, :counts[r]], p.legal_moves)
            assert (legal[r, counts[r]:] == -1).all()
            assert target[r] == p.target and value[r] == np.float32(p.value)
    seen = np.concatenate(seen)
    assert np.array_equal(np.sort(seen), np.arange(len(ds)))
    assert [len(s) for s in np.split(seen, [64 * k for k in range(1, 16)])][-1] == 1000 - 15 * 64


def order(ds, **kw):
    with mk.Loader(ds, batch_size=100, **kw) as loader:
        return np.concatenate([x[0] for x in epoch(loader)])


def test_seeded_order(ds):
    a, b, c = order(ds, seed=1), order(ds, seed=1), order(ds, seed=2)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert np.array_equal(order(ds, shuffle=False), np.arange(len(ds)))
    loader = mk.Loader(ds, batch_size=100, seed=1)
    e0 = np.concatenate([x[0] for x in epoch(loader)])
    e1 = np.concatenate([x[0] for x in epoch(loader)])
    assert np.array_equal(e0, a) and not np.array_equal(e0, e1)
    assert loader.epoch == 2 and np.array_equal(np.sort(e1), np.arange(len(ds)))


def test_producer_count_does_not_change_batches(ds, soft):
    for data in (ds, soft):
        runs = [epoch(mk.Loader(data, batch_size=37, producers=p, prefetch=q, seed=9))
                for p, q in ((1, 1), (4, 8), (8, 2))]
        for other in runs[1:]:
            assert len(other) == len(runs[0])
            for x, y in zip(runs[0], other):
                for u, v in zip(x, y):
                    assert (u is None and v is None) or np.array_equal(u, v)


def test_drop_last_and_soft_padding(soft):
    loader = mk.Loader(soft, batch_size=64, drop_last=True)
    batches = epoch(loader)
    assert len(batches) == len(loader) == 4 and all(len(b[0]) == 64 for b in batches)
    assert len(mk.Loader(soft, batch_size=64)) == 5
    for idx, _, legal, counts, _, _, policy in batches:
        assert policy.shape == legal.shape
        for r, i in enumerate(idx):
            p = soft[int(i)]
            assert np.array_equal(policy[r, :counts[r]], p.policy_target)
            assert (policy[r, counts[r]:] == 0).all()


def test_buffers_are_recycled_unless_copied(ds):
    loader = mk.Loader(ds, batch_size=50, prefetch=1, producers=1, shuffle=False)
    it = iter(loader)
    first = next(it)
    kept = first.tokens.copy()
    for _ in range(3):
        next(it)
    assert not np.array_equal(first.tokens, kept)  # reused by a later batch (documented)
    it.close()
    loader = mk.Loader(ds, batch_size=50, prefetch=1, producers=1, shuffle=False, copy=True)
    it = iter(loader)
    first = next(it)
    kept = first.tokens.copy()
    for _ in range(3):
        next(it)
    assert np.array_equal(first.tokens, kept)
    it.close()


def test_position_resume(ds):
    full = epoch(mk.Loader(ds, batch_size=100, seed=3))
    loader = mk.Loader(ds, batch_size=100, seed=3)
    for k, _ in enumerate(loader):
        if k == 3:
            break
    state = loader.state_dict()
    assert state["epoch"] == 0 and state["batch_index"] == 4
    again = mk.Loader(ds, batch_size=100, seed=3)
    again.load_state_dict(state)
    rest = epoch(again)
    assert len(rest) == 6 and all(np.array_equal(x[0], y[0]) for x, y in zip(rest, full[4:]))
    with pytest.raises(ValueError, match="seed"):
        mk.Loader(ds, batch_size=100, seed=4).load_state_dict(state)
    for bad in (None, [("epoch", 0)]):  # a TypeError naming what it wants, not "'NoneType' is not ..."
        with pytest.raises(TypeError, match=r"Loader.load_state_dict: state must be a mapping \(Loader.state_dict"):
            mk.Loader(ds, batch_size=100, seed=3).load_state_dict(bad)


def test_an_iterator_is_superseded_when_a_newer_one_is_made_not_when_it_starts(ds):
    # counted at its first next(), two iterators made before either started (zip(loader,
    # loader)) both began at the loader's position: the same batch was yielded twice
    base = os_threads()
    full = epoch(mk.Loader(ds, batch_size=100, seed=3))
    loader = mk.Loader(ds, batch_size=100, seed=3, copy=True)
    with pytest.raises(RuntimeError, match="superseded"):
        for _ in zip(loader, loader):
            pass
    assert loader.state_dict()["batch_index"] == 0  # nothing was taken
    older, newer = iter(loader), iter(loader)
    next(newer)
    assert np.array_equal(loader.last_indices, full[0][0])
    with pytest.raises(RuntimeError, match="superseded"):
        next(older)
    # the position is read when an iteration starts: a state loaded in between is where it begins
    later = iter(loader)
    loader.load_state_dict({"epoch": 0, "batch_index": 5})
    next(later)
    assert np.array_equal(loader.last_indices, full[5][0]) and loader.state_dict()["batch_index"] == 6
    # a started iteration that was superseded stops no producer of the newer one when collected
    first = iter(loader)
    next(first)
    second = iter(loader)
    next(second)
    assert np.array_equal(loader.last_indices, full[7][0])
    del first
    next(second)
    assert np.array_equal(loader.last_indices, full[8][0])
    loader.close()
    del second, older, newer, later
    assert settle(base)


def test_stats(ds):
    loader = mk.Loader(ds, batch_size=100, prefetch=3)
    epoch(loader)
    s = loader.stats
    assert s["batches"] == 10 and s["positions"] == 1000 and s["queue_capacity"] == 3
    assert 0 <= s["queue_depth"] <= 3 and s["wait_seconds"] >= 0 and s["running_threads"] == 0


def test_bad_arguments(ds):
    with pytest.raises(ValueError, match="batch_size"):
        mk.Loader(ds, batch_size=0)
    with pytest.raises(ValueError, match="producers"):
        mk.Loader(ds, producers=0)
    with pytest.raises(TypeError, match="prefetch"):
        mk.Loader(ds, prefetch=2.5)
    with pytest.raises(TypeError, match="Dataset"):
        mk.Loader(np.zeros(3))
    with pytest.raises(ValueError, match="batch index"):
        mk.Loader(ds)._core.start(0, 99)
    with pytest.raises(TypeError, match="legal_moves"):
        mk._core.Loader(ds.tokens, ds.legal_offsets, ds.legal_moves.astype(np.int64), ds.target, ds.value,
                        None, 4, 1, 1, True, 0, False)
    bad = ds.legal_offsets.copy()
    bad[5] = bad[4]
    with pytest.raises(ValueError, match="position 4"):  # the C side checks offsets itself
        mk._core.Loader(ds.tokens, bad, ds.legal_moves, ds.target, ds.value, None, 4, 1, 1, True, 0, False)


def test_switches_take_true_or_false_not_any_object(ds):
    # bool() took anything: shuffle="no" shuffled, copy=None did not copy
    for name, value in (("shuffle", "no"), ("drop_last", None), ("copy", "False"), ("shuffle", 2), ("copy", 0.0)):
        with pytest.raises(TypeError, match=f"Loader: {name} must be True or False, got {value!r}"):
            mk.Loader(ds, **{name: value})
    for value in (True, False, np.bool_(True), 1, 0, np.int64(1)):
        assert mk.Loader(ds, shuffle=value, drop_last=value, copy=value).shuffle is bool(value)
    unshuffled = order(ds, shuffle=0, seed=3)
    assert np.array_equal(unshuffled, np.arange(len(unshuffled)))


# ---------------------------------------------------------------- shutdown: no threads left

def settle(baseline):
    for _ in range(100):
        if os_threads() <= baseline:
            return True
        time.sleep(0.01)
    return False


def test_threads_stop_on_exhaustion_close_with_and_exception(ds):
    base, python_threads = os_threads(), threading.active_count()
    loader = mk.Loader(ds, batch_size=10, producers=4, prefetch=2)
    epoch(loader)
    assert settle(base)
    it = iter(loader)
    next(it)
    assert os_threads() >= base + 1
    loader.close()
    assert settle(base)
    with mk.Loader(ds, batch_size=10, producers=4, prefetch=2) as loader:
        for b in loader:
            break
    assert settle(base)
    with pytest.raises(ZeroDivisionError):
        for b in mk.Loader(ds, batch_size=10, producers=4, prefetch=2):
            1 / 0
    assert settle(base)
    loader = mk.Loader(ds, batch_size=10, producers=4)
    it = iter(loader)
    next(it)
    del it, loader
    assert settle(base)
    assert threading.active_count() == python_threads  # producers are C threads only


def test_keyboard_interrupt_does_not_hang(ds, default_sigint):
    """Ctrl-C during a loop that spends its time in next(): KeyboardInterrupt, then no threads."""
    base = os_threads()
    loader = mk.Loader(ds, batch_size=1, producers=2, prefetch=1)
    timer = threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    start = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        while time.perf_counter() - start < 10:
            for b in loader:
                pass
    timer.join()
    assert time.perf_counter() - start < 5
    assert settle(base)


def test_stopped_loader_fails_instead_of_waiting(ds):
    base = os_threads()
    loader = mk.Loader(ds, batch_size=1, producers=1, prefetch=1)
    it = iter(loader)
    next(it)
    loader._core.stop()
    with pytest.raises(RuntimeError, match="no producer is running"):
        for _ in range(5):
            next(it)
    assert settle(base)


def test_stress_many_epochs_small_queue(ds):
    """Races would show as a lost, repeated or misplaced position: 8 producers fighting over a
    queue of 1, against the single-producer order, epoch after epoch."""
    ref = mk.Loader(ds, batch_size=7, producers=1, prefetch=1, seed=11)
    hot = mk.Loader(ds, batch_size=7, producers=8, prefetch=1, seed=11)
    for _ in range(20):
        a = [(ref.last_indices.copy(), b.legal.copy()) for b in ref]
        b = [(hot.last_indices.copy(), b.legal.copy()) for b in hot]
        assert len(a) == len(b) == 143
        for (ia, la), (ib, lb) in zip(a, b):
            assert np.array_equal(ia, ib) and np.array_equal(la, lb)
        assert np.array_equal(np.sort(np.concatenate([i for i, _ in b])), np.arange(len(ds)))
