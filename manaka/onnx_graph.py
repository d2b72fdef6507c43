"""The network of docs/design.md §1 as an ONNX graph of standard operators only.

The fused ops are written out as the formulas of docs/design.md §1 over gathers,
masks and sums, so any ONNX runtime runs the file and manaka is not needed to read it:

* PowerSums: ``Gather`` of the embedding rows of the tokens (-1 read as row 0, then
  zeroed by the mask of present tokens, so it adds nothing), the powers by repeated
  ``Mul`` (as csrc/cpu/power_sums.c computes them: e, e·e, e·e·e, ...), ``ReduceSum``
  over the token slots.
* PairSums: the slot pairs i < j of a perspective are fixed by T, so their two index
  lists (T (T - 1) / 2 pairs: 780 at T = 40) are constants; ``Gather`` takes both tokens
  of every pair, the row ``hi (hi + 1) / 2 + lo`` is computed in int64 (as
  csrc/core/manaka.h's mk_pair_index: hi (hi + 1) passes 2**31 from hi = 46341 on),
  pairs with an empty slot are masked out, and the gathered rows are summed.
* GatherDot: the policy vector times the whole move table (``Gemm``, [B, M]), then
  ``GatherElements`` picks each position's legal moves and the slots at
  ``l >= counts[b]`` are set to 0. The same sums as gathering the L rows of the table
  first, but a dense product and a [B, M] array instead of a [B, L, W] one (at the seed
  shapes M = 2,187 against L W = 180,000 floats per position).
* Move kinds (a model with ``move_kinds`` = F > 0: a label x is move x % R of the move
  table, R = M / F, and kind x // R): GatherDot reads the table's row ``Mod(x, R)``;
  the policy vector times the whole kind table (``Gemm``, [B, C F]) then
  ``GatherElements`` at each label's row ``Mod(x, C) + C Div(x, R)`` (the move's class,
  its kind) gives the kind's term, added to the GatherDot logits first, as mk.Model
  adds it.
* MovePairSums (a model with ``move_pairs`` = C > 0): the side to move's token rows of
  ``move_pair_table`` are gathered (``Gather``, empty slots masked as above) and summed
  into [B, C] per position (``ReduceSum``); each legal move's class ``Mod(move, C)``
  picks its sum (``GatherElements``), added to the GatherDot logits before the padded
  slots are set to 0.
* The relative part (a model with ``board_kinds`` = K > 0): its index
  ``token_part[v] + class_part[c]`` (:mod:`manaka.move_pair_board`) from two constant
  int64 lists ([V] and [C]): ``Gather`` of the side to move's token parts [B, T] and of
  the legal moves' class parts [B, L], their broadcast ``Add`` [B, T, L], ``Gather`` of
  the flat ``move_pair_relative``, and a ``MatMul`` by the 0/1 weights of the slots that
  hold a board token [B, 1, T] sums over the tokens; added after MovePairSums.
* MoveHidden (a model with ``move_hidden`` = D > 0, over the relative part's index): the
  same index [B, T, L] ``Gather``s rows of ``move_hidden_relative`` [B, T, L, D], a
  ``MatMul`` by the slot weights sums them over the tokens, ``Gather`` of
  ``move_hidden_class`` at each move's class and ``Add`` give the pre-activations
  [B, L, D], then ``Relu`` and a ``MatMul`` by ``move_hidden_out`` [D, 1]; added after
  the relative part. With its gated readout (``move_hidden_gate`` = 1) the readout is a
  row per position, ``MatMul`` of the policy vector by ``move_hidden_gate`` [W, D] and
  ``Add`` of ``move_hidden_out`` [1, D], ``Unsqueeze``d to [B, D, 1] for a batched
  ``MatMul`` in place of the one by the constant column.
* The shared move embeddings (a model with ``move_shared`` = 1): the policy vector times
  the transposed tables (``MatMul`` by ``move_shared_class``^T [W, C] and by
  ``move_shared_group``^T [W, M / C]), then ``GatherElements`` of each legal move's class
  ``Mod(move, C)`` and group ``Div(move, C)``; added last, class then group, as mk.Model
  adds them.
* The value head's hidden layer (a model with ``value_hidden`` = Hv > 0): ``Gemm`` of the
  trunk's output by ``value_hidden.weight`` and ``value_hidden.bias`` [B, Hv], ``Relu``,
  then the value head's ``Gemm`` by ``value.weight`` [1, Hv]; without it the value head
  reads the trunk's output itself. With ``value_power_sums`` = 1 the hidden layer's
  ``Gemm`` reads the power sums of both perspectives (``Reshape`` [B, 2 K D]) instead.

Inputs and outputs are those of ``mk.Model.forward``: ``tokens`` int32 [B, 2, T] (-1
empty), ``legal`` int32 [B, L] (padded slots may hold anything), ``counts`` int32 [B]
-> ``logits`` float32 [B, L] (0 at padded slots), ``value`` float32 [B] (the sigmoid of
the value head). B and L are dynamic ("batch", "legal_moves"); T is the model's.

The graph does not check its inputs as ``mk.Model`` does, but an id it cannot read is
an error of onnxruntime's Gather / GatherElements: a token outside [-1, V), a move id
outside [0, M) in a used slot (with move kinds: a kind table row outside [0, C F)). A
count above L reads as L, below 0 as 0.
"""
from __future__ import annotations

