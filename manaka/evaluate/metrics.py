"""The per-position figures mk.evaluate and its baselines report, and their sums over
batches, in float64 (docs/design.md §1 defines the losses and the top-1 accuracy).

* policy loss: the cross-entropy of the target under the predicted distribution over
  the legal moves (hard target, or soft targets when the data has them);
* top-k accuracy: the target is among the k best-scored legal moves; ties rank the
  earlier legal slot first, so top-1 is §1's accuracy (the first largest logit);
* value loss: the BCE of the predicted probability (clipped to [1e-7, 1 - 1e-7]) against
  the value target;
* value accuracy: over the decisive positions only (value target not 0.5), the share
  where the prediction is on the target's side of 0.5 (a prediction of exactly 0.5 is
  on neither side: wrong).
"""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np

__all__ = ["TOP_K", "Totals", "target_rank", "legal_mask", "log_softmax", "policy_rows", "value_rows"]

TOP_K = 5  # the second accuracy reported beside top-1
_CLIP = 1e-7


def legal_mask(counts: np.ndarray, width: int) -> np.ndarray:
    """[B, L] bool: the slots l < counts[b]."""
    return np.arange(width)[None, :] < np.asarray(counts)[:, None]


def target_rank(scores: np.ndarray, counts: np.ndarray, target: np.ndarray,
                tie_keys: Optional[np.ndarray] = None) -> np.ndarray:
    """[B] int: how many legal slots of each row rank above its target slot, by `scores`
    (highest first). Ties rank the smaller `tie_keys` first, by default the earlier slot.
    Padded slots never count."""
    B, L = scores.shape
    rows = np.arange(B)
    keys = np.broadcast_to(np.arange(L)[None, :], (B, L)) if tie_keys is None else tie_keys
    mine, my_key = scores[rows, target][:, None], keys[rows, target][:, None]
    above = (scores > mine) | ((scores == mine) & (keys < my_key))
    return (above & legal_mask(counts, L)).sum(axis=1)


def log_softmax(scores: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """[B, L] float64: log-probabilities over each row's legal slots (-inf at padded ones)."""
    z = np.where(legal_mask(counts, scores.shape[1]), scores.astype(np.float64), -np.inf)
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def policy_rows(logp: np.ndarray, counts: np.ndarray, target: np.ndarray,
                policy_target: Optional[np.ndarray] = None) -> np.ndarray:
    """[B]: the cross-entropy of each row's target (or soft targets) under `logp`."""
    if policy_target is not None:
        return -(policy_target * np.where(legal_mask(counts, logp.shape[1]), logp, 0.0)).sum(axis=1)
    return -logp[np.arange(len(target)), target]


def value_rows(prediction: np.ndarray, target: np.ndarray):
    """(BCE [B], decisive [B] bool, correct [B] bool) of predicted probabilities."""
    v = np.clip(np.asarray(prediction, np.float64), _CLIP, 1 - _CLIP)
    t = np.asarray(target, np.float64)
    bce = -(t * np.log(v) + (1 - t) * np.log(1 - v))
    decisive = t != 0.5
    return bce, decisive, decisive & ((v - 0.5) * (t - 0.5) > 0)


class Totals:
    """Sums of the per-position figures over batches; :meth:`means` reduces them."""

    FIELDS = ("policy_loss", "value_loss", "accuracy", "top5_accuracy", "value_correct")

    def __init__(self):
        self.sums = dict.fromkeys(self.FIELDS, 0.0)
        self.positions = self.decisive = 0

    def add(self, policy, top1, top5, value_loss, decisive, value_correct) -> None:
        """Adds one batch: per-row arrays (top1 / top5 / value_correct may be expected
        values in [0, 1] rather than 0 / 1, for a random baseline)."""
        for name, rows in zip(self.FIELDS, (policy, value_loss, top1, top5, value_correct)):
            self.sums[name] += float(np.sum(rows, dtype=np.float64))
        self.positions += len(policy)
        self.decisive += int(np.sum(decisive))

    def means(self, value_weight: float) -> Dict[str, float]:
        """loss, policy_loss, value_loss, accuracy, top5_accuracy (means over the positions),
        value_accuracy (over the decisive positions; NaN when there are none), positions,
        decisive."""
        n = self.positions
        s = self.sums
        return {"loss": (s["policy_loss"] + value_weight * s["value_loss"]) / n,
                "policy_loss": s["policy_loss"] / n, "value_loss": s["value_loss"] / n,
                "accuracy": s["accuracy"] / n, "top5_accuracy": s["top5_accuracy"] / n,
                "value_accuracy": s["value_correct"] / self.decisive if self.decisive else float("nan"),
                "positions": n, "decisive": self.decisive}


def check_value_weight(op: str, value_weight) -> float:
    """`value_weight` as a float when it is a finite real number >= 0 (the trainer's rule); a
    TypeError / ValueError naming `op` otherwise (NaN made every loss NaN, a negative weight
    a loss below the policy loss)."""
    import math

    from ..model import real_arg

    v = real_arg(op, "value_weight", value_weight)
    if not (math.isfinite(v) and v >= 0):
        raise ValueError(f"{op}: value_weight must be finite and >= 0, got {v:g}")
    return v
