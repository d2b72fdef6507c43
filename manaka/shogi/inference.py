"""What a trained model says about one position: its legal moves with probabilities."""
from __future__ import annotations

from typing import List, Tuple

import numpy as np

from ..batch import Batch
from .position import NUM_LABELS, _checked, model_encoding, move_to_usi

__all__ = ["policy"]


def policy(model, position) -> Tuple[List[Tuple[str, float]], float]:
    """([(usi, probability), ...] best first, value) of `model` on a position (SFEN or
    shogi.Position): the softmax of the logits over the legal moves, and the value head's
    win probability for the side to move. A position without a legal move (the side to
    move is mated) gives no moves and the value head's value."""
    moves_encoding = model_encoding(model, "shogi.policy")
    pos, _ = _checked(position)
    _, moves, labels, tokens = pos.analyse(moves_encoding)
    order = np.argsort(labels % NUM_LABELS)  # the loader's order: ascending dlshogi labels
    legal = labels[order].astype(np.int32)[None]
    if legal.shape[1] == 0:
        # the model takes no empty legal list; the value head does not read the legal moves,
        # so any one label stands in and its logit is dropped
        _, value = model.forward(Batch(tokens[None].astype(np.int32), np.zeros((1, 1), np.int32),
                                       np.ones(1, np.int32), np.zeros(1, np.int32), np.full(1, 0.5, np.float32)))
        return [], float(value[0])
    batch = Batch(tokens[None].astype(np.int32), legal, np.array([legal.shape[1]], np.int32),
                  np.zeros(1, np.int32), np.full(1, 0.5, np.float32))  # targets unused by forward
    logits, value = model.forward(batch)
    z = np.asarray(logits[0, :legal.shape[1]], np.float64)
    p = np.exp(z - z.max())
    p /= p.sum()
    ranked = sorted(zip((move_to_usi(int(m)) for m in moves[order]), p.tolist()), key=lambda x: -x[1])
    return ranked, float(value[0])