import json
from typing import Dict, List, Mapping

import numpy as np

from .move_pair_board import relative_parts

__all__ = ["MIN_OPSET", "DEFAULT_OPSET", "build", "pair_slots"]

MIN_OPSET = 13     # ReduceSum, Squeeze and Unsqueeze take their axes as an input from 13 on
DEFAULT_OPSET = 17
SIDES = 2


def import_onnx():
    """The onnx package, or an ImportError saying how to install it."""
    try:
        import onnx
    except ImportError as error:
        raise ImportError("ONNX export needs the onnx package, which is not installed: pip install onnx "
                          "(running the exported file needs only onnxruntime)") from error
    return onnx


def pair_slots(T: int):
    """(i, j) int64 arrays of every slot pair i < j of a perspective of T slots, in
    row-major order: T (T - 1) / 2 pairs."""
    i, j = np.triu_indices(T, k=1)
    return i.astype(np.int64), j.astype(np.int64)


class _Graph:
    """Nodes and constants of one graph, each value named after what it holds."""

    def __init__(self, onnx):
        self.onnx, self.nodes, self.constants = onnx, [], []
        self.FLOAT, self.INT64 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64
        self._names: Dict[str, int] = {}

    def _fresh(self, hint: str) -> str:
        k = self._names.get(hint, 0)
        self._names[hint] = k + 1
        return hint if k == 0 else f"{hint}_{k}"

    def const(self, hint: str, array: np.ndarray) -> str:
        name = self._fresh(hint)
        self.constants.append(self.onnx.numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def small(self, value, dtype=np.int64) -> str:
        """A small constant, shared by every node that uses it and made on first use (so
        the file holds no unused one)."""
        name = f"const_{np.dtype(dtype).name}_{'_'.join(str(v).replace('-', 'm') for v in np.ravel(value))}"
        if name not in self._names:
            self.const(name, np.array(value, dtype))
        return name

    def op(self, op_type: str, inputs: List[str], out: str, **attributes) -> str:
        """Adds one node; its output is named `out` (made unique)."""
        out = self._fresh(out)
        self.nodes.append(self.onnx.helper.make_node(op_type, inputs, [out], name=f"{op_type}:{out}", **attributes))
        return out

    def weight(self, mask: str) -> str:
        """A bool mask [..., n] as float32 [..., n, 1], to multiply rows [..., n, X] by."""
        return self.op("Unsqueeze", [self.op("Cast", [mask], f"{mask}_float", to=self.FLOAT), self.small([-1])],
                       f"{mask}_weight")

    def sum_slots(self, rows: str, out: str) -> str:
        """Σ over axis 2 (a perspective's slots or slot pairs) of [B, 2, n, X] -> [B, 2, X]."""
        return self.op("ReduceSum", [rows, self.small([2])], out, keepdims=0)


def _token_rows(g: _Graph, tokens: str, V: int):
    """(present [B, 2, T] bool, row [B, 2, T] int64): the row of a table [V, X] each slot
    reads; an empty slot (-1) reads row 0, to be masked by `present`, and an id below -1
    reads row V, which is Gather's error (as an id of V or more is)."""
    present = g.op("GreaterOrEqual", [tokens, g.small(0)], "token_present")
    empty_or_bad = g.op("Where", [g.op("Equal", [tokens, g.small(-1)], "token_empty"), g.small(0), g.small(V)],
                        "token_empty_or_bad_row")
    return present, g.op("Where", [present, tokens, empty_or_bad], "token_row")


def _power_sums(g: _Graph, present: str, rows: str, embedding: str, orders: int) -> str:
    """[B, 2, K D]: per perspective, the sums over present tokens of their embedding rows
    to the powers 1..K, order after order (as PowerSums' [B, 2, K, D] reshaped)."""
    gathered = g.op("Gather", [embedding, rows], "embedded", axis=0)  # [B, 2, T, D]
    e = g.op("Mul", [gathered, g.weight(present)], "embedded_present")  # 0 at empty slots, as are its powers
    power, sums = e, []
    for k in range(1, orders + 1):
        if k > 1:
            power = g.op("Mul", [power, e], f"power_{k}")
        sums.append(g.sum_slots(power, f"power_sum_{k}"))
    return sums[0] if orders == 1 else g.op("Concat", sums, "power_sums", axis=2)


def _pair_sums(g: _Graph, tokens: str, w: "_Parameters", T: int, P: int) -> str:
    """[B, 2, P]: per perspective, the sum over slot pairs i < j holding two tokens of
    pair_table[hi (hi + 1) / 2 + lo] (lo, hi the smaller and larger token)."""
    first, second = pair_slots(T)
    if T == 1:  # no pair: 0, from the tokens [B, 2, 1] times 0 broadcast to [B, 2, P]
        nothing = g.op("Mul", [g.op("Cast", [tokens], "tokens_float", to=g.FLOAT), g.small(0, np.float32)], "no_pair")
        return g.op("Expand", [nothing, g.small([1, 1, P])], "pair_sums")
    a = g.op("Gather", [tokens, g.const("pair_first_slot", first)], "pair_first", axis=2)     # [B, 2, T(T-1)/2]
    b = g.op("Gather", [tokens, g.const("pair_second_slot", second)], "pair_second", axis=2)
    lo, hi = g.op("Min", [a, b], "pair_lo"), g.op("Max", [a, b], "pair_hi")
    hi_plus_1 = g.op("Add", [hi, g.small(1)], "pair_hi_plus_1")
    triangle = g.op("Div", [g.op("Mul", [hi, hi_plus_1], "pair_hi_times_hi_plus_1"), g.small(2)], "pair_triangle")
    row = g.op("Add", [triangle, lo], "pair_row")
    both = g.op("GreaterOrEqual", [lo, g.small(0)], "pair_present")  # lo >= 0: both slots hold a token
    used = g.op("Where", [both, row, g.small(0)], "pair_row_used")  # row 0 for the others, masked next
    rows = g.op("Gather", [w["pair_table"], used], "pair_rows", axis=0)  # [B, 2, T(T-1)/2, P]
    return g.sum_slots(g.op("Mul", [rows, g.weight(both)], "pair_rows_present"), "pair_sums")


def _legal_slots(g: _Graph, M: int):
    """(used [B, L] bool: l < counts[b], move [B, L] int64: legal[b, l] in a used slot, 0
    in a padded one). A negative id in a used slot becomes M, which is GatherElements'
    error (a negative index would read the table from its end)."""
    width = g.op("Gather", [g.op("Shape", ["legal"], "legal_shape"), g.small(1)], "legal_width", axis=0)
    slot = g.op("Unsqueeze", [g.op("Range", [g.small(0), width, g.small(1)], "slot"), g.small([0])], "slot_row")
    count = g.op("Unsqueeze", [g.op("Cast", ["counts"], "counts_int64", to=g.INT64), g.small([1])], "count_column")
    used = g.op("Less", [slot, count], "slot_used")  # [B, L]
    legal = g.op("Cast", ["legal"], "legal_int64", to=g.INT64)
    legal = g.op("Where", [g.op("GreaterOrEqual", [legal, g.small(0)], "legal_nonnegative"), legal, g.small(M)],
                 "legal_checked")
    return used, g.op("Where", [used, legal, g.small(0)], "legal_used")


def _gather_dot(g: _Graph, q: str, move_table: str, move: str) -> str:
    """[B, L]: q [B, W] · move_table[move[b, l]] (padded slots read row 0: the caller masks
    them), as the product with the whole table followed by a gather of the legal columns."""
    scores = g.op("Gemm", [q, move_table], "move_scores", transB=1)  # [B, M]
    return g.op("GatherElements", [scores, move], "legal_scores", axis=1)


def _move_kind_split(g: _Graph, move: str, R: int, C: int):
    """(the move table's row [B, L] move % R, the kind table's row [B, L] move % C +
    C (move // R)) of each label (int64; padded slots hold 0, and a used label outside
    [0, M) has a kind row outside [0, C F), GatherElements' error). move >= 0: Mod and
    Div (which truncates) are Python's % and //."""
    rows = g.op("Mod", [move, g.small(R)], "move_kind_move_row")
    kinds = g.op("Div", [move, g.small(R)], "move_kind_kind")
    classes = g.op("Mod", [move, g.small(C)], "move_kind_class")
    offsets = g.op("Mul", [kinds, g.small(C)], "move_kind_kind_offset")
    return rows, g.op("Add", [classes, offsets], "move_kind_row")


def _move_kind(g: _Graph, q: str, move_kind_table: str, kind_row: str) -> str:
    """[B, L]: q [B, W] . move_kind_table[kind_row[b, l]], as the product with the whole
    kind table [B, C F] followed by a gather of each label's row (as GatherDot's)."""
    scores = g.op("Gemm", [q, move_kind_table], "move_kind_scores", transB=1)  # [B, C F]
    return g.op("GatherElements", [scores, kind_row], "move_kind_logits", axis=1)


def _move_pair_sums(g: _Graph, present: str, rows: str, move_pair_table: str, move: str, C: int) -> str:
    """[B, L]: the sum over the side to move's present tokens v of move_pair_table[v,
    move[b, l] % C] (padded slots read class 0: the caller masks them), as the per-position
    sums of the tokens' rows [B, C] followed by a gather of each move's class."""
    side = g.small([0])  # perspective 0, the side to move; an index of shape [1] keeps the axis
    side_rows = g.op("Gather", [rows, side], "side_token_row", axis=1)             # [B, 1, T]
    side_present = g.op("Gather", [present, side], "side_token_present", axis=1)   # [B, 1, T]
    gathered = g.op("Gather", [move_pair_table, side_rows], "move_pair_rows", axis=0)  # [B, 1, T, C]
    masked = g.op("Mul", [gathered, g.weight(side_present)], "move_pair_rows_present")
    per_class = g.op("ReduceSum", [masked, g.small([1, 2])], "move_pair_class_sums", keepdims=0)  # [B, C]
    classes = g.op("Mod", [move, g.small(C)], "move_class")  # move >= 0: the remainder of C's %
    return g.op("GatherElements", [per_class, classes], "move_pair_sums", axis=1)


def _relative_keys(g: _Graph, present: str, rows: str, move: str, config):
    """(weight [B, 1, T] float: 1 at the side to move's slots holding a board token, index
    [B, T, L] int64: ridx(token, move[b, l] % C) = token_part[v] + class_part[c], classes
    [B, L] int64: move[b, l] % C) of the relative part (:mod:`manaka.move_pair_board`),
    read by the relative sums and by MoveHidden; padded slots read class 0 (the caller
    masks them)."""
    token_part, class_part = relative_parts(config)
    on_board = token_part >= 0
    # a token without a part reads token 0's, in range for every class, weighted 0
    token_part = np.where(on_board, token_part, token_part[0])
    side = g.small([0])
    side_rows = g.op("Gather", [rows, side], "side_token_row", axis=1)              # [B, 1, T]
    side_present = g.op("Gather", [present, side], "side_token_present", axis=1)    # [B, 1, T]
    board = g.op("Gather", [g.const("relative_on_board", on_board), side_rows], "side_token_on_board", axis=0)
    weight = g.op("Cast", [g.op("And", [side_present, board], "relative_slot_used")], "relative_slot_weight",
                  to=g.FLOAT)                                                       # [B, 1, T]
    parts = g.op("Gather", [g.const("relative_token_part", token_part), side_rows], "relative_token_parts",
                 axis=0)
    parts = g.op("Transpose", [parts], "relative_token_parts_column", perm=[0, 2, 1])  # [B, T, 1]
    classes = g.op("Mod", [move, g.small(config.move_pairs)], "relative_move_class")
    class_parts = g.op("Gather", [g.const("relative_class_part", class_part), classes], "relative_class_parts",
                       axis=0)
    class_parts = g.op("Unsqueeze", [class_parts, g.small([1])], "relative_class_parts_row")  # [B, 1, L]
    index = g.op("Add", [parts, class_parts], "relative_index")                     # [B, T, L]
    return weight, index, classes


def _move_pair_relative_sums(g: _Graph, keys, relative: np.ndarray) -> str:
    """[B, L]: the sum over the side to move's board tokens v of relative.flat[token_part[v]
    + class_part[move[b, l] % C]] (padded slots read class 0: the caller masks them)."""
    weight, index, _ = keys
    flat = g.const("move_pair_relative", np.ascontiguousarray(relative, dtype=np.float32).reshape(-1))
    entries = g.op("Gather", [flat, index], "relative_entries", axis=0)            # [B, T, L]
    sums = g.op("MatMul", [weight, entries], "relative_sums_row")                   # [B, 1, L]
    return g.op("Squeeze", [sums, g.small([1])], "move_pair_relative_sums")


def _move_hidden(g: _Graph, keys, w: "_Parameters", out: np.ndarray, readout: str = None) -> str:
    """[B, L]: MoveHidden, sum_d o[d] relu(pre[b, l, d]) with pre[b, l, :] =
    move_hidden_class[c, :] + the sum over the side to move's board tokens v of
    move_hidden_relative[ridx(v, c), :], c = move[b, l] % C (padded slots read class 0:
    the caller masks them); o is out [1, D], or the value `readout` [B, D], a row per
    position (the gated readout, :func:`_move_hidden_readout`). The rows are gathered as
    [B, T, L, D] (1.5 MB per position at T = 40, L = 600, D = 16) and summed over the
    tokens by a MatMul with the slot weights."""
    weight, index, classes = keys
    D = out.shape[-1]
    rows = g.op("Gather", [w["move_hidden_relative"], index], "move_hidden_rows", axis=0)     # [B, T, L, D]
    flat = g.op("Reshape", [rows, g.small([0, 0, -1])], "move_hidden_rows_flat")             # [B, T, L D]
    board = g.op("MatMul", [weight, flat], "move_hidden_board_sums_flat")                    # [B, 1, L D]
    board = g.op("Reshape", [board, g.small([0, -1, D])], "move_hidden_board_sums")          # [B, L, D]
    class_rows = g.op("Gather", [w["move_hidden_class"], classes], "move_hidden_class_rows", axis=0)  # [B, L, D]
    pre = g.op("Add", [class_rows, board], "move_hidden_pre")
    hidden = g.op("Relu", [pre], "move_hidden_units")
    if readout is None:  # one readout: a constant column [D, 1]
        column = g.const("move_hidden_out_column", np.ascontiguousarray(out, dtype=np.float32).reshape(D, 1))
    else:                # a column per position [B, D, 1]: a batched MatMul
        column = g.op("Unsqueeze", [readout, g.small([2])], "move_hidden_readout_column")
    dots = g.op("MatMul", [hidden, column], "move_hidden_dots")                             # [B, L, 1]
    return g.op("Squeeze", [dots, g.small([2])], "move_hidden")


def _move_hidden_readout(g: _Graph, q: str, w: "_Parameters") -> str:
    """[B, D]: MoveHidden's gated readout, move_hidden_out + q move_hidden_gate, q [B, W]
    the policy vector (as mk.Model: the product, then move_hidden_out added to each row)."""
    gated = g.op("MatMul", [q, w["move_hidden_gate"]], "move_hidden_gated")                  # [B, D]
    return g.op("Add", [gated, w["move_hidden_out"]], "move_hidden_readout")                # + [1, D]


def _move_shared(g: _Graph, q: str, parameters: Mapping[str, np.ndarray], move: str, C: int):
    """(class part, group part), each [B, L]: q [B, W] . move_shared_class[move[b, l] % C]
    and q . move_shared_group[move[b, l] // C] (padded slots read move 0: the caller
    masks them), as the products with the whole tables [B, C] and [B, M / C] followed by
    a gather of each move's entry."""
    tables = {}
    for name in ("move_shared_class", "move_shared_group"):
        tables[name] = g.const(f"{name}_transposed", np.ascontiguousarray(parameters[name], dtype=np.float32).T)
    per_class = g.op("MatMul", [q, tables["move_shared_class"]], "move_shared_class_scores")  # [B, C]
    per_group = g.op("MatMul", [q, tables["move_shared_group"]], "move_shared_group_scores")  # [B, M / C]
    # move >= 0: Mod and Div (which truncates) are Python's % and //
    classes = g.op("Mod", [move, g.small(C)], "move_shared_move_class")
    groups = g.op("Div", [move, g.small(C)], "move_shared_move_group")
    return (g.op("GatherElements", [per_class, classes], "move_shared_class_part", axis=1),
            g.op("GatherElements", [per_group, groups], "move_shared_group_part", axis=1))


class _Parameters(dict):
    """name -> the constant holding parameter `name`, made on first use."""

    def __init__(self, g: _Graph, arrays: Mapping[str, np.ndarray]):
        super().__init__()
        self.g, self.arrays = g, arrays

    def __missing__(self, name: str) -> str:
        self[name] = self.g.const(name, np.ascontiguousarray(self.arrays[name], dtype=np.float32))
        return self[name]


def build(config, parameters: Mapping[str, np.ndarray], opset: int = DEFAULT_OPSET, metadata=None):
    """An ``onnx.ModelProto`` of the network with `config` (a :class:`manaka.ModelConfig`)
    and `parameters` (``mk.Model.state_dict()``: name -> float32 array), at `opset`.
    `metadata` (str -> str) goes to the file's metadata_props. The graph is checked
    with ``onnx.checker`` (including shape inference) before it is returned."""
    onnx = import_onnx()
    helper, TensorProto = onnx.helper, onnx.TensorProto
    c, g = config, _Graph(onnx)
    # parameters become constants when a node first reads them: at T = 1 the pair table is not read
    w = _Parameters(g, parameters)

    tokens = g.op("Cast", ["tokens"], "tokens_int64", to=g.INT64)
    present, rows = _token_rows(g, tokens, c.num_tokens)
    power_sums = _power_sums(g, present, rows, w["embedding"], c.orders)  # [B, 2, K D]
    sides = g.op("Concat", [power_sums, _pair_sums(g, tokens, w, c.tokens_per_side, c.pair_dim)],
                 "side_features", axis=2)  # [B, 2, K D + P]
    x = g.op("Reshape", [sides, g.small([0, c.num_features])], "x0")  # 0: keep B
    for i in range(len(c.hidden)):
        linear = g.op("Gemm", [x, w[f"trunk.{i}.weight"], w[f"trunk.{i}.bias"]], f"trunk_{i}", transB=1)
        x = g.op("Relu", [linear], f"x{i + 1}")
    q = g.op("Gemm", [x, w["policy.weight"], w["policy.bias"]], "policy_vector", transB=1)
    used, move = _legal_slots(g, c.num_moves)
    if c.move_kinds:  # a label is a move of the move table and a kind
        move_row, kind_row = _move_kind_split(g, move, c.num_moves // c.move_kinds, max(c.move_pairs, 1))
        scores = _gather_dot(g, q, w["move_table"], move_row)
        kind = _move_kind(g, q, w["move_kind_table"], kind_row)
        scores = g.op("Add", [scores, kind], "legal_scores_with_move_kinds")
    else:
        scores = _gather_dot(g, q, w["move_table"], move)
    if c.move_pairs:
        pairs = _move_pair_sums(g, present, rows, w["move_pair_table"], move, c.move_pairs)
        scores = g.op("Add", [scores, pairs], "legal_scores_with_move_pairs")
    if c.board_kinds:
        keys = _relative_keys(g, present, rows, move, c)
        relative = _move_pair_relative_sums(g, keys, parameters["move_pair_relative"])
        scores = g.op("Add", [scores, relative], "legal_scores_with_relative_pairs")
    if c.move_hidden:
        readout = _move_hidden_readout(g, q, w) if c.move_hidden_gate else None
        hidden = _move_hidden(g, keys, w, parameters["move_hidden_out"], readout)
        scores = g.op("Add", [scores, hidden], "legal_scores_with_move_hidden")
    if c.move_shared:
        class_part, group_part = _move_shared(g, q, parameters, move, c.move_pairs)
        scores = g.op("Add", [scores, class_part], "legal_scores_with_move_shared_class")
        scores = g.op("Add", [scores, group_part], "legal_scores_with_move_shared")
    g.op("Where", [used, scores, g.small(0, np.float32)], "logits")  # 0 at padded slots
    v = x
    if c.value_power_sums:  # the value head's hidden layer reads the power sums [B, 2 K D]
        v = g.op("Reshape", [power_sums, g.small([0, 2 * c.orders * c.embed_dim])], "value_power_sums")
    if c.value_hidden:  # vh = relu(value_hidden.weight v + value_hidden.bias) [B, Hv]
        linear = g.op("Gemm", [v, w["value_hidden.weight"], w["value_hidden.bias"]], "value_hidden_linear", transB=1)
        v = g.op("Relu", [linear], "value_hidden")
    z = g.op("Gemm", [v, w["value.weight"], w["value.bias"]], "value_logit", transB=1)  # [B, 1]
    g.op("Sigmoid", [g.op("Squeeze", [z, g.small([1])], "value_logit_row")], "value")

    T = c.tokens_per_side
    inputs = [helper.make_tensor_value_info("tokens", TensorProto.INT32, ["batch", SIDES, T]),
              helper.make_tensor_value_info("legal", TensorProto.INT32, ["batch", "legal_moves"]),
              helper.make_tensor_value_info("counts", TensorProto.INT32, ["batch"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "legal_moves"]),
               helper.make_tensor_value_info("value", TensorProto.FLOAT, ["batch"])]
    graph = helper.make_graph(g.nodes, "manaka", inputs, outputs, initializer=g.constants,
                              doc_string="manaka's policy/value network (docs/design.md §1), standard operators only")
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="manaka",
                              ir_version=helper.find_min_ir_version_for(opsets))
    helper.set_model_props(model, {"manaka_config": json.dumps(c.to_dict()), **(metadata or {})})
    onnx.checker.check_model(model, full_check=True)
    return model
