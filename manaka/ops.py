"""The three fused ops of manaka (docs/design.md §1), on NumPy arrays or GPU arrays.

Every function takes NumPy arrays (the C CPU backend runs) or GPU arrays exposing
``__cuda_array_interface__`` / ``__dlpack__`` (the CUDA backend runs; results come back
as :class:`manaka.DeviceArray`). Mixing the two in one call is a ``TypeError``.

Argument rules (the same for every op):

* float arrays must be ``float32``; anything else is a ``TypeError`` (a float64 array is
  not silently converted: that would hide a copy and a change of precision);
* index arrays (``indices``, ``counts``, ``tokens``) may have any integer dtype (int8 to
  int64, unsigned too): they are converted to int32, and a value that does not fit is a ``ValueError``;
* non-contiguous NumPy arrays are accepted and copied; GPU arrays must be C-contiguous
  (the error says how to make them so); inputs are never modified;
* every index is range-checked before any work; a bad one is a ``ValueError`` that gives
  its position;
* a torch tensor that requires grad is a ``TypeError`` saying to pass ``.detach()`` (these
  functions record no gradient; :mod:`manaka.torch` has the same ops for autograd), as
  torch's own ``.numpy()`` refuses one.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple, Union

import numpy as np

from . import _core

ArrayLike = Any  # a NumPy array, or a GPU array exposing __cuda_array_interface__ / __dlpack__

__all__ = [
    "gather_dot",
    "gather_dot_backward",
    "power_sums",
    "power_sums_backward",
    "pair_sums",
    "pair_sums_backward",
    "pair_index",
]

_DLPACK_CPU = 1


def _on_gpu(op: str, name: str, x: Any) -> bool:
    if isinstance(x, np.ndarray):
        return False
    if hasattr(x, "__cuda_array_interface__"):
        return True
    if hasattr(x, "__dlpack_device__"):
        try:  # torch's meta tensors have no DLPack device: its ValueError named nothing
            device = x.__dlpack_device__()[0]
        except (TypeError, ValueError, RuntimeError, BufferError, IndexError) as e:
            raise TypeError(f"{op}: {name} ({type(x).__name__}) has no DLPack device manaka can read: {e}") from None
        return device != _DLPACK_CPU
    return False


def _backend(op: str, **arrays: Any):
    """The module that runs `op` for these arguments: _core (NumPy) or the CUDA ops.

    Returns the backend and the arguments, with CPU objects that speak DLPack (a torch CPU
    tensor, say) viewed as NumPy arrays without a copy."""
    for name, x in arrays.items():
        # torch refuses to export such a tensor (a BufferError from DLPack, a RuntimeError from
        # .numpy()): say which argument and what to do, as torch's own .numpy() does
        if getattr(x, "requires_grad", False) is True:
            raise TypeError(f"{op}: {name} is a tensor that requires grad; manaka.ops computes no gradients: "
                            f"pass {name}.detach(), or use manaka.torch.{op}, which records them for autograd")
    gpu = {name: _on_gpu(op, name, x) for name, x in arrays.items() if x is not None}
    if any(gpu.values()):
        cpu_names = [name for name, on in gpu.items() if not on]
        if cpu_names:
            raise TypeError(
                f"{op}: {cpu_names[0]} is a CPU array but other arguments are on the GPU; "
                "pass every array on the same device"
            )
        from . import cuda

        return cuda._ops(op), arrays
    converted = {}
    for name, x in arrays.items():
        if x is not None and not isinstance(x, np.ndarray) and hasattr(x, "__dlpack__"):
            x = _from_dlpack(op, name, x)
        converted[name] = x
    return _core, converted


def _from_dlpack(op: str, name: str, x: Any) -> np.ndarray:
    """A NumPy view of a CPU object that speaks DLPack. What NumPy cannot view (a bfloat16 or
    meta tensor, a conjugate view, a malformed capsule) is a TypeError naming the argument:
    NumPy's own error ("Unsupported dtype in DLTensor.") named nothing."""
    try:
        return np.from_dlpack(x)
    except (TypeError, ValueError, RuntimeError, BufferError) as e:
        raise TypeError(f"{op}: {name} ({type(x).__name__}) cannot be read as a NumPy array through DLPack: "
                        f"{e} (CPU arguments must be float32 arrays or integer index arrays)") from None


def gather_dot(
    hidden: ArrayLike, table: ArrayLike, indices: ArrayLike, counts: Optional[ArrayLike] = None
) -> ArrayLike:
    """Policy logits over each position's legal moves, without forming the gather.

    ``logits[b, l] = hidden[b] . table[indices[b, l]]`` for ``l < counts[b]``, else 0.

    Args:
        hidden: float32 ``[B, W]``, one head vector per position.
        table: float32 ``[M, W]``, one row per move of the move vocabulary.
        indices: integer ``[B, L]``, the legal moves of each position, padded; slots at
            ``l >= counts[b]`` are ignored and may hold anything (e.g. -1).
        counts: integer ``[B]`` with ``0 <= counts[b] <= L``, or None for "all L".

    Returns:
        float32 ``[B, L]`` logits, zero at padded slots.
    """
    ops, a = _backend("gather_dot", hidden=hidden, table=table, indices=indices, counts=counts)
    return ops.gather_dot(a["hidden"], a["table"], a["indices"], a["counts"])


