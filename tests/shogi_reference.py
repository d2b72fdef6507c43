"""The shogi encoding of docs/design.md §6 written again in Python over cshogi (the tests'
oracle): cshogi's board, legal moves and dlshogi labels; tokens from the specification.
Also the random games the rule tests draw positions from."""
from __future__ import annotations

import numpy as np

cshogi = __import__("pytest").importorskip("cshogi")
import cshogi.dlshogi  # noqa: E402

# cshogi's hand order is P L N S G B R; manaka's C layout is P L N S B R G.
CSHOGI_HAND_TO_C = [0, 1, 2, 3, 6, 4, 5]
TOKEN_HAND_OFFSETS = [0, 18, 22, 26, 30, 34, 36]  # hand kinds P L N S G B R


def c_position(board):
    """(board bytes, hand bytes, side) of a cshogi.Board: cshogi's piece numbers are
    1 + kind + 16 * colour in manaka's kind order already."""
    cells = bytes(board.pieces)
    hand = bytearray(14)
    for color, counts in enumerate(board.pieces_in_hand):
        for i, n in enumerate(counts):
            hand[7 * color + CSHOGI_HAND_TO_C[i]] = n
    return cells, bytes(hand), board.turn


def tokens(board) -> np.ndarray:
    """[2, 40] tokens of a cshogi.Board, from the specification."""
    out = np.full((2, 40), -1, np.int32)
    pieces = board.pieces
    for view in (0, 1):
        owner = board.turn if view == 0 else 1 - board.turn
        row = []
        for sv in range(81):
            p = pieces[80 - sv if owner else sv]
            if p:
                c = 0 if (p >> 4) == owner else 1
                row.append((c * 14 + (p & 15) - 1) * 81 + sv)
        for c, color in ((0, owner), (1, 1 - owner)):
            for i, n in enumerate(board.pieces_in_hand[color]):  # P L N S G B R
                row += [2268 + c * 38 + TOKEN_HAND_OFFSETS[i] + j for j in range(n)]
        out[view, :len(row)] = row
    return out


def labels(board) -> np.ndarray:
    """Sorted dlshogi labels of cshogi's legal moves."""
    return np.array(sorted(cshogi.dlshogi.make_move_label(m, board.turn) for m in board.legal_moves), np.int32)


def random_positions(n: int, seed: int, max_plies: int = 160):
    """Yields n cshogi.Boards from random games whose moves favour captures, checks,
    drops and promotions, so that hands, pins, evasions and mates are frequent."""
    rng = np.random.default_rng(seed)
    made = 0
    while made < n:
        board = cshogi.Board()
        for _ in range(int(rng.integers(1, max_plies))):
            moves = list(board.legal_moves)
            if not moves:
                break
            yield board
            made += 1
            if made >= n:
                return
            weights = np.ones(len(moves))
            checks = set(board.check_moves)
            for i, m in enumerate(moves):
                if cshogi.move_is_drop(m):
                    weights[i] += 2
                if cshogi.move_is_promotion(m):
                    weights[i] += 2
                if board.piece(cshogi.move_to(m)):
                    weights[i] += 6
                if m in checks:
                    weights[i] += 4
            board.push(moves[int(rng.choice(len(moves), p=weights / weights.sum()))])
