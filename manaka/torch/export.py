"""ONNX export of a :class:`manaka.torch.Network` or a :class:`manaka.Model`.

The file is the one :func:`manaka.export.export_onnx` writes (standard operators only,
runnable by onnxruntime without manaka; that module says why the graph is written with
the ``onnx`` API rather than traced by ``torch.onnx.export``). A Network is exported
through an ``mk.Model`` holding its parameters (rounded to float32), so both
export the same graph; a subclass that changes the computation is refused, since the
graph is the network of docs/design.md §1.
"""
from __future__ import annotations

from typing import Union

import torch

from .. import export as _export
from ..model import Model, ModelConfig, expected_shapes
from ..onnx_graph import DEFAULT_OPSET
from .network import Network

__all__ = ["export_onnx"]

# the methods that define Network's computation: a subclass overriding one computes
# something the exported graph would not
_COMPUTATION = ("forward", "logits", "features", "body", "heads", "value_input", "value_logit", "move_kind",
                "move_pair_sums", "move_pair_relative_sums", "move_hidden", "move_hidden_readout", "move_shared")


def export_onnx(model_or_network: Union[Model, Network], path, *, opset: int = DEFAULT_OPSET,
                overwrite: bool = False) -> str:
    """Writes `model_or_network` to `path` as an ONNX file of standard operators; returns
    the path. Inputs ``tokens`` [B, 2, T], ``legal`` [B, L], ``counts`` [B] (int32),
    outputs ``logits`` [B, L] (0 at padded slots) and ``value`` [B] (after the sigmoid),
    as ``Network.forward`` and ``mk.Model.forward``; B and L are dynamic.

    A Network (on any device, in any float dtype) is exported with its parameters
    rounded to float32. A Network subclass that overrides forward, logits, features,
    body, heads, value_input, value_logit, move_kind, move_pair_sums, move_pair_relative_sums,
    move_hidden, move_hidden_readout or move_shared, or adds parameters or persistent buffers, is a
    TypeError naming them; so is a Network with one of those methods replaced on the instance,
    or with forward hooks on it or on a submodule.
    `opset` and `overwrite` and the errors are :func:`manaka.export.export_onnx`'s.
    """
    if isinstance(model_or_network, Network):
        model_or_network = _as_model(model_or_network)
    elif not isinstance(model_or_network, Model):
        raise TypeError("export_onnx: model_or_network must be a manaka.Model or a manaka.torch.Network, "
                        f"got {type(model_or_network).__name__}")
    return _export.export_onnx(model_or_network, path, opset=opset, overwrite=overwrite)


def _as_model(net: Network) -> Model:
    cls = type(net)
    if not isinstance(net.config, ModelConfig):
        raise TypeError("export_onnx: the network's config must be a manaka.ModelConfig, "
                        f"got {type(net.config).__name__}")
    overridden = [name for name in _COMPUTATION if getattr(cls, name) is not getattr(Network, name)]
    if overridden:
        raise TypeError(f"export_onnx: {cls.__name__} overrides {', '.join(overridden)}: the ONNX graph is "
                        "manaka's network (docs/design.md §1), which a changed computation is not")
    # the same changes made to the one object: a method set on the instance, or a forward
    # (pre-)hook on it or a submodule (net.trunk[0]), which can change what it computes
    replaced = [name for name in _COMPUTATION if name in vars(net)]
    if replaced:
        raise TypeError(f"export_onnx: this {cls.__name__} has {', '.join(replaced)} replaced on the instance: the "
                        "ONNX graph is manaka's network (docs/design.md §1), which a changed computation is not")
    hooked = [name or "the network" for name, m in net.named_modules() if m._forward_hooks or m._forward_pre_hooks]
    if hooked:
        raise TypeError(f"export_onnx: forward hooks on {', '.join(hooked[:5])} may change what the network "
                        "computes, and the ONNX graph would leave them out: remove them first")
    own = set(expected_shapes(net.config))
    extra = [name for name in net.state_dict() if name not in own]
    if extra:
        raise TypeError(f"export_onnx: {cls.__name__} has parameters or buffers manaka's network does not: "
                        f"{extra[:5]}")
    model = Model(net.config)
    # float32 on the CPU first: a bfloat16 or CUDA tensor has no NumPy view
    model.load_state_dict({name: t.detach().to("cpu", torch.float32).numpy() for name, t in net.state_dict().items()})
    return model