def gather_dot_backward(
    grad: ArrayLike,
    hidden: ArrayLike,
    table: ArrayLike,
    indices: ArrayLike,
    counts: Optional[ArrayLike] = None,
) -> Tuple[ArrayLike, ArrayLike]:
    """Gradients of :func:`gather_dot` for an upstream gradient ``grad`` ``[B, L]``.

    Returns ``(grad_hidden [B, W], grad_table [M, W])``; padded slots of ``grad`` are
    ignored. ``grad_table`` sums every (b, l) that uses a row, in a fixed order, so it is
    bitwise reproducible run to run even under heavy index collisions.
    """
    ops, a = _backend(
        "gather_dot_backward", grad=grad, hidden=hidden, table=table, indices=indices, counts=counts
    )
    return ops.gather_dot_backward(a["grad"], a["hidden"], a["table"], a["indices"], a["counts"])


def power_sums(emb: ArrayLike, tokens: ArrayLike, orders: int) -> ArrayLike:
    """Symmetric power sums of token embeddings, all orders in one sweep.

    ``out[b, s, k] = sum over tokens t >= 0 of emb[tokens[b, s, t]] ** (k + 1)``
    (elementwise), for ``k = 0 .. orders - 1``.

    Args:
        emb: float32 ``[V, D]`` token embeddings.
        tokens: integer ``[B, S, T]``, each in ``[0, V)``, or -1 for an empty slot.
        orders: K >= 1, the number of powers.

    Returns:
        float32 ``[B, S, K, D]``.
    """
    ops, a = _backend("power_sums", emb=emb, tokens=tokens)
    return ops.power_sums(a["emb"], a["tokens"], _as_int("power_sums", "orders", orders))


def power_sums_backward(grad: ArrayLike, emb: ArrayLike, tokens: ArrayLike) -> ArrayLike:
    """Gradient of :func:`power_sums` with respect to ``emb``.

    ``grad`` is ``[B, S, K, D]``; returns ``grad_emb [V, D]`` with
    ``grad_emb[v] = sum over occurrences of v of sum_k grad[b, s, k] * (k + 1) * emb[v] ** k``.
    """
    ops, a = _backend("power_sums_backward", grad=grad, emb=emb, tokens=tokens)
    return ops.power_sums_backward(a["grad"], a["emb"], a["tokens"])


def pair_sums(pair_table: ArrayLike, tokens: ArrayLike) -> ArrayLike:
    """Sum of pair-table rows over every unordered pair of a row's present tokens.

    ``out[b, s] = sum_{i < j, tok_i >= 0, tok_j >= 0} pair_table[pair_index(tok_i, tok_j)]``.

    Args:
        pair_table: float32 ``[V (V + 1) / 2, P]``.
        tokens: integer ``[B, S, T]``, each in ``[0, V)`` or -1 (empty).

    Returns:
        float32 ``[B, S, P]``.
    """
    ops, a = _backend("pair_sums", pair_table=pair_table, tokens=tokens)
    return ops.pair_sums(a["pair_table"], a["tokens"])


def pair_sums_backward(grad: ArrayLike, tokens: ArrayLike, num_pairs: int) -> ArrayLike:
    """Gradient of :func:`pair_sums` with respect to the pair table.

    ``grad`` is ``[B, S, P]``; ``num_pairs`` is the table's row count, ``V (V + 1) / 2``.
    Returns the dense ``[num_pairs, P]`` gradient, bitwise reproducible.
    """
    ops, a = _backend("pair_sums_backward", grad=grad, tokens=tokens)
    return ops.pair_sums_backward(a["grad"], a["tokens"], _as_int("pair_sums_backward", "num_pairs", num_pairs))


def pair_index(a: Union[int, ArrayLike], b: Union[int, ArrayLike]) -> Union[int, np.ndarray]:
    """Row of the pair table for tokens ``a`` and ``b`` (order does not matter).

    ``pair_index(a, b) = hi * (hi + 1) // 2 + lo`` with ``lo = min(a, b)``, ``hi = max(a, b)``.
    Takes ints (returns an int) or integer arrays (returns int64, broadcast).
    """
    if np.isscalar(a) and np.isscalar(b):
        lo, hi = sorted((_as_int("pair_index", "a", a), _as_int("pair_index", "b", b)))
        if lo < 0:
            raise ValueError(f"pair_index: tokens must be >= 0, got a negative token ({lo})")
        return hi * (hi + 1) // 2 + lo
    a, b = np.asarray(a), np.asarray(b)
    for name, x in (("a", a), ("b", b)):
        if not np.issubdtype(x.dtype, np.integer):
            raise TypeError(f"pair_index: {name} must be integers, got dtype {x.dtype}")
        if x.size and x.min() < 0:
            raise ValueError(f"pair_index: {name} holds a negative token ({x.min()})")
        # Tokens are int32 everywhere else; beyond that, int64 would wrap (uint64 2**64 - 1 to
        # -1, and hi * (hi + 1) overflows) and a wrong row would come back silently.
        if x.size and int(x.max()) > 2**31 - 1:
            raise ValueError(f"pair_index: {name} holds {int(x.max())}, outside the int32 range of token ids")
    a, b = a.astype(np.int64), b.astype(np.int64)
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    return hi * (hi + 1) // 2 + lo


def _as_int(op: str, name: str, value: Any) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{op}: {name} must be an int, got {type(value).__name__}")
    return int(value)
