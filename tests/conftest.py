import os
import sys
import zlib

import numpy as np
import pytest

# Test files import the shared modules of tests/helpers/ (references, fixtures, fake
# engines, worker scripts) by their bare names, from any folder of tests/.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "helpers"))


@pytest.fixture
def rng(request):
    """A fresh generator per test, seeded from the test's name so failures reproduce: its
    file's base name and the test's name within it (written tests/<file>::<test>, the id it
    had when tests/ was one folder), so a test draws the same inputs whichever folder holds
    it."""
    path, _, name = request.node.nodeid.partition("::")
    return np.random.default_rng(zlib.crc32(f"tests/{os.path.basename(path)}::{name}".encode()))


@pytest.fixture
def default_sigint():
    """Python's own Ctrl-C handler for the test, restored after it. A process started with
    SIGINT ignored (a background job of a non-interactive shell: `pytest &` in a script)
    keeps it ignored, and Python then installs no handler: a test that sends itself SIGINT
    would wait for a KeyboardInterrupt that never comes."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


# Perf mode of tests/conformance/test_backend_ops.py (MANAKA_BACKEND_OPS_PERF=N): the median seconds
# of each (entry, backend), printed after the run and never asserted.
BACKEND_OPS_PERF = pytest.StashKey[dict]()


def pytest_terminal_summary(terminalreporter, config):
    perf = config.stash.get(BACKEND_OPS_PERF, None)
    if not perf:
        return
    backends = sorted({b for _, b in perf})
    entries = list(dict.fromkeys(e for e, _ in perf))
    terminalreporter.section("backend ops: median microseconds per call (small shapes)")
    terminalreporter.write_line(f"{'entry':32}" + "".join(f"{b:>14}" for b in backends))
    for e in entries:
        cells = [f"{perf[(e, b)] * 1e6:14.1f}" if (e, b) in perf else f"{'-':>14}" for b in backends]
        terminalreporter.write_line(f"{e:32}" + "".join(cells))
