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


def assert_adam_close(got, want, lr, what=""):
    """Parameters after a few AdamW steps equal to another run's up to a reordered float sum of
    the gradients (data-parallel ranks against one process). Adam's step is ~lr per element
    whatever the gradient's size, so a reordered sum moves almost every parameter by a few ulps
    of lr (atol 2e-6 = lr / 10,000 at lr 0.02); but where an element's gradient terms cancel to
    about eps, its normalised step m / (sqrt(v) + eps) follows the sum's last bits, and such an
    element may move further. So: every element within lr / 20 (a flipped sign would be ~2 lr),
    and at most 1 % of them (at least one) beyond the tight bound."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    diff = np.abs(got - want)
    assert got.shape == want.shape and diff.max(initial=0) <= lr / 20, (what, diff.max(initial=0))
    off = diff > lr / 1e4 + 1e-5 * np.abs(want)
    assert off.sum() <= max(1, off.size // 100), (what, int(off.sum()), off.size)
