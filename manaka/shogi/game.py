"""A game being played: making a move, check, repetition and how a game ends.

The C core lists a position's legal moves but never makes one; a USI engine and the match
runner need the position after each move, so it is made here, in Python, on the C layout
(board cells, hands, side to move of manaka.shogi.Position). Every move made here is first
found among the C generator's legal moves, so a move is never made that the rules forbid.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

from .. import _core
from .position import STARTING_SFEN, Position, _checked, move_to_usi, parse_sfen

__all__ = ["play", "in_check", "usi_to_move", "key", "Game", "parse_position_command",
           "WIN", "LOSS", "DRAW"]

# mk_shogi_validate's code for "the side not to move is in check" (csrc/shogi/position.h).
_KING_CAPTURABLE = 6
_HAND_LETTERS = "PLNSBRG"
_SQUARE = {f"{s // 9 + 1}{'abcdefghi'[s % 9]}": s for s in range(81)}

# Results from the point of view of the side the game is scored for.
WIN, LOSS, DRAW = 1.0, 0.0, 0.5


def usi_to_move(usi: str) -> int:
    """The cshogi move16 of a USI move's text (7g7f, 8h2b+, P*5e); ValueError if it is not
    one. Whether it is legal is the position's question (`play` asks it)."""
    if not isinstance(usi, str):
        raise TypeError(f"shogi: a USI move must be a str, got {type(usi).__name__}")
    if len(usi) == 4 and usi[1] == "*" and usi[0] in _HAND_LETTERS and usi[2:] in _SQUARE:
        return _SQUARE[usi[2:]] | (81 + _HAND_LETTERS.index(usi[0])) << 7
    if len(usi) in (4, 5) and usi[:2] in _SQUARE and usi[2:4] in _SQUARE and usi[4:] in ("", "+"):
        frm, to = _SQUARE[usi[:2]], _SQUARE[usi[2:4]]
        if frm != to:
            return to | frm << 7 | (len(usi) == 5) << 14
    raise ValueError(f"shogi: {usi!r} is not a USI move (like 7g7f, 8h2b+ or P*5e)")


def _make(pos: Position, move: int) -> Position:
    """The position after `move`, which the caller knows is legal in `pos`."""
    to, frm, promote = move & 127, (move >> 7) & 127, (move >> 14) & 1
    board, hand, side = bytearray(pos.board), bytearray(pos.hand), pos.side
    if frm >= 81:  # a drop: hand kinds are the first seven board kinds
        kind = frm - 81
        board[to] = 1 + kind + 16 * side
        hand[7 * side + kind] -= 1
    else:
        piece = board[frm]
        board[frm] = 0
        captured = board[to]
        if captured:
            kind = (captured & 15) - 1
            hand[7 * side + (kind - 8 if kind >= 8 else kind)] += 1  # captured pieces lose promotion
        board[to] = piece + 8 if promote else piece
    return Position(bytes(board), bytes(hand), 1 - side)


def play(position, move) -> Position:
    """The position after `move` (USI text or a cshogi move16) in `position` (SFEN or
    Position). ValueError when the position is not valid or the move is not legal there."""
    pos, (_, moves, _, _) = _checked(position)
    m = usi_to_move(move) if isinstance(move, str) else int(move)
    if m not in set(int(x) for x in moves):
        raise ValueError(f"shogi: {move_to_usi(m)!r} is not a legal move of {pos.sfen()!r}")
    return _make(pos, m)


def in_check(pos: Position) -> bool:
    """Whether the side to move of a valid position is in check: the same position with the
    other side to move is one where the side not to move can be captured."""
    return _core.shogi_analyse(pos.board, pos.hand, 1 - pos.side)[0] == _KING_CAPTURABLE


def key(pos: Position) -> bytes:
    """Cells, hands and side to move: equal keys are the same position (repetition)."""
    return pos.board + pos.hand + bytes((pos.side,))


def parse_position_command(args: List[str]) -> Tuple[Position, List[int]]:
    """(start position, moves as move16) of a USI ``position`` command's arguments
    (``startpos [moves ...]`` or ``sfen B S H N [moves ...]``); ValueError naming the problem.
    The moves are checked legal by Game.push."""
    if not args:
        raise ValueError("position: expected 'startpos' or 'sfen ...'")
    if "moves" in args:
        i = args.index("moves")
        head, moves = args[:i], args[i + 1:]
    else:
        head, moves = args, []
    if head == ["startpos"]:
        start = parse_sfen(STARTING_SFEN)
    elif head[0] == "sfen" and len(head) in (4, 5):
        start = parse_sfen(" ".join(head[1:]))
    else:
        raise ValueError(f"position: expected 'startpos' or 'sfen BOARD SIDE HAND [N]', got {' '.join(head)!r}")
    return start, [usi_to_move(m) for m in moves]


class Game:
    """A game from a start position: its positions, whether each was check, and how it ends.

    The rules of the end (the usual tournament rules, as Fairy-Stockfish's and cshogi's):
    a side with no legal move loses (mate: shogi has no stalemate draw); the fourth
    occurrence of a position is a draw (sennichite), unless one side gave check with every
    one of its moves since the position's first occurrence, which then loses (perpetual
    check). A declaration win (nyugyoku) is not adjudicated."""

    def __init__(self, start: Optional[Position] = None):
        start = start if start is not None else parse_sfen(STARTING_SFEN)
        pos, analysis = _checked(start)
        self.start = pos
        self.positions: List[Position] = [pos]
        self.checks: List[bool] = [in_check(pos)]
        self.moves: List[int] = []
        self._legal = analysis[1]
        self._count = {key(pos): 1}

    @property
    def position(self) -> Position:
        return self.positions[-1]

    def legal_moves(self) -> List[int]:
        """The legal moves (move16) of the current position, in generation order."""
        return [int(m) for m in self._legal]

    def push(self, move) -> None:
        """Makes `move` (USI text or move16); ValueError if it is not legal here."""
        m = usi_to_move(move) if isinstance(move, str) else int(move)
        if m not in set(int(x) for x in self._legal):
            raise ValueError(f"shogi: {move_to_usi(m)!r} is not a legal move of {self.position.sfen()!r}")
        pos = _make(self.position, m)
        self.positions.append(pos)
        self.moves.append(m)
        self._legal = _core.shogi_analyse(pos.board, pos.hand, pos.side)[1]
        self.checks.append(in_check(pos))
        k = key(pos)
        self._count[k] = self._count.get(k, 0) + 1

    def repetitions(self) -> int:
        """How many times the current position has occurred (1 the first time)."""
        return self._count[key(self.position)]

    def result(self) -> Optional[Tuple[float, str]]:
        """None while the game goes on, else (result for the side to move, reason)."""
        if len(self._legal) == 0:
            return LOSS, "mate"
        if self.repetitions() >= 4:
            k, last = key(self.position), len(self.positions) - 1
            first = next(i for i, p in enumerate(self.positions) if key(p) == k)
            # checks[i] says position i is check: the move into it gave check. first and
            # last have the same side to move; the other side made the moves into first+2,
            # first+4, ..., last, the side to move those into first+1, ..., last-1.
            by_other = all(self.checks[i] for i in range(first + 2, last + 1, 2))
            by_mover = all(self.checks[i] for i in range(first + 1, last, 2))
            if by_other and last - first >= 2:
                return WIN, "perpetual check"
            if by_mover and last - first >= 2:
                return LOSS, "perpetual check"
            return DRAW, "repetition"
        return None
