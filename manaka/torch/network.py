"""manaka's policy/value network (docs/design.md §1) as a ``torch.nn.Module`` over the fused
operators, with the same parameter names as :class:`manaka.Model`, so parameters move both
ways (:meth:`Network.from_model`, :meth:`Network.to_model`) and a researcher can start from a
manaka model, change the module, train it with any torch optimizer, and go back."""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy as np
import torch
from torch import Tensor, nn

from .. import _core
from ..batch import Batch
from ..model import Model, ModelConfig, real_arg
from ..move_pair_board import relative_parts
from . import ops, targets
from .sparse_pairs import pair_sums_sparse_grad

__all__ = ["Network", "batch_tensors", "check_batch", "move_hidden_sums", "move_kind_split", "param_groups"]

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
    ``value`` (Linear to 1), and with ``config.move_pairs`` = C > 0 ``move_pair_table``
    [V, C] (initialised to 0), whose row of each side-to-move token, read at the class
    ``m % C`` of each legal move m, is added to that move's logit (:meth:`move_pair_sums`);
    with ``config.board_kinds`` = K > 0 also ``move_pair_relative`` [K (2W - 1) (2H - 1), C / (W H)]
    (initialised to 0), whose entry of (a side-to-move board token's kind, its square
    relative to the move's, the move's kind) is added too (:meth:`move_pair_relative_sums`).
    Its index splits into a part per token id and a part per class
    (:func:`manaka.move_pair_board.relative_parts`), held in the non-persistent buffers
    ``relative_token_part`` [V] and ``relative_class_part`` [C] (not in ``state_dict``).
    With ``config.move_hidden`` = D > 0 (MoveHidden, a hidden layer of D units per legal
    move over the same keys, :meth:`move_hidden`): ``move_hidden_relative``
    [K (2W - 1) (2H - 1) C / (W H), D] (row r the relative index r), ``move_hidden_class``
    [C, D] and ``move_hidden_out`` [1, D]. With ``config.move_shared`` (the shared move
    embeddings, :meth:`move_shared`): ``move_shared_class`` [C, W] and ``move_shared_group``
    [M / C, W] (both initialised to 0). With ``config.move_hidden_gate`` (MoveHidden's
    readout gated by the position, :meth:`move_hidden_readout`): ``move_hidden_gate``
    [W, D] (initialised to 0), the last parameter, as in ``mk.Model``. With
    ``config.move_kinds`` = F > 0 (a label l is move ``l % R`` of the move table and kind
    ``l // R``, R = M / F: :func:`move_kind_split`), ``move_table`` has R rows, and
    ``move_kind_table`` [C F, W] (initialised to 0) comes last, after the gate; its row
    ``l % C + C (l // R)`` is read by the policy vector (:meth:`move_kind`). With
    ``config.value_hidden`` = Hv > 0 (the value head's hidden layer, :meth:`value_logit`):
    ``value_hidden`` (Linear to Hv; ``value_hidden.weight`` [Hv, H_n], He-initialised,
    ``value_hidden.bias`` [Hv] 0 and not decayed), the last two tensors, and ``value``
    reads its ReLU (``value.weight`` [1, Hv]).

    Args:
        config: the shapes (:class:`manaka.ModelConfig`).
        seed: parameters are initialised as ``mk.Model(config, seed=seed)``'s.
        sparse_pair_grad: the pair table's gradient is a coalesced ``torch.sparse_coo_tensor``
            of the rows the batch touches (sorted, bitwise the dense gradient's rows), as
            ``nn.Embedding(sparse=True)``'s: train it with ``torch.optim.SparseAdam`` and the
            other parameters with AdamW (docs/torch.md, "A sparse pair-table gradient").

    Overriding :meth:`features`, :meth:`body` or :meth:`heads` in a subclass is the
    intended way to change the architecture (see examples/torch_interop.ipynb).
    """

    def __init__(self, config: ModelConfig, seed: int = 0, sparse_pair_grad: bool = False):
        super().__init__()
        if not isinstance(sparse_pair_grad, bool):
            raise TypeError(f"Network: sparse_pair_grad must be a bool, got {type(sparse_pair_grad).__name__}")
        self.sparse_pair_grad = sparse_pair_grad
        if not isinstance(config, ModelConfig):
            raise TypeError(f"Network: config must be a manaka.ModelConfig, got {type(config).__name__}")
        self.config = config
        c = config
        # first: mk.Model runs every rule of the config and its sizes (a ValueError naming the
        # field, a MemoryError) before a tensor is made here from fields no rule has checked
        initial = Model(config, seed=seed).state_dict()
        self.embedding = nn.Parameter(torch.empty(c.num_tokens, c.embed_dim))
        self.pair_table = nn.Parameter(torch.empty(c.num_pairs, c.pair_dim))
        widths = (c.num_features,) + c.hidden
        self.trunk = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.policy = nn.Linear(widths[-1], c.head_width)
        self.move_table = nn.Parameter(torch.empty(c.num_moves // max(c.move_kinds, 1), c.head_width))
        self.value = nn.Linear(c.value_hidden or widths[-1], 1)
        if c.move_pairs:
            self.move_pair_table = nn.Parameter(torch.zeros(c.num_tokens, c.move_pairs))
        if c.board_kinds:
            S = c.board_width * c.board_height
            self.move_pair_relative = nn.Parameter(torch.zeros(
                c.board_kinds * (2 * c.board_width - 1) * (2 * c.board_height - 1), c.move_pairs // S))
            token_part, class_part = relative_parts(c)
            # constants of the config: left out of state_dict (mk.Model has no such tensor)
            self.register_buffer("relative_token_part", torch.from_numpy(token_part), persistent=False)
            self.register_buffer("relative_class_part", torch.from_numpy(class_part), persistent=False)
        if c.move_hidden:
            rows = c.board_kinds * (2 * c.board_width - 1) * (2 * c.board_height - 1) * (c.move_pairs // S)
            self.move_hidden_relative = nn.Parameter(torch.empty(rows, c.move_hidden))
            self.move_hidden_class = nn.Parameter(torch.empty(c.move_pairs, c.move_hidden))
            self.move_hidden_out = nn.Parameter(torch.empty(1, c.move_hidden))
        if c.move_shared:
            self.move_shared_class = nn.Parameter(torch.zeros(c.move_pairs, c.head_width))
            self.move_shared_group = nn.Parameter(torch.zeros(c.num_moves // c.move_pairs, c.head_width))
        if c.move_hidden_gate:  # registered last: mk.Model's tensor order
            self.move_hidden_gate = nn.Parameter(torch.zeros(c.head_width, c.move_hidden))
        if c.move_kinds:  # after the gate: mk.Model's tensor order
            self.move_kind_table = nn.Parameter(torch.zeros(max(c.move_pairs, 1) * c.move_kinds, c.head_width))
        if c.value_hidden:  # the last submodule: its two tensors end state_dict, as mk.Model's
            self.value_hidden = nn.Linear(SIDES * c.orders * c.embed_dim if c.value_power_sums else widths[-1],
                                          c.value_hidden)
        self._load_model_state(initial)

    # ------------------------------------------------------------ compute
    def features(self, tokens: Tensor) -> Tensor:
        """x_0 [B, 2 (K D + P)]: per perspective, the power sums of its token embeddings
        (orders 1..K) then the sum of its pair-table rows."""
        B = tokens.shape[0]
        c = self.config
        powers = ops.power_sums(self.embedding, tokens, c.orders)  # [B, 2, K, D]
        pair_sums = pair_sums_sparse_grad if self.sparse_pair_grad else ops.pair_sums
        pairs = pair_sums(self.pair_table, tokens)                  # [B, 2, P]
        return torch.cat([powers.reshape(B, SIDES, c.orders * c.embed_dim), pairs], 2).reshape(B, -1)

    def body(self, x: Tensor) -> Tensor:
        """The trunk: ReLU(Linear) per hidden width."""
        for layer in self.trunk:
            x = torch.relu(layer(x))
        return x

    def heads(self, x: Tensor, legal: Tensor, counts: Tensor, value_x: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        """(policy logits [B, L] by GatherDot over the legal moves' move table rows, value
        logit z [B], :meth:`value_logit` of `value_x`, default x: :meth:`value_input`'s). The
        rows are the labels, or with ``config.move_kinds`` their moves ``legal % R``
        (:func:`move_kind_split`); the kind's term is :meth:`move_kind`'s."""
        c = self.config
        rows = legal
        if c.move_kinds:
            rows = move_kind_split(legal, counts, c.num_moves // c.move_kinds, max(c.move_pairs, 1))[0]
            # a label outside [0, M) goes to GatherDot as it is, out of the table's range, so
            # that its check names the label itself (the label's l % R is a row in range)
            rows = torch.where((legal < 0) | (legal >= c.num_moves), legal.to(torch.int64), rows)
        logits = ops.gather_dot(self.policy(x), self.move_table, rows, counts)
        return logits, self.value_logit(x if value_x is None else value_x)

    def value_input(self, features: Tensor, x: Tensor) -> Tensor:
        """What the value head reads, given x_0 (:meth:`features`) and the trunk's output x:
        x, or with ``config.value_power_sums`` the power sums of both perspectives
        [B, 2 K D] (x_0 without its pair sums)."""
        c = self.config
        if not c.value_power_sums:
            return x
        KD = c.orders * c.embed_dim
        return features.reshape(features.shape[0], SIDES, KD + c.pair_dim)[:, :, :KD].reshape(-1, SIDES * KD)

    def value_logit(self, x: Tensor) -> Tensor:
        """The value head's logit z [B] (before the sigmoid) from its input x
        (:meth:`value_input`: the trunk's output [B, H_n], or the power sums): ``value(x)``,
        or with ``config.value_hidden`` = Hv > 0 ``value(relu(value_hidden(x)))`` (a hidden
        layer of Hv units)."""
        if self.config.value_hidden:
            x = torch.relu(self.value_hidden(x))
        return self.value(x)[:, 0]

    def move_kind(self, q: Tensor, legal: Tensor, counts: Tensor) -> Tensor:
        """The move kinds' term [B, L] (``mk.ModelConfig``'s move_kinds = F) from the policy
        head's vector q [B, W] (``self.policy(x)``): for l < counts[b], with x = legal[b, l],
        R = M / F, C = move_pairs,

            term[b, l] = q[b] . move_kind_table[x % C + C (x // R)]

        (the row of the move's class and its kind), by GatherDot as mk.Model computes it;
        0 at padded slots."""
        c = self.config
        _, kind_rows = move_kind_split(legal, counts, c.num_moves // c.move_kinds, max(c.move_pairs, 1))
        return ops.gather_dot(q, self.move_kind_table, kind_rows, counts)

    def move_pair_sums(self, tokens: Tensor, legal: Tensor, counts: Tensor) -> Tensor:
        """MovePairSums [B, L] (docs/design.md §1): for l < counts[b], the sum over the side to
        move's present tokens v (``tokens[b, 0, t] >= 0``) of ``move_pair_table[v, legal[b, l] % C]``;
        0 at padded slots. Computed as the per-position sums of the tokens' rows [B, C], then
        one gather per legal move: the same sum as mk.Model's, added in another order."""
        table = self.move_pair_table
        C = table.shape[1]
        side = tokens[:, 0].to(torch.int64)                                   # [B, T]: the side to move
        present = side >= 0
        rows = table[side.clamp(min=0)] * present.unsqueeze(-1).to(table.dtype)  # [B, T, C], 0 at empty slots
        per_class = rows.sum(1)                                               # [B, C]
        used = torch.arange(legal.shape[1], device=legal.device) < counts.to(torch.int64).unsqueeze(1)
        # padded slots may hold anything (-1): they read class 0 and are zeroed next
        classes = torch.where(used, legal.to(torch.int64), 0) % C
        return torch.where(used, per_class.gather(1, classes), 0)

    def move_pair_relative_sums(self, tokens: Tensor, legal: Tensor, counts: Tensor) -> Tensor:
        """The relative part's term [B, L] (``mk.ModelConfig``'s board_width, board_height,
        board_kinds): for l < counts[b], the sum over the side to move's board tokens v
        (``0 <= tokens[b, 0, t] < K W H``; hand tokens and empty slots add nothing) of
        ``move_pair_relative.flat[ridx(v, legal[b, l] % C)]``; 0 at padded slots. The index
        is ``relative_token_part[v] + relative_class_part[c]``, gathered as [B, T, L]."""
        flat = self.move_pair_relative.reshape(-1)
        index, on_board, used, _ = relative_keys(self.relative_token_part, self.relative_class_part, tokens,
                                                 legal, counts)
        sums = (flat[index] * on_board.unsqueeze(2).to(flat.dtype)).sum(1)    # [B, L]
        return torch.where(used, sums, 0)

    def move_hidden(self, tokens: Tensor, legal: Tensor, counts: Tensor, q: Optional[Tensor] = None) -> Tensor:
        """MoveHidden's term [B, L] (``mk.ModelConfig``'s move_hidden = D): for l < counts[b],
        with c = legal[b, l] % C,

            pre[b, l, :] = move_hidden_class[c, :] + sum over the side to move's board tokens v
                           (0 <= tokens[b, 0, t] < K W H) of move_hidden_relative[ridx(v, c), :]
            term[b, l]   = sum_d o[b, d] relu(pre[b, l, d])

        (ridx as :meth:`move_pair_relative_sums`'), o the readout
        :meth:`move_hidden_readout` (``move_hidden_out[0]`` for every position, or with
        ``config.move_hidden_gate`` ``move_hidden_out[0] + q[b] move_hidden_gate``, which
        needs q [B, W], the policy head's vector ``self.policy(x)``; q is not read
        without the gate); 0 at padded slots. See :func:`move_hidden_sums` for its memory."""
        return move_hidden_sums(self.move_hidden_relative, self.move_hidden_class, self.move_hidden_readout(q),
                                self.relative_token_part, self.relative_class_part, tokens, legal, counts)

    def move_hidden_readout(self, q: Optional[Tensor] = None) -> Tensor:
        """MoveHidden's readout: ``move_hidden_out`` [1, D], one for every position; with
        ``config.move_hidden_gate`` = 1 a row per position [B, D],
        ``move_hidden_out + q move_hidden_gate`` from the policy head's vector q [B, W]
        (as mk.Model: a GEMM, then move_hidden_out added to each row)."""
        if not self.config.move_hidden_gate:
            return self.move_hidden_out
        if q is None:
            raise ValueError("Network.move_hidden: q (the policy head's vector [B, W]) is needed with "
                             "config.move_hidden_gate = 1")
        return self.move_hidden_out + q @ self.move_hidden_gate

    def move_shared(self, q: Tensor, legal: Tensor, counts: Tensor) -> Tensor:
        """The shared move embeddings' term [B, L] (``mk.ModelConfig``'s move_shared = 1) from
        the policy head's vector q [B, W] (``self.policy(x)``): for l < counts[b], with
        m = legal[b, l], C = move_pairs,

            term[b, l] = q[b] . move_shared_class[m % C] + q[b] . move_shared_group[m // C]

        computed as mk.Model does: cls = q move_shared_class^T [B, C] and grp =
        q move_shared_group^T [B, M / C], then a gather of each move's class and group
        entry; 0 at padded slots."""
        C = self.move_shared_class.shape[0]
        used = torch.arange(legal.shape[1], device=legal.device) < counts.to(torch.int64).unsqueeze(1)
        # padded slots may hold anything (-1): they read move 0 and are zeroed at the end
        move = torch.where(used, legal.to(torch.int64), 0)
        cls = (q @ self.move_shared_class.T).gather(1, move % C)    # [B, L]
        grp = (q @ self.move_shared_group.T).gather(1, move // C)   # [B, L]
        return torch.where(used, cls + grp, 0)

    def logits(self, tokens: Tensor, legal: Tensor, counts: Tensor) -> Tuple[Tensor, Tensor]:
        """(policy logits [B, L], value logit z [B]) before any sigmoid; with
        ``config.move_kinds`` the logits are :meth:`heads`' plus :meth:`move_kind`, with
        ``config.move_pairs`` then plus :meth:`move_pair_sums`,
        with ``config.board_kinds`` then plus :meth:`move_pair_relative_sums`, with
        ``config.move_hidden`` then plus :meth:`move_hidden` (given the policy vector with
        ``config.move_hidden_gate``), with ``config.move_shared`` then plus
        :meth:`move_shared` of the policy vector. The policy vector ``self.policy(x)`` is
        computed again here, outside :meth:`heads`, once for the three that read it."""
        c = self.config
        f = self.features(tokens)
        x = self.body(f)
        logits, z = self.heads(x, legal, counts, self.value_input(f, x) if c.value_power_sums else None)
        q = self.policy(x) if c.move_shared or c.move_hidden_gate or c.move_kinds else None
        if c.move_kinds:  # mk.Model adds it first, to GatherDot's logits
            logits = logits + self.move_kind(q, legal, counts)
        if c.move_pairs:
            logits = logits + self.move_pair_sums(tokens, legal, counts)
        if c.board_kinds:
            logits = logits + self.move_pair_relative_sums(tokens, legal, counts)
        if c.move_hidden:
            # q only with the gate: a subclass's move_hidden(tokens, legal, counts) keeps working
            hidden = self.move_hidden(tokens, legal, counts, q) if c.move_hidden_gate else \
                self.move_hidden(tokens, legal, counts)
            logits = logits + hidden
        if c.move_shared:
            logits = logits + self.move_shared(q, legal, counts)
        return logits, z

    def forward(self, tokens: Tensor, legal: Tensor, counts: Tensor) -> Tuple[Tensor, Tensor]:
        """(logits [B, L], value [B] = sigmoid of the value head), as ``mk.Model.forward``."""
        logits, z = self.logits(tokens, legal, counts)
        return logits, torch.sigmoid(z)

    def losses(self, tokens: Tensor, legal: Tensor, counts: Tensor, target: Tensor, value: Tensor,
               policy_target: Optional[Tensor] = None, value_weight: float = 1.0,
               check: bool = True) -> targets.Losses:
        """(loss, policy_loss, value_loss, accuracy) as ``mk.Model.loss_and_grad``'s stats,
        as 0-dim tensors; ``loss`` carries the graph for ``backward()``.

        The batch is first checked as ``mk.Model.loss_and_grad`` checks it (:func:`check_batch`:
        the same rules and messages, naming ``Network.loss``): a value outside [0, 1], a
        target beyond its position's legal moves, a count of 0, bad soft targets are a
        ValueError instead of a wrong or infinite loss. The check is a custom op, so it also
        runs inside ``torch.compile(fullgraph=True)``. It reads the whole batch (CUDA
        tensors: one synchronising copy to the host); ``check=False`` skips it for a batch
        known good, such as a :class:`manaka.Loader`'s, which its producer checked.

        ``value_weight`` follows the trainer's rule: a finite real number >= 0 (TypeError /
        ValueError otherwise: NaN made the loss NaN, a negative weight trained the value head
        away from its targets), checked in eager mode (not while ``torch.compile`` traces,
        where it may be symbolic); a tensor is taken as it is."""
        if not isinstance(value_weight, Tensor) and not torch.compiler.is_compiling():
            from ..evaluate.metrics import check_value_weight

            value_weight = check_value_weight("Network.loss", value_weight)
        if check:
            value = _checked(self.config, tokens, legal, counts, target, value, policy_target, "Network.loss")
        logits, z = self.logits(tokens, legal, counts)
        return targets.losses(logits, z, counts, target, value, policy_target, value_weight)

    def loss(self, tokens: Tensor, legal: Tensor, counts: Tensor, target: Tensor, value: Tensor,
             policy_target: Optional[Tensor] = None, value_weight: float = 1.0, check: bool = True) -> Tensor:
        """The scalar training loss, policy_loss + value_weight * value_loss (see :meth:`losses`)."""
        return self.losses(tokens, legal, counts, target, value, policy_target, value_weight, check).loss

    # ------------------------------------------------------------ manaka models
    @classmethod
    def from_model(cls, model: Model, device=None, **kwargs) -> "Network":
        """A Network with `model`'s config and a copy of its parameters (on `device`,
        default the CPU; `kwargs` go to the constructor, e.g. ``sparse_pair_grad=True``).
        Works for models on any manaka device."""
        if not isinstance(model, Model):
            raise TypeError(f"Network.from_model: model must be a manaka.Model, got {type(model).__name__}")
        net = cls(model.config, seed=model.seed, **kwargs)  # a subclass keeps its own added modules
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
        # as float32, mk.Model's dtype: NumPy has no bfloat16 (a half-precision network's
        # .numpy() raised), and a float64 one is rounded as load_state_dict rounds it
        model.load_state_dict({n: state[n].detach().to("cpu", torch.float32).numpy() for n in model.shapes})
        return model

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """torch's ``load_state_dict``, all or nothing: torch copies every tensor it can
        before it raises about a missing or unexpected key or a wrong shape, which left the
        network half loaded; here a failure first restores every tensor as it was."""
        before = {name: t.detach().clone() for name, t in self.state_dict().items()}
        try:
            return super().load_state_dict(state_dict, strict=strict, assign=assign)
        except BaseException:
            super().load_state_dict(before, strict=True, assign=assign)
            raise

    def _load_model_state(self, state: Dict[str, np.ndarray]) -> None:
        """Copies a ``mk.Model.state_dict()`` into the parameters it names."""
        with torch.no_grad():
            own = dict(self.named_parameters())
            for name, arr in state.items():
                own[name].copy_(torch.from_numpy(np.asarray(arr, np.float32)))


def relative_keys(token_part: Tensor, class_part: Tensor, tokens: Tensor, legal: Tensor,
                  counts: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """The relative part's keys, read by its sums and by MoveHidden: (index [B, T, L] int64,
    ridx(v, c) = token_part[v] + class_part[c] of each side-to-move slot and legal move;
    on_board [B, T], the slots holding a board token; used [B, L], the slots below counts;
    classes [B, L], each move's class). A slot without a board token takes token 0's part,
    in range for every class, and must be weighted 0 by on_board; padded move slots may
    hold anything (-1): they read class 0 and must be zeroed by used."""
    side = tokens[:, 0].to(torch.int64)                                   # [B, T]: the side to move
    part = token_part[side.clamp(min=0)]
    on_board = (side >= 0) & (part >= 0)
    part = torch.where(on_board, part, token_part[0])
    used = torch.arange(legal.shape[1], device=legal.device) < counts.to(torch.int64).unsqueeze(1)
    classes = torch.where(used, legal.to(torch.int64), 0) % class_part.shape[0]  # [B, L]
    index = part.unsqueeze(2) + class_part[classes].unsqueeze(1)          # [B, T, L]
    return index, on_board, used, classes


def move_hidden_sums(relative: Tensor, class_rows: Tensor, out: Tensor, token_part: Tensor, class_part: Tensor,
                     tokens: Tensor, legal: Tensor, counts: Tensor) -> Tensor:
    """MoveHidden's term [B, L] (:meth:`Network.move_hidden`) from its parameters
    (relative [R, D], class_rows [C, D], and the readout out: [1, D], one for every
    position, or [B, D], a row per position, as the gated readout
    :meth:`Network.move_hidden_readout`) and the relative index's parts
    (token_part [V], -1 off the board, and class_part [C]:
    :func:`manaka.move_pair_board.relative_parts`); 0 at padded slots.

    Memory: the relative rows are gathered per (token slot, legal move), a [B, T, L, D]
    tensor in the parameters' dtype (at T = 40, L = 600, D = 16 in float32: 1.5 MB per
    position, 1.6 GB for a batch of 1,024), and backward makes its gradient of the same
    shape once, to scatter it into relative's; autograd keeps no tensor of that size
    between the two (the int64 index [B, T, L], the weights [B, 1, T], relu(pre)
    [B, L, D] and out are what it saves). Plain gathers, batched products and a relu:
    torch.compile traces it without a break."""
    B, L = legal.shape
    if out.dim() != 2 or out.shape[0] not in (1, B) or out.shape[1] != relative.shape[1]:
        raise ValueError(f"move_hidden_sums: out must be [1, {relative.shape[1]}] or [{B}, {relative.shape[1]}] "
                         f"(one readout, or one per position), got {list(out.shape)}")
    index, on_board, used, classes = relative_keys(token_part, class_part, tokens, legal, counts)
    rows = relative[index]                                                 # [B, T, L, D]
    B, T, L, D = rows.shape
    weight = on_board.to(relative.dtype).unsqueeze(1)                      # [B, 1, T]
    board = torch.bmm(weight, rows.reshape(B, T, L * D)).reshape(B, L, D)  # sum over the board tokens
    pre = class_rows[classes] + board                                      # [B, L, D]
    if out.shape[0] == 1:  # one readout (at B = 1 both readings are this one)
        term = torch.relu(pre) @ out[0]                                    # [B, L]
    else:                  # a readout per position
        term = torch.bmm(torch.relu(pre), out.unsqueeze(2)).squeeze(2)     # [B, L]
    return torch.where(used, term, 0)


def move_kind_split(legal: Tensor, counts: Tensor, R: int, C: int) -> Tuple[Tensor, Tensor]:
    """(moves, kind_rows), each [B, L] int64 (backend_ops.def move_kind_split): for
    l < counts[b], with x = legal[b, l], the move table's row ``x % R`` and the kind
    table's row ``x % C + C (x // R)``; 0 at padded slots (which may hold anything). R is
    the move table's rows (M / F), C = move_pairs (a divisor of R)."""
    used = torch.arange(legal.shape[1], device=legal.device) < counts.to(torch.int64).unsqueeze(1)
    x = torch.where(used, legal.to(torch.int64), 0)  # a used label is in [0, M): % and // are C's
    return x % R, x % C + C * (x // R)


_BATCH_FIELDS = ("tokens", "legal", "counts", "target", "value", "policy_target")


def check_batch(config: ModelConfig, tokens: Tensor, legal: Tensor, counts: Tensor, target: Tensor,
                value: Tensor, policy_target: Optional[Tensor] = None, op: str = "Network.loss") -> None:
    """Refuses what ``mk.Model.loss_and_grad`` refuses, with its exception and words
    (naming `op`): it runs the model's own conversion and checks (``manaka._core.check_batch``,
    csrc/core/batch.c) on the tensors' values: shapes that disagree, tokens_per_side other
    than the config's, a token or legal move out of range, a count outside [1, L], a target
    outside [0, counts[b]), a value not finite or outside [0, 1], soft targets that are
    negative or do not sum to 1. Float fields are read as float32 (as the loss reads them).
    CPU tensors are read in place; CUDA tensors are copied to the host first (one
    synchronising read of the batch per call)."""
    if not isinstance(config, ModelConfig):  # None failed on config.num_tokens, naming nothing
        raise TypeError(f"check_batch: config must be a manaka.ModelConfig, got {type(config).__name__}")
    _checked(config, tokens, legal, counts, target, value, policy_target, op)


def _checked(config: ModelConfig, tokens, legal, counts, target, value, policy_target, op: str) -> Tensor:
    """:func:`check_batch`, returning `value` as float32 for the loss to read."""
    for name, t in zip(_BATCH_FIELDS, (tokens, legal, counts, target, value, policy_target)):
        if t is not None and not isinstance(t, Tensor):
            raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    c = config
    return _checked_value(*(None if t is None else t.detach() for t in (tokens, legal, counts, target, value,
                                                                      policy_target)),
                          c.num_tokens, c.num_moves, c.tokens_per_side, op)


@torch.library.custom_op("manaka::checked_value", mutates_args=())
def _checked_value(tokens: Tensor, legal: Tensor, counts: Tensor, target: Tensor, value: Tensor,
                   policy_target: Optional[Tensor], num_tokens: int, num_moves: int, tokens_per_side: int,
                   op: str) -> Tensor:
    """`value` as float32, once the batch passed :func:`check_batch`'s checks. A custom op
    whose result the loss reads, so that ``torch.compile`` keeps the check in its graph
    and runs it on every call (an op without an output would be dropped as dead code)."""
    arrays = []
    for t in (tokens, legal, counts, target, value, policy_target):
        if t is not None and t.is_floating_point():
            t = t.to(torch.float32)
        arrays.append(None if t is None else t.cpu().numpy())
    _core.check_batch(op, num_tokens, num_moves, tokens_per_side, _core.Batch(*arrays))
    return value.to(torch.float32, copy=True)


@_checked_value.register_fake
def _(tokens, legal, counts, target, value, policy_target, num_tokens, num_moves, tokens_per_side, op):
    return torch.empty_like(value, dtype=torch.float32)


def batch_tensors(batch: Batch, device=None) -> Dict[str, Optional[Tensor]]:
    """The fields of a :class:`manaka.Batch` as torch tensors (on `device`, default the CPU;
    CPU tensors share the batch's memory, except a read-only array's, such as a
    :class:`manaka.Loader` batch's, which is copied), keyed as :meth:`Network.loss`'s
    arguments: ``net.loss(**batch_tensors(batch))``."""
    if not all(hasattr(batch, name) for name in _BATCH_FIELDS):  # None was an AttributeError
        raise TypeError(f"batch_tensors: batch must be a manaka.Batch, got {type(batch).__name__}")
    out = {}
    for name in _BATCH_FIELDS:
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
    ``torch.optim.AdamW(param_groups(net, 0.01), lr=1e-3)`` is ``mk.Trainer(model)``'s AdamW.
    `weight_decay` follows mk.Trainer's rule, finite and >= 0 (torch checks only its
    optimizer's default, not a group's: NaN made the first step's parameters NaN)."""
    import math

    weight_decay = real_arg("param_groups", "weight_decay", weight_decay)
    if not (math.isfinite(weight_decay) and weight_decay >= 0):
        raise ValueError(f"param_groups: weight_decay must be finite and >= 0, got {weight_decay:g}")
    if not isinstance(module, nn.Module):
        raise TypeError(f"param_groups: module must be a torch.nn.Module, got {type(module).__name__}")
    decay, no_decay = [], []
    for name, p in module.named_parameters():
        (no_decay if name.endswith("bias") else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
