"""An Elo difference and its confidence interval from a match's wins, draws and losses.

The score s = (W + D/2) / N is the mean of per-game scores x in {1, 1/2, 0}; the Elo
difference is the logistic model's -400 log10(1/s - 1). The interval is a Wilson-type score
interval with the trinomial variance: the per-game variance of a match of expected score p
and draw ratio d is Var x = p (1 - p) - d / 4 (E x^2 = P(win) + d / 4 and P(win) = p - d / 2),
and the interval is every p with (s - p)^2 <= z^2 Var x / N, d held at D / (N + z^2): the
observed draw ratio shrunk by z^2 pseudo-games that are not draws (as Wilson's interval
adds z^2 pseudo-games), so that a match of only draws, whose observed variance is 0, still
gets an interval of nonzero width. Unlike the plain normal approximation s +- z sd / sqrt(N), this interval stays
meaningful at s = 0 or 1 (with no draws it is Wilson's interval for a binomial
proportion), where the observed variance is 0. The score bounds map to Elo bounds through
the same logistic formula (+-inf at scores 0 and 1).
"""
from __future__ import annotations

import math
from typing import Tuple

__all__ = ["elo_from_score", "score_interval", "elo_interval"]

Z95 = 1.959963984540054


def elo_from_score(score: float) -> float:
    if not 0.0 <= score <= 1.0:
        raise ValueError(f"elo: a score must be in [0, 1], got {score}")
    if score == 0.0:
        return -math.inf
    if score == 1.0:
        return math.inf
    return 0.0 - 400.0 * math.log10(1.0 / score - 1.0)  # 0.0 -: no -0.0 at score 1/2


def score_interval(wins: int, draws: int, losses: int, z: float = Z95) -> Tuple[float, float]:
    """(low, high) expected score: the roots of (1 + k) p^2 - (2 s + k) p + s^2 + k d / 4,
    k = z^2 / N, d = D / (N + z^2) (the interval of this module's docstring)."""
    for name, v in (("wins", wins), ("draws", draws), ("losses", losses)):
        if int(v) != v or v < 0:
            raise ValueError(f"elo: {name} must be a count >= 0, got {v!r}")
    n = wins + draws + losses
    if n == 0:
        return 0.0, 1.0
    s, d, k = (wins + draws / 2) / n, draws / (n + z * z), z * z / n
    a, b, c = 1 + k, 2 * s + k, s * s + k * d / 4
    root = math.sqrt(max(0.0, b * b - 4 * a * c))
    low, high = max(0.0, (b - root) / (2 * a)), min(1.0, (b + root) / (2 * a))
    # at s = 0 or 1 one root is exactly 0 or 1 (rounding would make it 1 - 1e-16, Elo 6000)
    return (0.0 if s == 0.0 else low), (1.0 if s == 1.0 else high)


def elo_interval(wins: int, draws: int, losses: int, z: float = Z95) -> Tuple[float, float, float]:
    """(Elo, low, high) of the first player over the second."""
    n = wins + draws + losses
    low, high = score_interval(wins, draws, losses, z)
    score = (wins + draws / 2) / n if n else 0.5
    return elo_from_score(score), elo_from_score(low), elo_from_score(high)
