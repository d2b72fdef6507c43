"""Numeric comparisons of the tests: float32 results against float64 references."""
import numpy as np


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
