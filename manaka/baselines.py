"""Two accuracies a trained policy must beat, measured on held-out positions.

    chance     a uniform pick among each position's legal moves: the mean of 1 / count
    frequency  the legal move whose label was played most often in the training data (a
               sample of at most `max_train` positions), ties to the first in the legal list

``python -m manaka.train`` prints them beside the held-out accuracy for --data: a policy
at the frequency baseline has learned which moves are common, not which fit the position.
Both read the data through mk.Loader, so records that on_bad="skip" leaves out are left out
here too.
"""
from __future__ import annotations

from typing import Dict

import numpy as np

from .loader import Loader

__all__ = ["label_baselines"]


def _played(batch) -> np.ndarray:
    legal, target = np.asarray(batch.legal), np.asarray(batch.target)
    return legal[np.arange(len(target)), target]


def label_baselines(train, held_out, batch_size: int = 4096, max_train: int = 1_000_000) -> Dict[str, float]:
    """{"chance", "frequency", "positions", "train_positions"} for a training and a held-out
    dataset of the same vocabulary (Datasets or shogi records)."""
    counts = np.zeros(train.num_moves, np.int64)
    seen = 0
    # a sample beyond max_train: the first positions of a shuffled epoch
    with Loader(train, batch_size=batch_size, producers=2, shuffle=len(train) > max_train, seed=0) as loader:
        for batch in loader:
            played = _played(batch)[: max_train - seen]
            counts += np.bincount(played, minlength=train.num_moves)
            seen += len(played)
            if seen >= max_train:
                break
    chance = correct = 0.0
    n = 0
    with Loader(held_out, batch_size=batch_size, producers=2, shuffle=False) as loader:
        for batch in loader:
            legal, target = np.asarray(batch.legal), np.asarray(batch.target)
            chance += float(np.sum(1.0 / np.asarray(batch.counts, np.float64)))
            often = np.where(legal >= 0, counts[np.maximum(legal, 0)], -1)
            correct += int(np.sum(np.argmax(often, axis=1) == target))
            n += len(target)
    if n == 0:
        raise ValueError("baselines: the held-out data yielded no position")
    return {"chance": chance / n, "frequency": correct / n, "positions": n, "train_positions": seen}
