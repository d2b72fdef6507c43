"""GatherDot, PowerSums and PairSums as PyTorch custom operators (``torch.library``).

Each op is registered with a fake (meta) implementation, so ``torch.compile(fullgraph=True)``
and shape propagation see through it, and with an autograd formula whose backward is
manaka's fused deterministic backward, itself a custom op (so the compiled backward graph
has no break either). Gradients flow to every float input; index inputs get ``None``.

Where the work runs (see docs/torch.md):

* CPU tensors go to manaka's C kernels through :mod:`manaka.ops`, as NumPy views of the
  tensors' memory (no copy for contiguous float32 inputs; index tensors of a dtype other
  than int32 are narrowed, as :mod:`manaka.ops` does). The results are NumPy arrays the
  C core allocated, handed to torch without a copy.
* CUDA tensors go to manaka's CUDA kernels (the ``manaka._cuda`` extension, read through
  DLPack without a copy), writing into outputs torch allocates (its caching allocator owns
  them). Those entry points take no stream: the kernels run on the legacy default stream.
  When the caller's current torch stream is another one, the legacy stream first waits
  for it, and afterwards the current stream waits for the legacy one, so the op is
  ordered like any op on the current stream (at the cost of those two event waits).

The arguments are checked by the same code as :mod:`manaka.ops` (the C entry points), so
a bad call raises the same exception with the same message, naming the argument.

Reduced precision: float inputs may also be bfloat16 or float16 (every float input of one
call of the same dtype). They are widened to float32, the kernels compute and accumulate
in float32, and the results (forward outputs and gradients) are narrowed back to that
dtype. Under ``torch.autocast`` (CPU and CUDA) the ops are registered to run in float32:
autocast widens their float inputs to float32 (a no-op for float32 parameters) and the
outputs are float32. manaka's kernels compute in float32 whatever the input dtype, so
narrowing the parameters first would cost a pass over them (the pair table is the largest
tensor of the network) and lose precision for no gain in speed.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from .. import ops as _mk_ops

__all__ = ["gather_dot", "power_sums", "pair_sums",
           "gather_dot_backward", "power_sums_backward", "pair_sums_backward"]


# ---------------------------------------------------------------- dispatch

def _numpy(t: Optional[Tensor]):
    """A NumPy view of a CPU tensor's memory (None stays None)."""
    return None if t is None else t.detach().numpy()


def _device(op: str, **tensors: Optional[Tensor]) -> str:
    """"cpu" or "cuda" for the call; mixing devices is the TypeError of manaka.ops."""
    present = {name: t for name, t in tensors.items() if t is not None}
    for name, t in present.items():
        if not isinstance(t, Tensor):
            raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
        # the kernels read strided memory: NumPy and DLPack refuse any other kind unnamed
        if t.layout != torch.strided or t.is_quantized:
            kind = "quantized" if t.is_quantized else str(t.layout).replace("torch.", "")
            raise TypeError(f"{op}: {name} is a {kind} tensor; pass a dense one "
                            f"({name}.to_dense() or {name}.dequantize())")
    on_gpu = {name: t.device.type == "cuda" for name, t in present.items()}
    if not any(on_gpu.values()):
        for name, t in present.items():
            if t.device.type != "cpu":
                raise TypeError(f"{op}: {name} is on {t.device}; manaka runs on CPU and CUDA tensors")
        return "cpu"
    cpu_names = [name for name, gpu in on_gpu.items() if not gpu]
    if cpu_names:
        raise TypeError(f"{op}: {cpu_names[0]} is a CPU array but other arguments are on the GPU; "
                        "pass every array on the same device")
    devices = {t.device for t in present.values()}
    if len(devices) > 1:
        raise TypeError(f"{op}: the arguments are on different GPUs ({sorted(map(str, devices))}); "
                        "pass every array on the same device")
    return "cuda"


def _on_cuda(op: str, device: torch.device, call):
    """Runs `call(cuda_ops)` (manaka's CUDA entry points, legacy default stream) on
    `device`, ordered after and before the caller's current torch stream."""
    from .. import cuda as _mk_cuda

    ops = _mk_cuda._ops(op)  # a RuntimeError saying why when manaka's CUDA backend cannot run
    with torch.cuda.device(device):
        current = torch.cuda.current_stream()
        legacy = torch.cuda.default_stream()  # torch's default stream is the legacy NULL stream
        other = current.cuda_stream != legacy.cuda_stream
        if other:
            legacy.wait_stream(current)  # inputs written (and outputs' memory freed) there
        result = call(ops)
        if other:
            current.wait_stream(legacy)  # the caller's next op reads the results
    return result


