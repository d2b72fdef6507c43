"""The chance and frequency baselines printed beside a model's figures, with the figures
of :mod:`manaka.evaluate.metrics`:

* chance: a legal move drawn uniformly: policy loss log n (n legal moves), top-k
  accuracy min(k, n) / n (expectations, not one draw); value: the constant 0.5, whose
  BCE is ln 2 = 0.693 whatever the target, and a side drawn at random on the decisive
  positions (value accuracy 0.5).
* frequency: the legal moves ranked by how often each move was the target in the
  frequency data (:func:`label_frequencies`: the evaluated data itself, or another set
  such as the training data), ties to the earlier legal slot (as the model's top-1);
  policy loss under probabilities proportional to count + 1 over the legal moves
  (add-one smoothing: a move never seen keeps a finite loss); value: the constant mean
  value target of the frequency data (the constant with the least BCE there), right on
  a decisive position when it is on the target's side of 0.5.

Counted on the evaluated data itself, the frequency baseline has seen the answers: it is
an optimistic bound for a model that learns move frequencies, not a held-out figure.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

import numpy as np

from .data import batches, describe
from .metrics import TOP_K, Totals, check_value_weight, legal_mask, log_softmax, policy_rows, target_rank, value_rows

__all__ = ["Frequencies", "label_frequencies", "baselines"]


@dataclass(frozen=True)
class Frequencies:
    """How often each move id was the target (``moves``, int64 [num_moves]), and the mean
    value target, over ``positions`` positions of ``source`` (the data's files or folder)."""

    moves: np.ndarray
    value_mean: float
    positions: int
    source: str


def label_frequencies(data, batch_size: int = 1024, max_positions: Optional[int] = None) -> Frequencies:
    """The move and value frequencies of `data` (a Dataset, shogi records or a Loader), in
    one pass over its first `max_positions` positions (None: all of them; a shuffled Loader
    makes them a sample). A ValueError naming the data when it has no position."""
    moves = np.zeros(0, np.int64)
    value_sum, n = 0.0, 0
    with batches(data, batch_size) as loader:
        for batch in loader:
            take = len(batch) if max_positions is None else min(len(batch), max_positions - n)
            played = batch.legal[np.arange(take), batch.target[:take]]
            found = np.bincount(played, minlength=len(moves))
            found[:len(moves)] += moves
            moves = found
            value_sum += float(np.sum(batch.value[:take], dtype=np.float64))
            n += take
            if n == max_positions:
                break
    loader.check_not_empty(n)
    return Frequencies(moves, value_sum / n, n, describe(data))


def baselines(data, frequencies: Optional[Frequencies] = None, batch_size: int = 1024,
              value_weight: float = 1.0) -> Dict[str, Dict[str, float]]:
    """{"chance": figures, "frequency": figures} over every position of `data`, with the
    keys of :func:`manaka.evaluate` (see the module docstring for what each baseline
    predicts). `frequencies` default: :func:`label_frequencies` of `data` itself."""
    value_weight = check_value_weight("baselines", value_weight)
    if frequencies is None:
        frequencies = label_frequencies(data, batch_size)
    chance, frequency = Totals(), Totals()
    with batches(data, batch_size) as loader:
        for batch in loader:
            B, L = batch.legal.shape
            n = batch.counts.astype(np.float64)
            value_loss, decisive, _ = value_rows(np.full(B, 0.5), batch.value)
            chance.add(np.log(n), 1.0 / n, np.minimum(n, TOP_K) / n, value_loss, decisive, 0.5 * decisive)

            ids = np.where(legal_mask(batch.counts, L), batch.legal, 0)
            table = frequencies.moves
            if ids.max(initial=0) >= len(table):  # a move the frequency data never had
                table = np.concatenate([table, np.zeros(ids.max() + 1 - len(table), np.int64)])
            seen = table[ids].astype(np.float64)
            rank = target_rank(seen, batch.counts, batch.target)
            policy = policy_rows(log_softmax(np.log1p(seen), batch.counts), batch.counts, batch.target,
                                 batch.policy_target)
            value_loss, decisive, correct = value_rows(np.full(B, frequencies.value_mean), batch.value)
            frequency.add(policy, rank == 0, rank < TOP_K, value_loss, decisive, correct)
    loader.check_not_empty(chance.positions)
    return {"chance": chance.means(value_weight), "frequency": frequency.means(value_weight)}
