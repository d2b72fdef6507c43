"""ONNX export of a manaka model, and ``python -m manaka.export MODEL OUT.onnx``.

The file holds the network of docs/design.md §1 written with standard ONNX operators
only (see :mod:`manaka.onnx_graph`), so onnxruntime, or any ONNX runtime, runs it where
manaka is not installed::

    python -m manaka.export model.manaka model.onnx

    import onnxruntime as ort
    session = ort.InferenceSession("model.onnx")
    logits, value = session.run(None, {"tokens": tokens, "legal": legal, "counts": counts})

Why the graph is written directly with the ``onnx`` helper API rather than traced by
``torch.onnx.export`` from a pure-torch twin of the network: the network is a short,
fixed sequence of operations, and writing it node by node states every operator, dtype
(the pair row in int64) and dynamic axis explicitly, with nothing between the formula
and the file. The tracing exporters add moving parts without adding coverage: in
torch 2.13 the default (dynamo) exporter needs the ``onnxscript`` package and
``torch.export``'s tracing, and the TorchScript exporter (``dynamo=False``) still works
but warns that it is deprecated and will be removed. Written directly, export needs
neither torch nor onnxscript: only ``onnx`` (and numpy).
"""
from __future__ import annotations

import argparse
import os
import sys

from . import onnx_graph
from .atomic_file import atomic_write
from .model import Model, first_non_finite

__all__ = ["export_onnx", "main"]

# protobuf cannot serialise a message of 2 GiB or more; the constants are nearly all of it
_PROTOBUF_LIMIT = 2**31 - 1
_GRAPH_BYTES = 1 << 20  # an upper bound of everything in the file besides the parameters


def export_onnx(model: Model, path, *, opset: int = onnx_graph.DEFAULT_OPSET, overwrite: bool = False) -> str:
    """Writes `model` (a :class:`manaka.Model`, on any device) to `path` as an ONNX file of
    standard operators; returns the path.

    The graph computes ``mk.Model.forward``: inputs ``tokens`` int32 [B, 2, T] (-1 for an
    empty slot), ``legal`` int32 [B, L] and ``counts`` int32 [B]; outputs ``logits``
    float32 [B, L] (0 at padded slots) and ``value`` float32 [B] (after the sigmoid). B
    and L are dynamic. The graph does not check its inputs as the model does (see
    :mod:`manaka.onnx_graph`). It agrees with ``Model.forward`` to float32 rounding
    (sums in another order): tests/api/test_onnx_export.py holds it to a norm-wise relative
    error below 1e-5.

    Args:
        opset: the ONNX opset of the file, from 13 (default 17).
        overwrite: replace an existing file; otherwise an existing `path` is a
            FileExistsError and nothing is written.

    The file is written atomically (manaka/atomic_file.py): a reader never sees half of
    it, and a failure leaves the old file, if any, as it was. Raises ImportError without
    the ``onnx`` package, and ValueError for a model of 2 GiB or more (one ONNX file is
    one protobuf message, which cannot hold that), or for a parameter holding NaN or
    infinity (named; nothing is written).
    """
    if not isinstance(model, Model):
        raise TypeError(f"export_onnx: model must be a manaka.Model, got {type(model).__name__} "
                        "(manaka.torch.export_onnx also takes a manaka.torch.Network)")
    onnx = onnx_graph.import_onnx()
    newest = onnx.defs.onnx_opset_version()
    if not isinstance(opset, int) or isinstance(opset, bool) or not onnx_graph.MIN_OPSET <= opset <= newest:
        raise ValueError(f"export_onnx: opset must be an int in [{onnx_graph.MIN_OPSET}, {newest}] "
                         f"(the installed onnx's newest), got {opset!r}")
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"export_onnx: {path!r} is a directory; give the .onnx file to write")
    if os.path.lexists(path) and not overwrite:
        raise FileExistsError(f"export_onnx: {path!r} exists; pass overwrite=True to replace it")
    size = 4 * model.num_parameters()
    if size + _GRAPH_BYTES > _PROTOBUF_LIMIT:
        raise ValueError(f"export_onnx: the model's parameters take {size / 2**30:.2f} GiB, more than one ONNX "
                         f"file (a protobuf message) can hold (2 GiB); config {model.config}")
    from . import __version__

    state = model.state_dict()
    name = first_non_finite(state)  # a file that computes NaN for every position is no export
    if name is not None:
        raise ValueError(f"export_onnx: {name} holds a non-finite value (a diverged model): "
                         f"nothing was written to {path!r}")
    proto = onnx_graph.build(model.config, state, opset, metadata={"manaka_version": __version__})
    data = proto.SerializeToString()
    with atomic_write(path) as f:
        f.write(data)
    return path


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m manaka.export",
                                description="Write a manaka model as an ONNX file of standard operators, which "
                                            "onnxruntime runs without manaka (inputs tokens [B, 2, T], legal [B, L], "
                                            "counts [B], int32; outputs logits [B, L] and value [B]).")
    p.add_argument("model", metavar="MODEL", help="a model file (mk.Model.save, python -m manaka.train --save)")
    p.add_argument("out", metavar="OUT.onnx", help="the ONNX file to write")
    p.add_argument("--opset", type=int, default=onnx_graph.DEFAULT_OPSET,
                   help=f"ONNX opset, at least {onnx_graph.MIN_OPSET} (default {onnx_graph.DEFAULT_OPSET})")
    p.add_argument("--overwrite", action="store_true", help="replace OUT.onnx if it exists (never MODEL itself)")
    return p


def _refused_output(args) -> str:
    """Why OUT.onnx is not written, or "": it is MODEL itself (whatever --overwrite says: the
    model would be replaced by its export, and is the one copy of it), or it exists and
    --overwrite is not given. Other failures (a folder, an unwritable path) are export_onnx's
    and atomic_write's, each with its own message."""
    if os.path.lexists(args.out) and os.path.realpath(args.out) == os.path.realpath(args.model):
        return f"{args.out} is the model file MODEL: the export would replace the model; give another OUT.onnx"
    if os.path.lexists(args.out) and not os.path.isdir(args.out) and not args.overwrite:
        return f"{args.out} exists; pass --overwrite to replace it"
    return ""


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    why = _refused_output(args)
    if why:
        print(f"python -m manaka.export: {why}", file=sys.stderr)
        return 2
    try:
        model = Model.load(args.model)
        export_onnx(model, args.out, opset=args.opset, overwrite=args.overwrite)
    except (ValueError, TypeError, OSError, ImportError, MemoryError) as e:
        print(f"python -m manaka.export: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # the atomic writer has removed its temporary: OUT is as it was
        print(f"python -m manaka.export: interrupted; nothing was written ({args.out} is as it was)", file=sys.stderr)
        return 130
    c = model.config
    print(f"wrote {args.out} ({os.path.getsize(args.out) / 2**20:,.1f} MiB, opset {args.opset}): "
          f"inputs tokens int32 [batch, 2, {c.tokens_per_side}], legal int32 [batch, legal_moves], counts int32 "
          f"[batch]; outputs logits float32 [batch, legal_moves], value float32 [batch]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
