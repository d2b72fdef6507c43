"""mk.evaluate: loss and accuracy of a model on a dataset, without changing it (docs/design.md §1)."""
from __future__ import annotations

from typing import Dict, Union

import numpy as np

from .dataset import Dataset
from .loader import Loader

__all__ = ["evaluate"]


def _batch_metrics(logits: np.ndarray, value: np.ndarray, batch, value_weight: float) -> Dict[str, float]:
    """Sums (not means) of the per-position losses of docs/design.md §1, in float64."""
    counts = batch.counts
    valid = np.arange(logits.shape[1])[None, :] < counts[:, None]
    z = np.where(valid, logits.astype(np.float64), -np.inf)
    z = z - z.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    rows = np.arange(len(counts))
    if batch.policy_target is not None:
        policy = -(np.where(valid, batch.policy_target * logp, 0.0)).sum(axis=1)
    else:
        policy = -logp[rows, batch.target]
    v = np.clip(value.astype(np.float64), 1e-7, 1 - 1e-7)
    zv = batch.value.astype(np.float64)
    value_loss = -(zv * np.log(v) + (1 - zv) * np.log(1 - v))
    correct = np.argmax(z, axis=1) == batch.target
    return {"policy_loss": policy.sum(), "value_loss": value_loss.sum(), "accuracy": correct.sum(),
            "loss": (policy + value_weight * value_loss).sum()}


def evaluate(model, data: Union[Dataset, Loader], batch_size: int = 1024, value_weight: float = 1.0) -> Dict[str, float]:
    """Mean loss, policy_loss, value_loss and accuracy of `model` over every position of `data`.

    `data` is a Dataset (read in order) or a Loader (one epoch from its position). The
    losses are reduced here, in float64, from ``model.forward``'s logits and values (NumPy
    arrays on any device).
    """
    loader = data if isinstance(data, Loader) else Loader(data, batch_size=batch_size, producers=1,
                                                          prefetch=2, shuffle=False)
    totals = {"loss": 0.0, "policy_loss": 0.0, "value_loss": 0.0, "accuracy": 0.0}
    n = 0
    try:
        for batch in loader:
            logits, value = model.forward(batch)
            part = _batch_metrics(logits, value, batch, value_weight)
            for k in totals:
                totals[k] += float(part[k])
            n += len(batch)
    finally:
        if loader is not data:
            loader.close()
    return {**{k: v / max(n, 1) for k, v in totals.items()}, "positions": n}