def _contiguous(t: Optional[Tensor]) -> Optional[Tensor]:
    return None if t is None else t.detach().contiguous()


_REDUCED = (torch.bfloat16, torch.float16)  # widened to float32 for the kernels, results narrowed back


def _precision(op: str, **floats: Optional[Tensor]) -> Optional[torch.dtype]:
    """The reduced float dtype of the call's float inputs (bfloat16 or float16), or None
    when none is reduced (float32, or a dtype manaka's own checks reject). One call's
    float inputs share their dtype: mixing a reduced dtype with another is a TypeError."""
    present = {n: t for n, t in floats.items() if isinstance(t, Tensor)}
    reduced = {n: t.dtype for n, t in present.items() if t.dtype in _REDUCED}
    if not reduced:
        return None
    dtypes = {t.dtype for t in present.values()}
    if len(dtypes) > 1:
        names = ", ".join(f"{n} is {t.dtype}" for n, t in present.items())
        raise TypeError(f"{op}: the float inputs must share one dtype ({names}); "
                        "cast them, or run the op under torch.autocast")
    return next(iter(reduced.values()))


def _wide(t: Optional[Tensor], dtype: Optional[torch.dtype]) -> Optional[Tensor]:
    """`t` widened to float32 when the call is in reduced precision (a copy), else `t`."""
    return t if t is None or dtype is None else t.detach().float()


def _narrow(t: Tensor, dtype: Optional[torch.dtype]) -> Tensor:
    """A float32 result rounded back to the call's reduced dtype (unchanged when None)."""
    return t if dtype is None else t.to(dtype)


# ---------------------------------------------------------------- GatherDot

@torch.library.custom_op("manaka::gather_dot", mutates_args=())
def gather_dot(hidden: Tensor, table: Tensor, legal: Tensor,
               counts: Optional[Tensor] = None) -> Tensor:
    """``logits[b, l] = hidden[b] . table[legal[b, l]]`` for ``l < counts[b]``, else 0.

    hidden float32 ``[B, W]``, table float32 ``[M, W]``, legal integer ``[B, L]`` (padded
    slots may hold anything), counts integer ``[B]`` in ``[0, L]`` or None (all L).
    Returns float32 ``[B, L]``; differentiable in hidden and table."""
    op = "gather_dot"
    device = _device(op, hidden=hidden, table=table, indices=legal, counts=counts)
    low = _precision(op, hidden=hidden, table=table)
    hidden, table = _wide(hidden, low), _wide(table, low)
    if device == "cpu":
        return _narrow(torch.from_numpy(_mk_ops.gather_dot(_numpy(hidden), _numpy(table), _numpy(legal),
                                                           _numpy(counts))), low)
    out = torch.empty(legal.shape[:2] if legal.dim() == 2 else (0, 0), dtype=torch.float32,
                      device=hidden.device)
    _on_cuda(op, hidden.device, lambda ops: ops.gather_dot(
        hidden.detach(), table.detach(), legal.detach(), None if counts is None else counts.detach(),
        out=out))
    return _narrow(out, low)


@gather_dot.register_fake
def _(hidden, table, legal, counts=None):
    return hidden.new_empty((legal.shape[0], legal.shape[1]))


