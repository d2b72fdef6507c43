"""A batch of positions: the unit the model, the trainer and the loader exchange."""
from __future__ import annotations

from . import _core

__all__ = ["Batch"]


class Batch(_core.Batch):
    """Positions for one step (docs/design.md §1–§2).

    Args:
        tokens: integer ``[B, 2, T]`` token ids per perspective, -1 for an empty slot.
        legal: integer ``[B, L]`` legal move ids, padded (slots ``l >= counts[b]`` ignored).
        counts: integer ``[B]``, the number of legal moves of each position (>= 1).
        target: integer ``[B]``, the index of the played move in the position's legal list.
        value: float ``[B]``, the game result from the side to move (1 win, 0.5 draw, 0 loss).
        policy_target: optional float ``[B, L]`` soft targets over legal slots (rows sum to 1).

    A batch from :class:`manaka.Loader` is read by the model where the loader's producer
    packed it, already checked by that producer (docs/design.md, "The path of one step"):
    its arrays are read-only views of the loader's buffer. Replacing a field, or using the
    batch after the loader moved on to the next one, makes it an ordinary batch again,
    converted and checked like one built here.

    NumPy arrays are converted to int32 / float32 (copied only when needed) when the batch is
    made or a field is assigned; an integer array holding a value outside the int32 range is
    a ``ValueError`` naming the field (never wrapped). The rows of the NumPy fields must agree
    (and ``policy_target`` have legal's columns): checked when the batch is made, and again
    where it is read, since fields are assigned one at a time. GPU arrays
    (``__cuda_array_interface__``, ``__dlpack__``, :class:`manaka.DeviceArray`) are kept as
    they are, for a CUDA model to read in place: every field on the GPU, index fields int32
    and float fields float32, C-contiguous. Value ranges are checked by the model (on the
    device for GPU arrays) before any parameter changes, so a bad batch changes nothing.
    """

    # The fields, their conversion and every check live in C (_core.Batch,
    # csrc/python/core/batch_binding.c); this class is the Python face.
    __slots__ = ()

    def __reduce__(self):
        # pickle and copy rebuild the batch from its arrays: a copy is the caller's own batch,
        # and the loader's slot (of this process, valid until the next batch) stays behind
        return (Batch, (self.tokens, self.legal, self.counts, self.target, self.value, self.policy_target))

    def __len__(self) -> int:
        return self.tokens.shape[0]

    @property
    def max_legal(self) -> int:
        """L, the padded width of the legal-move lists."""
        return self.legal.shape[1]

    def __repr__(self) -> str:
        soft = ", soft targets" if self.policy_target is not None else ""
        return f"Batch(size={len(self)}, tokens_per_side={self.tokens.shape[2]}, max_legal={self.max_legal}{soft})"
