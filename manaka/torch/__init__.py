"""manaka's fused ops as PyTorch operators, and the network as a ``torch.nn.Module``.

    import manaka.torch as mkt
    logits = mkt.gather_dot(hidden, table, legal, counts)   # autograd, torch.compile, CPU/CUDA
    net = mkt.Network.from_model(mk.Model.load("model.mk"))  # an nn.Module; net.to_model() back
    mkt.export_onnx(net, "model.onnx")  # standard ONNX operators: onnxruntime runs it without manaka

PyTorch is an optional dependency (``pip install torch``; the ``[torch]`` extra): ``import
manaka`` never imports it, and importing this module without it raises an ImportError
saying what to install. See docs/torch.md.
"""
try:
    import torch as _torch  # noqa: F401  (the real torch: imports are absolute)
except ImportError as error:  # pragma: no cover - exercised only where torch is missing
    raise ImportError(
        "manaka.torch needs PyTorch, which is not installed: pip install torch "
        "(without an NVIDIA GPU, the CPU build: pip install torch --index-url "
        "https://download.pytorch.org/whl/cpu); the rest of manaka works without it"
    ) from error

from .ops import gather_dot, pair_sums, power_sums  # noqa: E402
from .network import Network, batch_tensors, check_batch, param_groups  # noqa: E402
from .export import export_onnx  # noqa: E402

__all__ = ["gather_dot", "power_sums", "pair_sums", "Network", "batch_tensors", "check_batch", "param_groups",
           "export_onnx"]
