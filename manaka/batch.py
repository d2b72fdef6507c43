"""A batch of positions: the unit the model, the trainer and the loader exchange."""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

__all__ = ["Batch"]


def _as(name: str, x: Any, dtype, ndim: int) -> np.ndarray:
    if x is None:
        raise TypeError(f"Batch: {name} is required, got None")
    if not isinstance(x, np.ndarray):
        if hasattr(x, "__cuda_array_interface__") or hasattr(x, "__dlpack_device__"):
            return x  # a GPU array: the CUDA model checks it where it lives
        raise TypeError(f"Batch: {name} must be a NumPy array, got {type(x).__name__}")
    kind = "iu" if np.issubdtype(dtype, np.integer) else "f"
    if x.dtype.kind not in kind:
        raise TypeError(f"Batch: {name} must have {'an integer' if kind == 'iu' else 'a float'} dtype, got {x.dtype}")
    if x.ndim != ndim:
        raise ValueError(f"Batch: {name} must have {ndim} dimension{'s' if ndim > 1 else ''}, got {x.ndim}")
    if kind == "iu":
        # Contiguous first: a huge zero-stride view (np.broadcast_to) then fails to allocate at
        # once instead of having its every element compared by min() / max() for minutes.
        x = np.ascontiguousarray(x)
        _fits_int32(name, x)
    return np.ascontiguousarray(x, dtype=dtype)


_INT32 = np.iinfo(np.int32)


def _fits_int32(name: str, x: np.ndarray) -> None:
    """Refuses a value that int32 cannot hold: NumPy's cast would wrap it silently (2**32 to 0,
    uint64 2**64 - 1 to the empty-slot sentinel -1), and the model's range checks would then
    accept the wrapped value. The same rule as the C entry points (csrc/python/common/binding.c)."""
    info = np.iinfo(x.dtype)
    if x.size == 0 or (info.min >= _INT32.min and info.max <= _INT32.max):
        return  # int8 .. int32, uint8, uint16: every value fits
    # Compared as Python ints: exact for every dtype (uint64 included), no wrap in the test itself.
    low, high = int(x.min()), int(x.max())
    if low >= _INT32.min and high <= _INT32.max:
        return
    flat = x.reshape(-1)
    bad = flat > _INT32.max if x.dtype.kind == "u" else (flat < _INT32.min) | (flat > _INT32.max)
    k = int(np.flatnonzero(bad)[0])
    raise ValueError(f"Batch: {name} holds {int(flat[k])} at flat position {k}, outside the int32 range "
                     f"[{_INT32.min}, {_INT32.max}]")


class Batch:
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

    NumPy arrays are converted to int32 / float32 (copied only when needed); an integer array
    holding a value outside the int32 range is a ``ValueError`` naming the field (never wrapped). GPU arrays
    (``__cuda_array_interface__``, ``__dlpack__``, :class:`manaka.DeviceArray`) are kept as
    they are, for a CUDA model to read in place: every field on the GPU, index fields int32
    and float fields float32, C-contiguous. Value ranges are checked by the model (on the
    device for GPU arrays) before any parameter changes, so a bad batch changes nothing.
    """

    __slots__ = ("tokens", "legal", "counts", "target", "value", "policy_target", "_loaded")

    def __init__(self, tokens, legal, counts, target, value, policy_target: Optional[Any] = None):
        self._loaded = None
        self.tokens = _as("tokens", tokens, np.int32, 3)
        self.legal = _as("legal", legal, np.int32, 2)
        self.counts = _as("counts", counts, np.int32, 1)
        self.target = _as("target", target, np.int32, 1)
        self.value = _as("value", value, np.float32, 1)
        self.policy_target = None if policy_target is None else _as("policy_target", policy_target, np.float32, 2)
        B = self.tokens.shape[0] if hasattr(self.tokens, "shape") else None
        for name in ("legal", "counts", "target", "value", "policy_target"):
            arr = getattr(self, name)
            # a GPU array without .shape is measured by the model that reads it
            if B is not None and arr is not None and hasattr(arr, "shape") and arr.shape[0] != B:
                raise ValueError(f"Batch: {name} has {arr.shape[0]} rows but tokens has {B}")
        if (self.policy_target is not None and hasattr(self.policy_target, "shape") and hasattr(self.legal, "shape")
                and tuple(self.policy_target.shape) != tuple(self.legal.shape)):
            raise ValueError(f"Batch: policy_target shape {self.policy_target.shape} must equal legal shape {self.legal.shape}")

    @classmethod
    def _from_loader(cls, loaded, tokens, legal, counts, target, value, policy_target) -> "Batch":
        """A loader's batch: its views, as the producer made and checked them (no conversion,
        no check here), and `loaded`, the slot's _core.LoadedBatch that the model reads
        instead of the views while they are still its own (csrc/python/core/loader_binding.c)."""
        batch = cls.__new__(cls)
        batch.tokens, batch.legal, batch.counts = tokens, legal, counts
        batch.target, batch.value, batch.policy_target = target, value, policy_target
        batch._loaded = loaded
        return batch

    def __reduce__(self):
        # pickle and copy rebuild the batch from its arrays: a copy is the caller's own batch,
        # and the loader's handle (a slot of this process, valid until the next batch) stays
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
