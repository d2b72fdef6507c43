import os
import sys
import zlib

import numpy as np
import pytest

# tests import helpers such as fake_training.py from this folder
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def rng(request):
    """A fresh generator per test, seeded from the test's name so failures reproduce."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def rel_err(got, want):
    """Norm-wise relative error (robust to entries that are near zero)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    scale = np.linalg.norm(want)
    diff = np.linalg.norm(got - want)
    return diff / scale if scale > 0 else diff


def assert_close(got, want, tol=1e-5):
    """Same shape, every value finite, and rel_err(got, want) below `tol`: float32 sums
    against float64 references, robust to entries that cancel to near zero."""
    got = np.asarray(got, np.float64)
    assert got.shape == np.shape(want) and np.all(np.isfinite(got))
    err = rel_err(got, want)
    assert err < tol, f"relative error {err:.2e} >= {tol:.0e}"


# Perf mode of tests/test_backend_ops.py (MANAKA_BACKEND_OPS_PERF=N): the median seconds
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