@torch.library.custom_op("manaka::gather_dot_backward", mutates_args=())
def gather_dot_backward(grad: Tensor, hidden: Tensor, table: Tensor, legal: Tensor,
                        counts: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """(grad_hidden [B, W], grad_table [M, W]) of :func:`gather_dot` for ``grad`` [B, L];
    grad_table is summed in a fixed order (bitwise reproducible)."""
    op = "gather_dot_backward"
    device = _device(op, grad=grad, hidden=hidden, table=table, indices=legal, counts=counts)
    low = _precision(op, grad=grad, hidden=hidden, table=table)
    grad, hidden, table = _wide(grad, low), _wide(hidden, low), _wide(table, low)
    if device == "cpu":
        gh, gt = _mk_ops.gather_dot_backward(_numpy(grad), _numpy(hidden), _numpy(table),
                                             _numpy(legal), _numpy(counts))
        return _narrow(torch.from_numpy(gh), low), _narrow(torch.from_numpy(gt), low)
    gh = torch.empty(hidden.shape, dtype=torch.float32, device=hidden.device)
    gt = torch.empty(table.shape, dtype=torch.float32, device=hidden.device)
    _on_cuda(op, hidden.device, lambda ops: ops.gather_dot_backward(
        _contiguous(grad), hidden.detach(), table.detach(), legal.detach(),
        None if counts is None else counts.detach(), out=(gh, gt)))
    return _narrow(gh, low), _narrow(gt, low)


@gather_dot_backward.register_fake
def _(grad, hidden, table, legal, counts=None):
    return torch.empty_like(hidden), torch.empty_like(table)


def _gather_dot_setup(ctx, inputs, output):
    hidden, table, legal, counts = inputs
    ctx.save_for_backward(hidden, table, legal, counts)


def _gather_dot_grad(ctx, grad):
    hidden, table, legal, counts = ctx.saved_tensors
    gh, gt = gather_dot_backward(grad.contiguous(), hidden, table, legal, counts)
    return gh, gt, None, None


gather_dot.register_autograd(_gather_dot_grad, setup_context=_gather_dot_setup)


# ---------------------------------------------------------------- PowerSums

def power_sums(emb: Tensor, tokens: Tensor, orders: int) -> Tensor:
    """``out[b, s, k] = sum over tokens t >= 0 of emb[tokens[b, s, t]] ** (k + 1)``.

    emb float32 ``[V, D]``, tokens integer ``[B, S, T]`` in ``[-1, V)`` (-1: empty slot),
    orders K >= 1 (an int: a bool is a TypeError, as in :mod:`manaka.ops`). Returns float32
    ``[B, S, K, D]``; differentiable in emb."""
    # checked before the operator: its schema reads an int argument with int(), so True would
    # arrive as 1
    return _power_sums(emb, tokens, _mk_ops._as_int("power_sums", "orders", orders))


@torch.library.custom_op("manaka::power_sums", mutates_args=())
def _power_sums(emb: Tensor, tokens: Tensor, orders: int) -> Tensor:
    """The operator behind :func:`power_sums`."""
    op = "power_sums"
    device = _device(op, emb=emb, tokens=tokens)
    low = _precision(op, emb=emb)
    emb = _wide(emb, low)
    if device == "cpu":
        return _narrow(torch.from_numpy(_mk_ops.power_sums(_numpy(emb), _numpy(tokens), orders)), low)
    shape = (*tokens.shape[:2], max(orders, 0), emb.shape[-1]) if tokens.dim() == 3 else (0,)
    out = torch.empty(shape, dtype=torch.float32, device=emb.device)
    _on_cuda(op, emb.device, lambda ops: ops.power_sums(emb.detach(), tokens.detach(), orders, out=out))
    return _narrow(out, low)


@_power_sums.register_fake
def _(emb, tokens, orders):
    return emb.new_empty((tokens.shape[0], tokens.shape[1], orders, emb.shape[1]))


@torch.library.custom_op("manaka::power_sums_backward", mutates_args=())
def power_sums_backward(grad: Tensor, emb: Tensor, tokens: Tensor) -> Tensor:
    """grad_emb [V, D] of :func:`power_sums` for ``grad`` [B, S, K, D]."""
    op = "power_sums_backward"
    device = _device(op, grad=grad, emb=emb, tokens=tokens)
    low = _precision(op, grad=grad, emb=emb)
    grad, emb = _wide(grad, low), _wide(emb, low)
    if device == "cpu":
        return _narrow(torch.from_numpy(_mk_ops.power_sums_backward(_numpy(grad), _numpy(emb),
                                                                    _numpy(tokens))), low)
    out = torch.empty(emb.shape, dtype=torch.float32, device=emb.device)
    _on_cuda(op, emb.device, lambda ops: ops.power_sums_backward(
        _contiguous(grad), emb.detach(), tokens.detach(), out=out))
    return _narrow(out, low)


@power_sums_backward.register_fake
def _(grad, emb, tokens):
    return torch.empty_like(emb)


def _power_sums_setup(ctx, inputs, output):
    emb, tokens, _orders = inputs
    ctx.save_for_backward(emb, tokens)


def _power_sums_grad(ctx, grad):
    emb, tokens = ctx.saved_tensors
    return power_sums_backward(grad.contiguous(), emb, tokens), None, None


_power_sums.register_autograd(_power_sums_grad, setup_context=_power_sums_setup)


# ---------------------------------------------------------------- PairSums

@torch.library.custom_op("manaka::pair_sums", mutates_args=())
def pair_sums(pair_table: Tensor, tokens: Tensor) -> Tensor:
    """``out[b, s] = sum over pairs i < j of present tokens of pair_table[pair_index(t_i, t_j)]``.

    pair_table float32 ``[V (V + 1) / 2, P]`` (row ``hi (hi + 1) / 2 + lo``), tokens
    integer ``[B, S, T]`` in ``[-1, V)``. Returns float32 ``[B, S, P]``; differentiable in
    pair_table."""
    op = "pair_sums"
    device = _device(op, pair_table=pair_table, tokens=tokens)
    low = _precision(op, pair_table=pair_table)
    pair_table = _wide(pair_table, low)
    if device == "cpu":
        return _narrow(torch.from_numpy(_mk_ops.pair_sums(_numpy(pair_table), _numpy(tokens))), low)
    shape = (*tokens.shape[:2], pair_table.shape[-1]) if tokens.dim() == 3 else (0,)
    out = torch.empty(shape, dtype=torch.float32, device=pair_table.device)
    _on_cuda(op, pair_table.device, lambda ops: ops.pair_sums(pair_table.detach(), tokens.detach(), out=out))
    return _narrow(out, low)


@pair_sums.register_fake
def _(pair_table, tokens):
    return pair_table.new_empty((tokens.shape[0], tokens.shape[1], pair_table.shape[1]))


def pair_sums_backward(grad: Tensor, tokens: Tensor, num_pairs: int) -> Tensor:
    """The dense [num_pairs, P] gradient of :func:`pair_sums` for ``grad`` [B, S, P],
    summed in a fixed order (bitwise reproducible)."""
    return _pair_sums_backward(grad, tokens, _mk_ops._as_int("pair_sums_backward", "num_pairs", num_pairs))


@torch.library.custom_op("manaka::pair_sums_backward", mutates_args=())
def _pair_sums_backward(grad: Tensor, tokens: Tensor, num_pairs: int) -> Tensor:
    """The operator behind :func:`pair_sums_backward` (which refuses a bool `num_pairs`)."""
    op = "pair_sums_backward"
    device = _device(op, grad=grad, tokens=tokens)
    low = _precision(op, grad=grad)
    grad = _wide(grad, low)
    if device == "cpu":
        return _narrow(torch.from_numpy(_mk_ops.pair_sums_backward(_numpy(grad), _numpy(tokens),
                                                                   num_pairs)), low)
    out = torch.empty((num_pairs, grad.shape[-1]), dtype=torch.float32, device=grad.device)
    _on_cuda(op, grad.device, lambda ops: ops.pair_sums_backward(
        _contiguous(grad), tokens.detach(), num_pairs, out=out))
    return _narrow(out, low)


@_pair_sums_backward.register_fake
def _(grad, tokens, num_pairs):
    return grad.new_empty((num_pairs, grad.shape[-1]))


def _pair_sums_setup(ctx, inputs, output):
    pair_table, tokens = inputs
    ctx.save_for_backward(tokens)
    ctx.num_pairs = pair_table.shape[0]


def _pair_sums_grad(ctx, grad):
    (tokens,) = ctx.saved_tensors
    # the operator itself: num_pairs is the table's size, a SymInt when torch.compile traces
    return _pair_sums_backward(grad.contiguous(), tokens, ctx.num_pairs), None


pair_sums.register_autograd(_pair_sums_grad, setup_context=_pair_sums_setup)


# ---------------------------------------------------------------- autocast

# Under torch.autocast the ops run in float32 (see the module docstring): their float inputs
# are widened to float32 and autocast is off inside them. The backward ops are registered too,
# for a backward() called inside the autocast region.
for _op in ("gather_dot", "power_sums", "pair_sums", "gather_dot_backward", "power_sums_backward",
            "pair_sums_backward"):
    for _device_type in ("cpu", "cuda"):
        torch.library.register_autocast(f"manaka::{_op}", _device_type, torch.float32)
del _op, _device_type
