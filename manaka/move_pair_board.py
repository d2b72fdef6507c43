"""The index of the move-pair table's relative part (``move_pair_relative``,
:class:`manaka.ModelConfig`'s board_width W, board_height H, board_kinds K), split as
csrc/core/move_pair_board.h splits it, for the graphs written outside the C core
(:class:`manaka.torch.Network`, :mod:`manaka.onnx_graph`):

    ridx(v, c) = token_part[v] + class_part[c]

for a board token v (v < K S, S = W H: kind v // S on square v % S) and a move class c
(kind c // S on square c % S), a square s being (s // H, s % H); the flat entry of the
[K (2W - 1) (2H - 1), C / S] table. A token v >= K S (a hand token) has no part: it adds
nothing. Both lists are a few thousand int64 at the shogi shapes, so a graph gathers them
per token and per legal move and adds them, instead of holding a [V, C] index.
"""
from __future__ import annotations

from typing import Tuple

import numpy as np

__all__ = ["relative_parts"]


def relative_parts(config) -> Tuple[np.ndarray, np.ndarray]:
    """(token_part int64 [V], class_part int64 [C]) of `config` (a
    :class:`manaka.ModelConfig` with ``board_kinds`` > 0). token_part is -1 at the tokens
    that are not board tokens (v >= K S), as mk_relative_token's -1; for a board token v
    and any class c, token_part[v] + class_part[c] is in [0, table size)."""
    W, H, K, C = config.board_width, config.board_height, config.board_kinds, config.move_pairs
    if not K:
        raise ValueError(f"relative_parts: the config has no relative part (board_kinds = 0): {config}")
    S, per_square = W * H, C // (W * H)
    v = np.arange(config.num_tokens, dtype=np.int64)
    s = v % S
    token_part = ((v // S * (2 * W - 1) + s // H + W - 1) * (2 * H - 1) + s % H + H - 1) * per_square
    token_part[v >= K * S] = -1
    c = np.arange(C, dtype=np.int64)
    s = c % S
    class_part = c // S - (s // H * (2 * H - 1) + s % H) * per_square
    return token_part, class_part
