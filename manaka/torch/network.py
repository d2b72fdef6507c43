"""manaka's policy/value network (docs/design.md §1) as a ``torch.nn.Module`` over the fused
operators, with the same parameter names as :class:`manaka.Model`, so parameters move both
ways (:meth:`Network.from_model`, :meth:`Network.to_model`) and a researcher can start from a
manaka model, change the module, train it with any torch optimizer, and go back."""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy as np
import torch
from torch import Tensor, nn

from ..batch import Batch
from ..model import Model, ModelConfig
from . import ops, targets

__all__ = ["Network", "batch_tensors", "param_groups"]

SIDES = 2  # perspectives per position: tokens are [B, 2, T]


class Network(nn.Module):
    """The network of :class:`manaka.Model`, computed with :mod:`manaka.torch.ops`.

    ``net(tokens, legal, counts)`` returns ``(logits [B, L], value [B])`` exactly as
    ``mk.Model.forward`` does (logits 0 at padded slots, value the sigmoid of the value
    head); :meth:`loss` returns the training loss of ``mk.Model.loss_and_grad`` as a scalar
    tensor, and :meth:`losses` that loss with its parts and the accuracy beside it.

    Submodules and parameters (``state_dict`` keys equal ``mk.Model``'s parameter names):
    ``embedding`` [V, D], ``pair_table`` [V (V + 1) / 2, P], ``trunk`` (a ModuleList of
    ``nn.Linear``; ReLU after each), ``policy`` (Linear to W), ``move_table`` [M, W],
    ``value`` (Linear to 1).

    Args:
        config: the shapes (:class:`manaka.ModelConfig`).
        seed: parameters are initialised as ``mk.Model(config, seed=seed)``'s.

    Overriding :meth:`features`, :meth:`body` or :meth:`heads` in a subclass is the
    intended way to change the architecture (see examples/torch_interop.ipynb).
    """

    def __init__(self, config: ModelConfig, seed: int = 0):
        super().__init__()
        if not isinstance(config, ModelConfig):
            raise TypeError(f"Network: config must be a manaka.ModelConfig, got {type(config).__name__}")
        self.config = config
        c = config
        self.embedding = nn.Parameter(torch.empty(c.num_tokens, c.embed_dim))
        self.pair_table = nn.Parameter(torch.empty(c.num_pairs, c.pair_dim))
        widths = (c.num_features,) + c.hidden
        self.trunk = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.policy = nn.Linear(widths[-1], c.head_width)
        self.move_table = nn.Parameter(torch.empty(c.num_moves, c.head_width))
        self.value = nn.Linear(widths[-1], 1)
        self._load_model_state(Model(config, seed=seed).state_dict())

    # ------------------------------------------------------------ compute
    def features(self, tokens: Tensor) -> Tensor:
        """x_0 [B, 2 (K D + P)]: per perspective, the power sums of its token embeddings
        (orders 1..K) then the sum of its pair-table rows."""
        B = tokens.shape[0]
        c = self.config
        powers = ops.power_sums(self.embedding, tokens, c.orders)  # [B, 2, K, D]
        pairs = ops.pair_sums(self.pair_table, tokens)              # [B, 2, P]
        return torch.cat([powers.reshape(B, SIDES, c.orders * c.embed_dim), pairs], 2).reshape(B, -1)

    def body(self, x: Tensor) -> Tensor:
        """The trunk: ReLU(Linear) per hidden width."""
        for layer in self.trunk:
            x = torch.relu(layer(x))
        return x

    def heads(self, x: Tensor, legal: Tensor, counts: Tensor) -> Tuple[Tensor, Tensor]:
        """(policy logits [B, L] by GatherDot over the legal moves, value logit z [B])."""
        logits = ops.gather_dot(self.policy(x), self.move_table, legal, counts)
        return logits, self.value(x)[:, 0]

    def logits(self, tokens: Tensor, legal: Tensor, counts: Tensor) -> Tuple[Tensor, Tensor]:
        """(policy logits [B, L], value logit z [B]) before any sigmoid."""
        return self.heads(self.body(self.features(tokens)), legal, counts)

    def forward(self, tokens: Tensor, legal: Tensor, counts: Tensor) -> Tuple[Tensor, Tensor]:
        """(logits [B, L], value [B] = sigmoid of the value head), as ``mk.Model.forward``."""
        logits, z = self.logits(tokens, legal, counts)
        return logits, torch.sigmoid(z)

    def losses(self, tokens: Tensor, legal: Tensor, counts: Tensor, target: Tensor, value: Tensor,
               policy_target: Optional[Tensor] = None, value_weight: float = 1.0) -> targets.Losses:
        """(loss, policy_loss, value_loss, accuracy) as ``mk.Model.loss_and_grad``'s stats,
        as 0-dim tensors; ``loss`` carries the graph for ``backward()``."""
        logits, z = self.logits(tokens, legal, counts)
        return targets.losses(logits, z, counts, target, value, policy_target, value_weight)

    def loss(self, tokens: Tensor, legal: Tensor, counts: Tensor, target: Tensor, value: Tensor,
             policy_target: Optional[Tensor] = None, value_weight: float = 1.0) -> Tensor:
        """The scalar training loss, policy_loss + value_weight * value_loss (see :meth:`losses`)."""
        return self.losses(tokens, legal, counts, target, value, policy_target, value_weight).loss

    # ------------------------------------------------------------ manaka models
    @classmethod
    def from_model(cls, model: Model, device=None) -> "Network":
        """A Network with `model`'s config and a copy of its parameters (on `device`,
        default the CPU). Works for models on any manaka device."""
        if not isinstance(model, Model):
            raise TypeError(f"Network.from_model: model must be a manaka.Model, got {type(model).__name__}")
        net = cls(model.config, seed=model.seed)  # a subclass keeps its own added modules
        net._load_model_state(model.state_dict())
        return net if device is None else net.to(device)

    def to_model(self, device: str = "cpu", strict: bool = True, **model_kwargs) -> Model:
        """A new :class:`manaka.Model` (on `device`; `model_kwargs` go to its constructor)
        holding a copy of this network's manaka parameters.

        A subclass that added parameters (a residual block, a second head) has no place for
        them in ``mk.Model``: ``strict=True`` raises a KeyError naming them, ``strict=False``
        leaves them out."""
        model = Model(self.config, device=device, **model_kwargs)
        state = self.state_dict()
        extra = [n for n in state if n not in model.shapes]
        if extra and strict:
            raise KeyError(f"Network.to_model: {extra} are not parameters of manaka.Model "
                           "(pass strict=False to leave them out)")
        model.load_state_dict({n: state[n].detach().cpu().numpy() for n in model.shapes})
        return model

    def _load_model_state(self, state: Dict[str, np.ndarray]) -> None:
        """Copies a ``mk.Model.state_dict()`` into the parameters it names."""
        with torch.no_grad():
            own = dict(self.named_parameters())
            for name, arr in state.items():
                own[name].copy_(torch.from_numpy(np.asarray(arr, np.float32)))


