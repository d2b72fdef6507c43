"""The Loader under other threads and other processes (issue 11): close() / stop() from any
thread never hangs (item 2). Each scenario runs in a child process with a time limit, so a
deadlock fails the test instead of hanging the suite."""
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIMIT_S = 240  # generous: the runs below take seconds; only a hang reaches it


def run_child(code: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    try:
        out = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                             timeout=LIMIT_S, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"the child hung (killed after {LIMIT_S} s); last output: {e.stdout!r}") from None
    assert out.returncode == 0, f"child exited with {out.returncode}: {out.stdout[-2000:]} {out.stderr[-3000:]}"
    return out.stdout


SETUP = """
    import os, random, sys, threading, time
    from types import SimpleNamespace
    import manaka as mk
    ds = mk.Dataset.synthetic(400, SimpleNamespace(num_tokens=300, num_moves=500, tokens_per_side=8, orders=2), seed=0)
    base = len(os.listdir("/proc/self/task"))

    def settled():  # every producer joined: the thread count is back to what it was
        for _ in range(500):
            if len(os.listdir("/proc/self/task")) <= base:
                return True
            time.sleep(0.01)
        return False
"""


def test_close_from_a_watchdog_thread_while_iterating():
    """A watchdog closes the loader while the loop is waiting for batches and the generator's
    own `finally` stops it: before the fix 26 of 40 runs deadlocked (a double pthread_join).
    The loop ends without an error (or, closed before it began, says the loader is closed)."""
    out = run_child(SETUP + """
    rng = random.Random(0)
    outcomes = {"ended": 0, "closed before": 0}
    for r in range(80):
        loader = mk.Loader(ds, batch_size=1, producers=4, prefetch=2)
        delay = rng.random() * 0.02
        watchdog = threading.Thread(target=lambda: (time.sleep(delay), loader.close()))
        watchdog.start()
        try:
            for b in loader:
                assert b.counts.min() >= 1
            outcomes["ended"] += 1
        except RuntimeError as e:
            assert "closed loader" in str(e), e
            outcomes["closed before"] += 1
        watchdog.join()
        assert settled(), r
    print("ok", outcomes)
    """)
    assert out.startswith("ok"), out


def test_many_concurrent_stops():
    """Eight threads stop the loader at once while its generator is closed: before the fix
    10 of 10 runs deadlocked."""
    out = run_child(SETUP + """
    for r in range(25):
        loader = mk.Loader(ds, batch_size=1, producers=4, prefetch=2)
        it = iter(loader)
        next(it)
        barrier = threading.Barrier(9)
        stoppers = [threading.Thread(target=lambda: (barrier.wait(), loader._core.stop())) for _ in range(8)]
        for t in stoppers:
            t.start()
        barrier.wait()
        it.close()
        for t in stoppers:
            t.join()
        assert settled(), r
        assert len(list(loader)) == len(loader) - 1  # usable afterwards: the epoch resumes at batch 1
        assert settled(), r
    print("ok")
    """)
    assert out.startswith("ok"), out
