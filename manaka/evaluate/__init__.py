"""mk.evaluate: loss and accuracies of a model on a dataset, without changing it, and the
chance and frequency baselines beside them (``python -m manaka.evaluate``).

The figures are defined in :mod:`manaka.evaluate.metrics`, the baselines in
:mod:`manaka.evaluate.baseline_figures`.
"""
from __future__ import annotations

from typing import Dict, Union

from ..dataset import Dataset
from ..loader import Loader
from ..model import Model
from .baseline_figures import Frequencies, baselines, label_frequencies
from .data import batches, check_fits
from .metrics import TOP_K, Totals, check_value_weight, log_softmax, policy_rows, target_rank, value_rows

__all__ = ["evaluate", "baselines", "label_frequencies", "Frequencies", "TOP_K"]


def evaluate(model, data: Union[Dataset, Loader], batch_size: int = 1024,
             value_weight: float = 1.0) -> Dict[str, float]:
    """Figures of `model` over every position of `data` (a Dataset or shogi records, read
    in order, or a Loader: one epoch from its position):

    ``loss`` (policy_loss + value_weight value_loss), ``policy_loss``, ``value_loss``,
    ``accuracy`` (top-1), ``top5_accuracy``: means over the positions; ``value_accuracy``:
    over the decisive positions (value target not 0.5), NaN when there are none;
    ``positions`` and ``decisive``: how many of each. Definitions:
    :mod:`manaka.evaluate.metrics`. They are reduced here, in float64, from
    ``model.forward``'s logits and values.

    Raises ValueError, naming the data, when it does not fit the model (its vocabularies
    or T) or when no position is left to evaluate (every record bad and skipped with
    ``on_bad="skip"``): a mean over nothing is not a loss of 0.
    """
    value_weight = check_value_weight("evaluate", value_weight)
    if not isinstance(model, Model):  # a path, a Network: no forward(batch) to call
        raise TypeError(f"evaluate: model must be a manaka.Model (mk.Model.load(path) reads a file), "
                        f"got {type(model).__name__}")
    check_fits(model, data)
    totals = Totals()
    with batches(data, batch_size) as loader:
        for batch in loader:
            logits, value = model.forward(batch)
            rank = target_rank(logits, batch.counts, batch.target)
            policy = policy_rows(log_softmax(logits, batch.counts), batch.counts, batch.target, batch.policy_target)
            value_loss, decisive, correct = value_rows(value, batch.value)
            totals.add(policy, rank == 0, rank < TOP_K, value_loss, decisive, correct)
    loader.check_not_empty(totals.positions)
    return totals.means(value_weight)
