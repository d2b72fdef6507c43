"""A game of shogi being played: the moves so far and how the game can end by rule.

``Game`` holds the current position and its history (from the starting position), plays
legal moves (checked by the C move generator) and says when a position has occurred four
times (sennichite: a draw, except that a player whose every move in the repeated stretch
gave check loses). ``declaration_wins`` checks an entering-king declaration (USI's
``bestmove win``) by the 27-point rule.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from .. import _core
from .position import STARTING_SFEN, Position, move_to_usi, parse_sfen

__all__ = ["Game", "declaration_wins"]


class Game:
    """A game from `start` (the starting position by default). ``moves`` are USI text,
    ``position`` the current position, ``ply`` the number of moves played."""

    def __init__(self, start: str = STARTING_SFEN):
        self.position = parse_sfen(start)
        status, *_ = self.position.analyse()
        if status:
            raise ValueError(f"shogi: {start!r} is not a valid position: {_core.shogi_reason(status)}")
        self.moves: List[str] = []
        self._sides = [self.position.side]
        self._checks = [bool(_core.shogi_in_check(self.position.board, self.position.hand, self.position.side))]
        self._seen: Dict[bytes, List[int]] = {self.position.key(): [0]}

    @property
    def ply(self) -> int:
        return len(self.moves)

    def legal_moves(self) -> List[int]:
        """The current position's legal moves as move16, sorted (so a seeded choice among
        them does not depend on the generator's order)."""
        return sorted(int(m) for m in self.position.analyse()[1])

    def in_check(self) -> bool:
        return self._checks[-1]

    def play(self, move: int) -> None:
        """Plays a legal move16, or USI text (ValueError if it is not legal); on any error the
        game is as it was (the position was replaced before the move's text was made, and a
        move that failed there left the game a move ahead of its `moves`)."""
        usi = move if isinstance(move, str) else move_to_usi(move)
        position, check = self.position.play(move)
        self.position = position
        self.moves.append(usi)
        self._sides.append(self.position.side)
        self._checks.append(bool(check))
        self._seen.setdefault(self.position.key(), []).append(self.ply)

    def repetition(self) -> Optional[Tuple[Optional[int], str]]:
        """None while the current position has occurred fewer than four times; else
        (winner, reason): winner None for a draw, or the colour (0 Black, 1 White) whose
        opponent checked with every move between the first and the fourth occurrence."""
        plies = self._seen[self.position.key()]
        if len(plies) < 4:
            return None
        first = plies[-4]
        for checker in (0, 1):
            # the positions after the checker's moves: the other side to move, in check
            after = [j for j in range(first + 1, self.ply + 1) if self._sides[j] != checker]
            if after and all(self._checks[j] for j in after):
                return 1 - checker, "perpetual check"
        return None, "repetition"

    def positions_seen(self) -> frozenset:
        """The keys (Position.key) of every position of the game so far, the current one
        included: a search scores reaching one again as a repetition."""
        return frozenset(self._seen)


# Points of a piece for the declaration: bishops and rooks (promoted or not) 5, others 1.
_BIG = {4, 5, 12, 13}


def declaration_wins(position: Position) -> bool:
    """Whether the side to move may declare a win by entering king (the 27-point rule, as
    CSA and USI engines use it): its king in the three far ranks, not in check, at least
    ten of its other pieces there, and at least 28 points (Black) or 27 (White) from those
    pieces and its hand, a bishop or rook counting 5 and any other piece 1."""
    side = position.side
    if _core.shogi_in_check(position.board, position.hand, side):
        return False
    in_camp = (lambda s: s % 9 <= 2) if side == 0 else (lambda s: s % 9 >= 6)
    king, pieces, points = False, 0, 0
    for s, cell in enumerate(position.board):
        if not cell or cell >> 4 != side or not in_camp(s):
            continue
        kind = (cell & 15) - 1
        if kind == 7:
            king = True
            continue
        pieces += 1
        points += 5 if kind in _BIG else 1
    hand = position.hand[7 * side:7 * side + 7]  # P L N S B R G
    points += sum(n * (5 if h in (4, 5) else 1) for h, n in enumerate(hand))
    return king and pieces >= 10 and points >= (28 if side == 0 else 27)
