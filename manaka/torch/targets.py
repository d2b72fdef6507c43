"""The loss of docs/design.md §1 on torch tensors: masked cross-entropy over each position's
legal moves (hard or soft targets), binary cross-entropy of the value head, accuracy.

Written with ordinary torch ops on the [B, L] logits (small next to the gathers the fused
ops avoid), so autograd, torch.compile and any change a user makes to the loss just work."""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["Losses", "legal_mask", "policy_loss", "value_loss", "accuracy", "losses"]


class Losses(NamedTuple):
    """One batch's loss and its parts (0-dim tensors; only ``loss`` needs a backward)."""

    loss: Tensor         #: policy_loss + value_weight * value_loss
    policy_loss: Tensor  #: mean cross-entropy over the legal moves
    value_loss: Tensor   #: mean binary cross-entropy of the value logit
    accuracy: Tensor     #: fraction of positions whose first argmax is the target (no grad)


def legal_mask(logits: Tensor, counts: Tensor) -> Tensor:
    """[B, L] bool: slot l of position b is a legal move (l < counts[b])."""
    return torch.arange(logits.shape[1], device=logits.device)[None, :] < counts[:, None]


def policy_loss(logits: Tensor, mask: Tensor, target: Tensor,
                policy_target: Optional[Tensor] = None) -> Tensor:
    """Mean over positions of -log softmax(logits over the legal slots)[target] (hard), or of
    -sum_l policy_target[b, l] log softmax(...)[l] over legal slots (soft; padded slots of
    policy_target are ignored)."""
    logp = F.log_softmax(logits.masked_fill(~mask, float("-inf")), dim=1)
    if policy_target is None:
        return -logp.gather(1, target.long()[:, None]).mean()
    return -(policy_target.masked_fill(~mask, 0.0) * logp.masked_fill(~mask, 0.0)).sum(1).mean()


def value_loss(z: Tensor, value: Tensor) -> Tensor:
    """Mean binary cross-entropy of sigmoid(z) against the game result in [0, 1]."""
    return F.binary_cross_entropy_with_logits(z, value.to(z.dtype))


@torch.no_grad()
def accuracy(logits: Tensor, mask: Tensor, target: Tensor) -> Tensor:
    """Fraction of positions whose first best legal move is the target."""
    best = logits.masked_fill(~mask, float("-inf")).argmax(dim=1)
    return (best == target.long()).to(logits.dtype).mean()


def losses(logits: Tensor, z: Tensor, counts: Tensor, target: Tensor, value: Tensor,
           policy_target: Optional[Tensor] = None, value_weight: float = 1.0) -> Losses:
    """:class:`Losses` from the policy logits [B, L] and the value logit z [B]."""
    mask = legal_mask(logits, counts)
    p = policy_loss(logits, mask, target, policy_target)
    v = value_loss(z, value)
    return Losses(p + value_weight * v, p, v, accuracy(logits, mask, target))
