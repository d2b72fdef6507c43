"""The scale of a record's evaluation in the value target sigmoid(eval / eval_scale), and its
fit to the records' own game results (docs/shogi.md "The value target").

dlshogi reads its engine's evaluation as a win probability with sigmoid(eval / 756), a scale
fitted to its engine's games. Another engine's units differ (Fairy-Stockfish's games are
fitted best near 560), so a fixed scale makes the target over- or under-confident. The fit:
the s > 0 that minimises the binary cross-entropy of sigmoid(eval / s) against the game's
result for the side to move (win 1, draw 0.5, loss 0), over the records (at most
FIT_SAMPLE of them, evenly spaced). With w = 1 / s that is a one-parameter logistic
regression, convex in w, so the loss is unimodal in log s and a golden-section search finds
its minimum.
"""
from __future__ import annotations

import math
from typing import Sequence, Union

import numpy as np

__all__ = ["EVAL_SCALE", "FIT_SAMPLE", "EvalScaleFitError", "check_eval_scale", "fit_eval_scale"]

EVAL_SCALE = 756.0  # dlshogi's
FIT_SAMPLE = 1 << 20  # records read by a fit at most
_LOW, _HIGH = 1.0, 1e5  # the search's bounds on s (an eval is an int16)
_MIN_DECISIVE = 100  # decisive records with a nonzero eval a fit needs


class EvalScaleFitError(ValueError):
    """The records cannot fit an eval_scale (fit_eval_scale says why)."""


def check_eval_scale(eval_scale) -> Union[float, str]:
    """A positive finite number (as float) or "fit"; anything else is a ValueError naming
    eval_scale."""
    if isinstance(eval_scale, str) and eval_scale == "fit":
        return "fit"
    ok = isinstance(eval_scale, (int, float, np.integer, np.floating)) and not isinstance(eval_scale, (bool, np.bool_))
    if not ok or not (0.0 < float(eval_scale) < math.inf):
        raise ValueError(f"shogi: eval_scale must be a positive finite number or 'fit', got {eval_scale!r}")
    return float(eval_scale)


def _sample(arrays: Sequence[np.ndarray], fmt: int):
    """(eval, result) float64 of at most FIT_SAMPLE records of `arrays`, every k-th over their
    concatenation; records that do not decode are left out."""
    from .records import decode

    total = sum(len(a) for a in arrays)
    stride = max(1, -(-total // FIT_SAMPLE))
    evals, results, start = [], [], 0
    for a in arrays:
        part = np.ascontiguousarray(a[(-start) % stride::stride])
        start += len(a)
        if len(part):
            *_, ev, res, status = decode(part, fmt)
            ok = status == 0
            evals.append(ev[ok].astype(np.float64))
            results.append(res[ok].astype(np.float64))
    if not evals:
        return np.zeros(0), np.zeros(0)
    return np.concatenate(evals), np.concatenate(results)


def _bce(log_s: float, ev: np.ndarray, res: np.ndarray) -> float:
    z = ev / math.exp(log_s)
    # -[r log sigmoid(z) + (1 - r) log sigmoid(-z)] = softplus(z) - r z, stable for any z
    return float(np.mean(np.logaddexp(0.0, z) - res * z))


def fit_eval_scale(arrays: Sequence[np.ndarray], fmt: int, what: str) -> float:
    """The eval_scale fitted to the game results of records `arrays` (uint8 [N, record
    bytes] of format `fmt`), rounded to 0.1. An EvalScaleFitError (a ValueError) naming `what` (the files) when the
    records cannot fix one: fewer than 100 decisive records with a nonzero evaluation, or
    evaluations that do not predict the results (the fit runs to the search's bound)."""
    ev, res = _sample(arrays, fmt)
    decisive = int(np.count_nonzero((res != 0.5) & (ev != 0)))
    if decisive < _MIN_DECISIVE:
        raise EvalScaleFitError(f"shogi: eval_scale='fit' needs at least {_MIN_DECISIVE} decisive records with a nonzero "
                         f"evaluation, and {what} have {decisive}; give eval_scale a number (dlshogi's is 756)")
    lo, hi = math.log(_LOW), math.log(_HIGH)
    g = (math.sqrt(5) - 1) / 2
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = _bce(a, ev, res), _bce(b, ev, res)
    while hi - lo > 1e-4:
        if fa <= fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = _bce(a, ev, res)
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = _bce(b, ev, res)
    s = math.exp((lo + hi) / 2)
    if s > _HIGH * 0.99:
        raise EvalScaleFitError(f"shogi: eval_scale='fit': the evaluations of {what} do not predict their game results "
                         f"(the fit runs to its bound, {_HIGH:g}); give eval_scale a number (dlshogi's is 756)")
    return round(s, 1)
