"""``python -m manaka.shogi heuristic [--seed S]``: a one-line player as a USI engine, the
floor a trained network must clear (docs/shogi.md, "Playing").

Its move: a mate in one if there is one; else the capture of the most valuable piece, by
the cheapest capturer; else a promotion; else a move that is not a king move; ties broken
at random (seeded, so a game is reproducible)."""
from __future__ import annotations

import argparse
import random
import sys

from .. import _core
from .search import SearchResult
from .usi_protocol import UsiEngine

__all__ = ["heuristic_move", "main", "PIECE_VALUE"]

# By board kind P L N S B R G K +P +L +N +S +B +R; the king counts as the dearest capturer.
PIECE_VALUE = (1, 3, 4, 5, 8, 10, 6, 15, 6, 6, 6, 6, 10, 12)
_KING = 7


def _score(pos, move: int) -> float:
    to, frm, promote = move & 127, (move >> 7) & 127, (move >> 14) & 1
    after = pos.play(move)[0]
    if len(_core.shogi_analyse(after.board, after.hand, after.side)[1]) == 0:
        return 1e6  # mate in one
    if frm >= 81:
        return 0.0
    captured, mover = pos.board[to], (pos.board[frm] & 15) - 1
    if captured:
        return 1000.0 + 100.0 * PIECE_VALUE[(captured & 15) - 1] - PIECE_VALUE[mover]
    return 2.0 if promote else (1.0 if mover != _KING else 0.0)


def heuristic_move(pos, rng: random.Random):
    """The heuristic's move16 in a position (None when it has no legal move)."""
    moves = [int(m) for m in _core.shogi_analyse(pos.board, pos.hand, pos.side)[1]]
    if not moves:
        return None
    scores = [_score(pos, m) for m in moves]
    best = max(scores)
    return rng.choice([m for m, s in zip(moves, scores) if s == best])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m manaka.shogi heuristic", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=0, help="the tie-breaking seed (default 0)")
    args = p.parse_args(argv)
    rng = random.Random(args.seed)

    def player(game, budget, report):
        move = heuristic_move(game.position, rng)
        return SearchResult(move, 0.5, 0, [] if move is None else [move])

    return UsiEngine("manaka heuristic", player).run()


if __name__ == "__main__":
    sys.exit(main())