def batch_tensors(batch: Batch, device=None) -> Dict[str, Optional[Tensor]]:
    """The fields of a :class:`manaka.Batch` as torch tensors (on `device`, default the CPU;
    CPU tensors share the batch's memory, except a read-only array's, such as a
    :class:`manaka.Loader` batch's, which is copied), keyed as :meth:`Network.loss`'s
    arguments: ``net.loss(**batch_tensors(batch))``."""
    out = {}
    for name in ("tokens", "legal", "counts", "target", "value", "policy_target"):
        arr = getattr(batch, name)
        if arr is None:
            out[name] = None
        elif isinstance(arr, np.ndarray) and not arr.flags.writeable:
            # torch has no read-only tensor: sharing would hand out a writable alias of the
            # loader's slot, which the model reads without checking it again (docs/design.md,
            # "The loader's batch"), and torch warns about it
            out[name] = torch.tensor(arr, device=device)
        else:
            out[name] = torch.as_tensor(arr, device=device)
    return out


def param_groups(module: nn.Module, weight_decay: float = 0.01) -> list:
    """Parameter groups for a torch optimizer with mk.Trainer's rule: weight decay on every
    parameter except those whose name ends in ``bias``:
    ``torch.optim.AdamW(param_groups(net, 0.01), lr=1e-3)`` is ``mk.Trainer(model)``'s AdamW."""
    decay, no_decay = [], []
    for name, p in module.named_parameters():
        (no_decay if name.endswith("bias") else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
