"""The policy/value network (docs/design.md §1): configuration, parameters, forward pass, loss
and gradients, file I/O. The arithmetic is in C (csrc/core/model.c); this is the Python face."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np

from . import _core, model_file
from .batch import Batch
from .errors import ModelFileError

__all__ = ["ModelConfig", "Model", "expected_shapes"]


@dataclass(frozen=True)
class ModelConfig:
    """Shapes of a network (docs/design.md §1).

    Args:
        num_tokens: V, the token vocabulary (the pair table has V (V + 1) / 2 rows).
        num_moves: M, the move vocabulary (rows of ``move_table``).
        tokens_per_side: T, token slots per perspective (``-1`` marks an empty one).
        embed_dim: D, the embedding width.
        orders: K, the power orders 1..K summed over tokens.
        pair_dim: P, the pair-table width.
        hidden: widths of the ReLU trunk layers (may be empty).
        head_width: W, the policy head width (and ``move_table``'s).
        move_pairs: C, the move classes of ``move_pair_table`` [V, C]: each legal move m of a
            position gets ``sum over the side to move's tokens v of move_pair_table[v, m % C]``
            added to its logit (MovePairSums, docs/design.md §1); 0 (the default): no table.
        board_width, board_height, board_kinds: W, H, K of the move-pair table's relative
            part, for a game on a W x H board whose tokens v < K W H are (kind v // (W H),
            square v % (W H)) and whose move classes are (kind, square) likewise (C a
            multiple of W H), a square s being (s // H, s % H). ``move_pair_relative``
            [K (2W - 1) (2H - 1), C / (W H)] then adds to a move's logit, for each board
            token of the side to move, the entry of (the token's kind, its square minus
            the move's, the move's kind): shared over the board where the table is per
            square. All 0 (the default): no relative part. Shogi: (9, 9, 28) with C = 2187.
        move_hidden: D, the units of MoveHidden (docs/design.md §1), a hidden layer per legal
            move over the relative part's keys (it needs the board fields): each legal move
            m of class c = m % C gets ``u = move_hidden_class[c] + sum over the side to
            move's board tokens v of move_hidden_relative[ridx(v, c)]`` (D wide, ridx the
            relative part's entry) and ``move_hidden_out[0] . ReLU(u)`` added to its logit,
            a nonlinear function of what stands where around the move. 0 (the default):
            no such layer.
        move_shared: 1 for the shared move embeddings (docs/design.md §1): a legal move m of
            class c = m % C and group g = m // C (C = move_pairs, num_moves a multiple of it)
            also gets ``q . move_shared_class[c] + q . move_shared_group[g]`` added to its
            logit, q being the policy head's vector: rows shared by every move of a class and
            of a group, which a label seen rarely learns from. Both start at 0. 0 (the
            default): none.
        move_hidden_gate: 1 to read MoveHidden's units with a vector of the position
            (docs/design.md §1; it needs move_hidden): ``(move_hidden_out[0] + q
            move_hidden_gate) . ReLU(u)`` instead of ``move_hidden_out[0] . ReLU(u)``, q the
            policy head's vector and move_hidden_gate [head_width, D], so that the position
            chooses which of a move's local features matter. It starts at 0. 0 (the
            default): none.
        move_kinds: F >= 1 when a label names a move and a kind of it (shogi: the piece
            that moves, the encoding "capture-defended-check-escape-mover"): label l is move
            ``m = l % R`` of the move table (R = num_moves // F rows) and kind ``k = l // R``,
            and its logit also gets ``q . move_kind_table[l % C + C k]``, a row per (move
            class, kind) (C = move_pairs, which must divide R; without move pairs C = 1, a
            row per kind). MovePairSums, the relative
            part and MoveHidden read the class l % C as before; the shared rows' groups are
            l // C (so they see the kind). It starts at 0. 0 (the default): labels are moves.
        value_hidden: Hv >= 1 for a hidden layer in the value head: ``z = value.weight .
            relu(value_hidden.weight x + value_hidden.bias) + value.bias`` (value.weight [1,
            Hv]; x the trunk's output), as dlshogi's and AlphaZero's value heads have. 0 (the
            default): z is linear in x.
        value_power_sums: 1 (with value_hidden >= 1) for a value head that reads the power
            sums of both perspectives (x_0 without its pair sums, [B, 2 K D]; value_hidden.weight
            [Hv, 2 K D]) instead of the trunk's output: the value never sees the pair table,
            which on small data sets memorises the positions' evaluations (docs/shogi.md, "The
            default recipe"). The policy still reads the trunk. 0 (the default): x is the
            trunk's output.
    """

    num_tokens: int
    num_moves: int
    tokens_per_side: int = 40
    embed_dim: int = 256
    orders: int = 4
    pair_dim: int = 16
    hidden: Tuple[int, ...] = field(default=(512, 512))
    head_width: int = 300
    move_pairs: int = 0
    board_width: int = 0
    board_height: int = 0
    board_kinds: int = 0
    move_hidden: int = 0
    move_shared: int = 0
    move_hidden_gate: int = 0
    move_kinds: int = 0
    value_hidden: int = 0
    value_power_sums: int = 0

    def __post_init__(self):
        # The core converts and checks (_core.check_model_config: every field an int, or a
        # NumPy integer, and >= 1, a TypeError / ValueError naming it); the sizes this
        # build supports are checked when a Model is made. Both rules are C's
        # (csrc/core/model.c: mk_config_check_dim, mk_config_check).
        names = [f.name for f in fields(self)]
        for name, value in zip(names, _core.check_model_config(*(getattr(self, n) for n in names))):
            object.__setattr__(self, name, value)

    @property
    def num_pairs(self) -> int:
        """Rows of the pair table: V (V + 1) / 2."""
        return self.num_tokens * (self.num_tokens + 1) // 2

    @property
    def num_features(self) -> int:
        """Width of x_0: 2 (K D + P)."""
        return 2 * (self.orders * self.embed_dim + self.pair_dim)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["hidden"] = list(self.hidden)
        return d


def expected_shapes(config: ModelConfig) -> Dict[str, Tuple[int, ...]]:
    """{name: shape} of every parameter of a model with `config`, in order, computed
    without building it (the same list as ``Model(config).shapes``)."""
    c = config
    shapes = {"embedding": (c.num_tokens, c.embed_dim), "pair_table": (c.num_pairs, c.pair_dim)}
    width = c.num_features
    for i, h in enumerate(c.hidden):
        shapes[f"trunk.{i}.weight"] = (h, width)
        shapes[f"trunk.{i}.bias"] = (h,)
        width = h
    shapes.update({"policy.weight": (c.head_width, width), "policy.bias": (c.head_width,),
                   "move_table": (c.num_moves // max(c.move_kinds, 1), c.head_width),
                   "value.weight": (1, c.value_hidden or width),
                   "value.bias": (1,)})
    if c.move_pairs:
        shapes["move_pair_table"] = (c.num_tokens, c.move_pairs)
    squares = max(c.board_width * c.board_height, 1)  # a config without a board is refused when a Model is made
    relative = (c.board_kinds * (2 * c.board_width - 1) * (2 * c.board_height - 1), c.move_pairs // squares)
    if c.board_kinds:
        shapes["move_pair_relative"] = relative
    if c.move_hidden:
        shapes["move_hidden_relative"] = (relative[0] * relative[1], c.move_hidden)
        shapes["move_hidden_class"] = (c.move_pairs, c.move_hidden)
        shapes["move_hidden_out"] = (1, c.move_hidden)
    if c.move_shared:
        shapes["move_shared_class"] = (c.move_pairs, c.head_width)
        shapes["move_shared_group"] = (c.num_moves // max(c.move_pairs, 1), c.head_width)
    if c.move_hidden_gate:
        shapes["move_hidden_gate"] = (c.head_width, c.move_hidden)
    if c.move_kinds:
        shapes["move_kind_table"] = (max(c.move_pairs, 1) * c.move_kinds, c.head_width)
    if c.value_hidden:
        shapes["value_hidden.weight"] = (c.value_hidden, 2 * c.orders * c.embed_dim if c.value_power_sums else width)
        shapes["value_hidden.bias"] = (c.value_hidden,)
    return shapes


def first_non_finite(tensors: Mapping[str, np.ndarray]) -> Optional[str]:
    """The name of the first tensor holding NaN or infinity, or None: a file of such a model
    (Model.save, export_onnx) is refused, as Model.load refuses it."""
    return next((name for name, arr in tensors.items() if not np.isfinite(arr).all()), None)


def config_from_meta(meta: dict, path, error) -> Tuple[ModelConfig, Any]:
    """(config, seed) from a model file's or checkpoint's meta; `error` names `path` otherwise.
    The seed is as the file has it: Model checks it (csrc/python/core/model_binding.c)."""
    try:
        raw = meta["config"]
        if not isinstance(raw, dict) or not isinstance(raw.get("hidden"), list):
            raise TypeError(f"expected an object with a list 'hidden', got {raw!r:.200}")
        config = ModelConfig(**{**raw, "hidden": tuple(raw["hidden"])})
    except (KeyError, TypeError, ValueError, OverflowError) as e:
        raise error(path, f"the model config in the file is invalid: {type(e).__name__}: {e}") from None
    return config, meta.get("seed", 0)


def check_tensors(config: ModelConfig, tensors: Mapping[str, np.ndarray], path, error, prefix: str = "") -> None:
    """Refuses (`error` naming `path`) tensors whose names, shapes or dtypes differ from the
    parameters of `config`: checked before a model of that config is allocated."""
    want = expected_shapes(config)
    got = {name[len(prefix):]: arr for name, arr in tensors.items() if name.startswith(prefix)}
    missing, extra = [n for n in want if n not in got], [n for n in got if n not in want]
    if missing or extra:
        raise error(path, f"its tensors do not match its config {config}: missing {missing[:5]}, "
                          f"unexpected {extra[:5]}")
    for name, shape in want.items():
        if got[name].shape != shape or got[name].dtype != np.float32:
            raise error(path, f"tensor {prefix}{name} has shape {got[name].shape} and dtype {got[name].dtype}, "
                              f"its config {config} needs {shape} float32")


def real_arg(op: str, name: str, value) -> float:
    """`value` as a float when it is a real number (int, float, NumPy's; not a bool, a str or
    None, which float() would take or refuse without naming the argument); a TypeError
    naming `op` and `name` otherwise. The range is the core's rule, checked after."""
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{op}: {name} must be a real number, got {type(value).__name__}")
    return float(value)


def _resolve_device(device: str):
    """The C backend that runs `device`: the one place a device string is interpreted.

    "cpu" is always there. "cuda" needs the CUDA backend (manaka._cuda, built when the
    toolkit is found) and a usable GPU; it hands over its op table as a capsule."""
    if device == "cpu":
        return "cpu"
    if device == "cuda":
        from . import cuda

        reason = cuda.why_unavailable()
        if reason:
            raise RuntimeError(f"manaka.Model: device='cuda' is unavailable: {reason}; use device='cpu'")
        return cuda.backend_table()
    raise ValueError(f"manaka.Model: device must be 'cpu' or 'cuda', got {device!r}")


class Model:
    """The policy/value network of docs/design.md §1, with its parameters in C.

    Args:
        config: the shapes (:class:`ModelConfig`).
        device: ``"cpu"``, or ``"cuda"`` when the CUDA backend is built and usable.
        seed: initialisation seed (the same seed gives the same parameters on any backend).
        policy_head: how the training step (``loss_and_grad``, ``Trainer.step``) computes the
            policy loss. ``"fused"`` (default): one pass per position computes its logits,
            the masked log-softmax, the cross-entropy and both the logit gradient and the
            gradient of the policy head's output, so the logits never go to memory.
            ``"split"``: GatherDot, then the cross-entropy, then GatherDot's backward, each
            over [B, L] arrays in memory. Both give the same numbers (to float rounding);
            the choice exists for the benchmark (``python -m manaka.bench step``).
            :meth:`forward` always computes the logits with GatherDot.

    Initialisation: every tensor is uniform in [-a, a] with a = sqrt(3) std, where
    ``embedding`` has std 1/sqrt(T) and ``pair_table`` 1/sqrt(T (T - 1) / 2) (so the sums
    over tokens and pairs start with unit scale), ``trunk.i.weight`` sqrt(2 / in) (He, for
    ReLU), ``policy.weight`` and ``value.weight`` 1/sqrt(in), ``move_table`` 1/sqrt(W);
    every bias starts at 0, and so does ``move_pair_table`` (the policy starts as it would
    without it). This keeps the initial logits O(1) and training stable at the seed
    configuration.

    Parameters (``parameters()``, in this order): ``embedding`` [V, D], ``pair_table``
    [V (V + 1) / 2, P], ``trunk.{i}.weight`` [H_i, H_{i-1}], ``trunk.{i}.bias`` [H_i],
    ``policy.weight`` [W, H_n], ``policy.bias`` [W], ``move_table`` [M, W],
    ``value.weight`` [1, H_n], ``value.bias`` [1], and with ``move_pairs`` = C > 0
    ``move_pair_table`` [V, C], then with ``board_kinds`` = K > 0 ``move_pair_relative``
    [K (2W - 1) (2H - 1), C / (W H)] (0 at the start, like the table), then with
    ``move_hidden`` = D > 0 ``move_hidden_relative`` [K (2W - 1) (2H - 1) C / (W H), D] and
    ``move_hidden_class`` [C, D] (uniform, std 0.02) and ``move_hidden_out`` [1, D] (0 at
    the start: the policy starts as without the layer), then the shared rows, the gate,
    ``move_kind_table`` [C F, W] (0 at the start) with ``move_kinds`` = F > 0 (``move_table``
    then has M / F rows), and with ``value_hidden`` = Hv > 0 ``value_hidden.weight`` [Hv,
    H_n] (He) and ``value_hidden.bias`` [Hv] (``value.weight`` then [1, Hv]): the list is
    :func:`expected_shapes`. A model with a move-pair table or move kinds always trains with
    the split policy head (those terms add to the logits between GatherDot and the loss).

    A Model runs one call at a time; calls release the GIL, so other Python threads run.
    """

    POLICY_HEADS = ("fused", "split")
    _pair_owner = None  # weakref to the sparse Trainer whose table rows may lag (_sync)

    def __init__(self, config: ModelConfig, device: str = "cpu", seed: int = 0,
                 policy_head: str = "fused"):
        if not isinstance(config, ModelConfig):
            raise TypeError(f"Model: config must be a ModelConfig, got {type(config).__name__}")
        if not isinstance(policy_head, str) or policy_head not in self.POLICY_HEADS:
            raise ValueError(f"Model: policy_head must be 'fused' or 'split', got {policy_head!r}")
        self.config = config
        self.policy_head = policy_head
        self.device = device
        # the fields in ModelConfig's order, which is _core.Model's (model_binding.c)
        self._core = _core.Model(*config.to_dict().values(), backend=_resolve_device(device), seed=seed,
                                 fused_head=policy_head == "fused")
        self.seed = int(seed)  # checked by the core: an int in [0, 2**64)
        self._shapes = {name: shape for name, shape, _ in self._core.tensors()}

    # ------------------------------------------------------------ sparse pair-table updates
    def _own_pair_table(self, trainer) -> None:
        """A sparse trainer is about to step: any other one's lagging rows are caught up
        first, so each trainer's catch-up only ever covers its own steps."""
        owner = self._pair_owner() if self._pair_owner is not None else None
        if owner is trainer:
            return
        if owner is not None:
            owner.flush()
        import weakref

        self._pair_owner = weakref.ref(trainer)

    def _sync(self) -> None:
        """Catches the sparse tables' rows up (Trainer.flush) before the parameters are
        read or written, when a sparse trainer has left rows behind."""
        owner = self._pair_owner() if self._pair_owner is not None else None
        if owner is not None:
            owner.flush()

    # ------------------------------------------------------------ parameters
    @property
    def shapes(self) -> Dict[str, Tuple[int, ...]]:
        """{name: shape} of every parameter, in order."""
        return dict(self._shapes)

    def num_parameters(self) -> int:
        """Total number of parameters."""
        return sum(int(np.prod(s)) for s in self._shapes.values())

    def parameters(self) -> Dict[str, Any]:
        """{name: array}: views of the live parameters (writing to them changes the model):
        NumPy arrays on the CPU, :class:`manaka.DeviceArray` on the GPU (zero-copy into
        PyTorch or CuPy through DLPack / ``__cuda_array_interface__``)."""
        self._sync()
        if self.device != "cuda":
            return {name: self._core.view(name) for name in self._shapes}
        from .cuda import DeviceArray

        views = {}
        for name in self._shapes:
            ptr, shape = self._core.address(name)
            views[name] = DeviceArray.from_ptr(ptr, shape, "float32", owner=self)
        return views

    def state_dict(self) -> Dict[str, np.ndarray]:
        """{name: array}: copies of the parameters."""
        self._sync()
        return {name: self._core.read(name) for name in self._shapes}

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        """Sets every parameter from `state` (as from :meth:`state_dict`).

        Every name must be present with its exact shape, a float dtype and finite values;
        everything is checked before anything is written, so a bad state changes nothing."""
        if not isinstance(state, Mapping):  # None failed in `in` without naming anything
            raise TypeError(f"Model.load_state_dict: state must be a mapping {{name: array}}, "
                            f"got {type(state).__name__}")
        self._sync()
        missing = [n for n in self._shapes if n not in state]
        extra = [n for n in state if n not in self._shapes]
        if missing or extra:
            raise KeyError(f"Model.load_state_dict: missing {missing}, unexpected {extra}")
        arrays = {}
        for name, shape in self._shapes.items():
            try:  # e.g. a torch tensor that requires grad, or of a dtype NumPy has not (bfloat16)
                arr = np.asarray(state[name])
            except (TypeError, ValueError, RuntimeError) as e:
                raise TypeError(f"Model.load_state_dict: {name} cannot be read as a NumPy array "
                                f"({type(state[name]).__name__}: {e})") from None
            if arr.dtype.kind != "f":
                raise TypeError(f"Model.load_state_dict: {name} must have a float dtype, got {arr.dtype}")
            if arr.shape != tuple(shape):
                raise ValueError(f"Model.load_state_dict: {name} has shape {arr.shape}, expected {tuple(shape)}")
            arr = np.ascontiguousarray(arr, dtype=np.float32)
            if not np.isfinite(arr).all():
                raise ValueError(f"Model.load_state_dict: {name} holds a non-finite value")
            arrays[name] = arr
        # one call holding the model for every copy: a step on another thread then waits out
        # the whole load or makes it fail before anything is written
        self._core.write_all(list(arrays.items()))

    # ------------------------------------------------------------ files
    def save(self, path) -> None:
        """Writes config, seed and parameters to one file, atomically (see model_file).

        A parameter holding NaN or infinity is a ValueError naming it, and nothing is
        written: :meth:`load` refuses such a file, which would have replaced a good one."""
        self._sync()
        meta = {"config": self.config.to_dict(), "seed": self.seed}
        # on the CPU the live views are written directly (no 180 MB copy at the seed shapes)
        tensors = self.parameters() if self.device == "cpu" else self.state_dict()
        name = first_non_finite(tensors)
        if name is not None:
            raise ValueError(f"Model.save: {name} holds a non-finite value, which Model.load refuses: "
                             f"nothing was written to {path!r}")
        model_file.write(path, "model", meta, tensors.items())

    @classmethod
    def load(cls, path, device: str = "cpu", policy_head: str = "fused") -> "Model":
        """A model read from a file written by :meth:`save`.
        `device` and `policy_head` are as in :class:`Model` (how to run it, not part of the file).

        The file is checked whole before the model is built: its tensors against its header
        and its size, then its config against its tensors' names and shapes (so a crafted
        file cannot make this allocate more than the file holds). Raises
        :class:`manaka.ModelFileError` (a ValueError) naming the file and what is wrong."""
        if device not in ("cpu", "cuda"):
            raise ValueError(f"Model.load: device must be 'cpu' or 'cuda', got {device!r}")
        if policy_head not in cls.POLICY_HEADS:
            raise ValueError(f"Model: policy_head must be 'fused' or 'split', got {policy_head!r}")
        meta, tensors = model_file.read(path, "model", ModelFileError)
        config, seed = config_from_meta(meta, path, ModelFileError)
        check_tensors(config, tensors, path, ModelFileError)
        try:  # the arguments are checked above: what fails here is the file's config (e.g. T > 1024) or seed
            model = cls(config, device=device, seed=seed, policy_head=policy_head)
        except (ValueError, TypeError, OverflowError, MemoryError) as e:
            raise ModelFileError(path, f"its config {config} cannot be built: {type(e).__name__}: {e}") from None
        try:
            model.load_state_dict(tensors)
        except (KeyError, ValueError, TypeError) as e:  # non-finite values
            raise ModelFileError(path, f"the parameters cannot be loaded: {e}") from None
        return model

    # ------------------------------------------------------------ compute
    def forward(self, batch: Batch) -> Tuple[np.ndarray, np.ndarray]:
        """(logits [B, L], value [B]) for a batch; logits are 0 at padded slots and value is
        the sigmoid of the value head. Only tokens, legal and counts are read.

        On a CUDA model the batch may hold GPU arrays (see :meth:`_read`)."""
        self._sync()
        return self._read("Model.forward", batch, False, self._core.forward)

    def loss_and_grad(self, batch: Batch, value_weight: float = 1.0):
        """(stats, grads) for a batch, without changing the parameters.

        stats: {"loss", "policy_loss", "value_loss", "accuracy"} (floats);
        grads: {name: array}, d loss / d parameter, copies in parameter order."""
        self._sync()
        value_weight = real_arg("Model.loss_and_grad", "value_weight", value_weight)
        raw = self._read("Model.loss_and_grad", batch, True,
                         lambda b: self._core.loss_and_grad(b, value_weight))
        layout = _core.STATS
        stats = {k: float(raw[layout[k]]) for k in ("loss", "policy_loss", "value_loss", "accuracy")}
        grads = {name: self._core.read(name, True) for name in self._shapes}
        return stats, grads

    def _read(self, op: str, batch: Batch, targets: bool, call):
        """call(batch) where the batch lies: a batch of NumPy arrays (or a loader's) as it
        is (the core converts and checks it, csrc/python/core/batch_binding.c); one of GPU
        arrays on a CUDA model parsed by manaka._cuda.device_batch into a Batch on the
        device, read in place. GPU arrays on a CPU model, or host and GPU fields mixed, are
        a TypeError (from the core).

        The GPU arrays are parsed for each call, not once per Batch: each call orders the
        arrays' producers (their CAI stream, DLPack's stream handshake, the legacy stream)
        before this model's copy stream, and a producer may write again between two calls,
        so an ordering made for one call says nothing about the next.

        GPU arrays: ``__cuda_array_interface__`` (v2, or v3 with a stream, which is waited
        for), ``__dlpack__`` or :class:`manaka.DeviceArray`, C-contiguous, on the current
        device, index fields int32 and float fields float32 (TypeError otherwise: no hidden
        conversion on the device). They are never copied; they are checked on the device
        with the host check's rules and messages before anything runs, which costs one
        small device -> host read per call, waiting for the batch's producers and the
        check only (not for the steps still running). The model keeps the arrays alive
        until the step that reads them has finished, so the caller may drop or reuse
        them once the call returns (writes on the legacy default stream, or on the CAI
        stream given, are ordered after the step).

        Cost: the host waits for the check, which runs on the model's copy stream after
        the batch's producers. Producers on the legacy default stream (manaka's own
        DeviceArrays, CuPy's and PyTorch's default streams) are ordered after the steps
        already queued there, so the check then also waits for the previous step: the
        GPU idles while the host queues the next one (``python -m manaka.bench step
        --device cuda`` measures this row)."""
        if self.device != "cuda" or not isinstance(batch, _core.Batch) or not batch._on_gpu(op, targets):
            return call(batch)
        from .cuda import _cuda

        names = ("tokens", "legal", "counts") + (("target", "value", "policy_target") if targets else ())
        staged = _cuda.device_batch(op, self._core.copy_stream, *(getattr(batch, n) for n in names))
        try:
            return call(staged)
        finally:
            # even after an error, which may follow queued work: every producer that named
            # a CAI stream waits for the model's stream, so the caller's next write there
            # cannot overtake the step
            staged.owner.order_after(self._core.stream)

    def __repr__(self) -> str:
        c = self.config
        lines = [f"manaka.Model(device={self.device!r}, seed={self.seed}, policy_head={self.policy_head!r},",
                 f"  config=ModelConfig(num_tokens={c.num_tokens}, num_moves={c.num_moves}, "
                 f"tokens_per_side={c.tokens_per_side}, embed_dim={c.embed_dim}, orders={c.orders}, "
                 f"pair_dim={c.pair_dim}, hidden={c.hidden}, head_width={c.head_width}),",
                 "  parameters:"]
        width = max(len(n) for n in self._shapes)
        for name, shape in self._shapes.items():
            lines.append(f"    {name:<{width}}  {str(tuple(shape)):<16} {int(np.prod(shape)):>12,}")
        lines.append(f"    {'total':<{width}}  {'':<16} {self.num_parameters():>12,}")
        return "\n".join(lines) + ")"
