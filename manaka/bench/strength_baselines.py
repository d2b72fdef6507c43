"""The baselines of ``python -m manaka.bench strength``, each a predictor of the held-out
positions' moves (a score per legal label; the largest is its move) and values:

- chance: every legal move equally likely, value 0.5 (its figures are exact expectations:
  top-k = min(k, n) / n, value BCE = ln 2, value accuracy 1/2);
- frequency: a legal move's score is how often the engine played that label in the training
  games; value: the training positions' mean result;
- heuristic: mate in one, else the most valuable capture by the cheapest piece, else the
  frequency score; value: sigmoid(a * material balance for the side to move), a fitted on
  the training positions (one-dimensional logistic regression).

Moves are dlshogi's labels, found with cshogi (a benchmark dependency, never manaka's), and
placed in the same sorted legal-label lists manaka's producers give.
"""
from __future__ import annotations

import numpy as np
import cshogi
from cshogi import Board
from cshogi.dlshogi import make_move_label

# Piece values by cshogi piece type (1 P, 2 L, 3 N, 4 S, 5 B, 6 R, 7 G, 8 K, 9.. promoted).
PIECE_VALUE = np.array([0, 1, 3, 4, 5, 8, 10, 6, 0, 6, 6, 6, 6, 10, 12], np.float64)
HAND_VALUE = np.array([1, 3, 4, 5, 6, 8, 10], np.float64)  # cshogi's hand order: P L N S G B R
MATE, CAPTURE = 1e9, 1e6


def label_frequency(targets_labels: np.ndarray, num_labels: int = 27 * 81) -> np.ndarray:
    """How often each label was the played move (float64 [num_labels])."""
    return np.bincount(targets_labels, minlength=num_labels).astype(np.float64)


def material(board: Board) -> float:
    """Material of the side to move minus the opponent's (board and hands)."""
    pieces = np.asarray(board.pieces, np.int64)
    kind, colour = pieces & 15, pieces >> 4   # colour 0 black, 1 white (empty: kind 0)
    sign = np.where(colour == board.turn, 1.0, -1.0)
    total = float((PIECE_VALUE[kind] * sign).sum())
    hands = np.asarray(board.pieces_in_hand, np.float64)  # [2, 7]
    total += float(hands[board.turn] @ HAND_VALUE - hands[1 - board.turn] @ HAND_VALUE)
    return total


def heuristic_scores(board: Board, labels: np.ndarray, frequency: np.ndarray) -> np.ndarray:
    """A score per legal label (`labels`, sorted, as the producers list them): the mate in
    one highest, then captures by (captured value, then cheapest capturer), then the
    frequency score (always below CAPTURE)."""
    scores = frequency[labels] / (frequency.sum() + 1.0)   # in [0, 1)
    mate = board.mate_move_in_1ply()
    if mate and not board.is_legal(mate):  # cshogi's search may answer in check with a move that is not legal
        mate = 0
    turn = board.turn
    for move in board.legal_moves:
        if cshogi.move_is_drop(move):
            continue
        captured = board.piece(cshogi.move_to(move)) & 15
        if captured == 0 and not (mate and move == mate):
            continue
        i = int(np.searchsorted(labels, make_move_label(move, turn)))
        if mate and move == mate:
            scores[i] = MATE
        else:
            mover = board.piece(cshogi.move_from(move)) & 15
            scores[i] = CAPTURE + 100.0 * PIECE_VALUE[captured] - PIECE_VALUE[mover] + scores[i]
    if mate and cshogi.move_is_drop(mate):
        scores[int(np.searchsorted(labels, make_move_label(mate, turn)))] = MATE
    return scores


def fit_material_slope(materials: np.ndarray, results: np.ndarray) -> float:
    """a minimising the BCE of sigmoid(a * material) against the results (Newton's method)."""
    a = 0.0
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-a * materials))
        grad = ((p - results) * materials).mean()
        hess = (p * (1 - p) * materials ** 2).mean() + 1e-12
        step = grad / hess
        a -= step
        if abs(step) < 1e-10:
            break
    return float(a)


def boards_of(records: np.ndarray):
    """A cshogi Board per HCPE record (set from its first 32 bytes), one at a time."""
    board = Board()
    for r in records:
        board.set_hcp(np.ascontiguousarray(r[:32]))
        yield board
