"""Shogi positions for manaka: SFEN parsing, legal moves, tokens and dlshogi labels.

The rules, the labels and the tokens live in C (csrc/shogi/position.c); this module only
turns SFEN / USI text into the C layout and back (docs/shogi.md, docs/design.md §6).
"""
from __future__ import annotations

from typing import List, Tuple

import numpy as np

from .. import _core

__all__ = ["Position", "parse_sfen", "legal_moves", "legal_labels", "encode", "label_to_usi",
           "usi_to_label", "move_to_usi", "usi_to_move", "apply_move", "in_check", "STARTING_SFEN", "NUM_TOKENS", "NUM_LABELS", "TOKENS_PER_SIDE"]

STARTING_SFEN = "lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL b - 1"
NUM_TOKENS, NUM_LABELS, TOKENS_PER_SIDE = 2344, 2187, 40

# Move label encodings (csrc/shogi/position.h): a label is the move's dlshogi label plus
# NUM_LABELS times a class of the move in its position, so that the policy head's label
# embedding can tell captures, defended destinations, checks and escapes apart. Each
# encoding adds one feature to the one before:
#   "dlshogi"                        the plain dlshogi label (NUM_LABELS = 2187 labels);
#   "capture"                        x 15: no capture, or the captured piece's kind;
#   "capture-defended"               x 30: and whether the opponent attacks the destination
#                                    once the move is made;
#   "capture-defended-check"         x 60: and whether the move gives check;
#   "capture-defended-check-escape"  x 120: and whether the opponent attacked the moving
#                                    piece on its square (drops: no);
#   "capture-defended-check-escape-mover"  x 1680: and the kind of the piece that moves
#                                    (before promotion; a drop's piece): label = the
#                                    escape label + 262,440 kind, a model with
#                                    move_kinds = 14 (MOVE_KINDS) reads it;
#   "capture-defended-check-escape-mover-supported"  x 3360: and whether another of our
#                                    pieces attacks the destination after the move (kind =
#                                    mover + 14 supported, move_kinds = 28).
# The model's move vocabulary (ModelConfig.num_moves) names its encoding.
MOVE_ENCODINGS = {"dlshogi": 0, "capture": 1, "capture-defended": 2, "capture-defended-check": 3,
                  "capture-defended-check-escape": 4, "capture-defended-check-escape-mover": 5,
                  "capture-defended-check-escape-mover-supported": 6}
_CLASSES = {"dlshogi": 1, "capture": 15, "capture-defended": 30, "capture-defended-check": 60,
            "capture-defended-check-escape": 120, "capture-defended-check-escape-mover": 1680,
            "capture-defended-check-escape-mover-supported": 3360}
# ModelConfig.move_kinds of a model reading an encoding (moves not in it: 0)
MOVE_KINDS = {"capture-defended-check-escape-mover": 14, "capture-defended-check-escape-mover-supported": 28}


def kinds_meta(move_kinds: int) -> dict:
    """The meta.json entry by which a Dataset of labels with move kinds says so
    (Dataset.move_kinds): a model trained on the folder then has the kind table."""
    return {"move_kinds": int(move_kinds)} if move_kinds else {}


def num_labels(moves: str = "dlshogi") -> int:
    """The number of labels of a move encoding (MOVE_ENCODINGS)."""
    return NUM_LABELS * _CLASSES[check_moves(moves)]


def check_moves(moves) -> str:
    """`moves` if it names an encoding, else a ValueError listing them."""
    if not isinstance(moves, str) or moves not in MOVE_ENCODINGS:
        raise ValueError(f"shogi: moves must be one of {sorted(MOVE_ENCODINGS)}, got {moves!r}")
    return moves


def check_encoding(model, data, op: str) -> None:
    """A ValueError when `data` (shogi records, a Loader over them or a Dataset made from
    them) labels moves in another encoding than `model` (anything with a ModelConfig as
    ``.config``) reads: every label would still be in range, and silently mean another move
    class. Other data and models are not checked here."""
    src = getattr(data, "dataset", data)
    meta = getattr(src, "meta", None)
    moves = meta.get("moves") if isinstance(meta, dict) else None
    cfg = getattr(model, "config", None)
    # a dataset's meta.json is the user's: "moves" may hold anything (a list is unhashable)
    if not isinstance(moves, str) or moves not in MOVE_ENCODINGS or cfg is None or not hasattr(cfg, "num_moves") or num_labels(moves) == cfg.num_moves:
        return
    try:
        reads = f"encoding {moves_of(cfg.num_moves)!r}"
    except ValueError:
        reads = "no shogi encoding"
    raise ValueError(f"{op}: the data's move labels are in encoding {moves!r} ({num_labels(moves):,} labels) but the "
                     f"model reads {reads} (num_moves={cfg.num_moves:,}): open the records with "
                     f"moves=... matching the model (manaka.shogi.moves_of(model.config.num_moves))")


def model_encoding(model, op: str) -> str:
    """The move encoding in which `model` (anything with a ModelConfig as ``.config``) reads
    shogi positions: ``moves_of(num_moves)``, once its config can read manaka's encoding of
    a position at all (``tokens_per_side`` = TOKENS_PER_SIDE, every token id below
    ``num_tokens``). Otherwise a ValueError naming `op` and what does not fit, so that a
    player refuses the model when it is made, not at its first forward pass mid-game."""
    cfg = getattr(model, "config", None)
    if cfg is None or not all(hasattr(cfg, n) for n in ("num_tokens", "num_moves", "tokens_per_side")):
        raise TypeError(f"{op}: expected a manaka model (with a ModelConfig as .config), got {type(model).__name__}")
    if cfg.tokens_per_side != TOKENS_PER_SIDE or cfg.num_tokens < NUM_TOKENS:
        raise ValueError(f"{op}: the model (num_tokens={cfg.num_tokens}, tokens_per_side={cfg.tokens_per_side}) "
                         f"cannot read shogi positions, which have tokens_per_side={TOKENS_PER_SIDE} and token ids "
                         f"below {NUM_TOKENS}: it is not a shogi model")
    try:
        return moves_of(cfg.num_moves)
    except ValueError as e:
        raise ValueError(f"{op}: {e}: it is not a shogi model") from None


def moves_of(num_moves: int) -> str:
    """The encoding whose labels a model with `num_moves` move rows reads (a ValueError for a
    vocabulary that is no shogi encoding's)."""
    for name, k in _CLASSES.items():
        if NUM_LABELS * k == num_moves:
            return name
    raise ValueError(f"shogi: a model with num_moves={num_moves} reads no shogi move encoding "
                     f"(one of {sorted(NUM_LABELS * k for k in _CLASSES.values())})")

# Piece kinds 0..13 (csrc/shogi/position.h): P L N S B R G K +P +L +N +S +B +R.
_LETTERS = "PLNSBRGK"
_KIND = {c: i for i, c in enumerate(_LETTERS)}
_PROMOTABLE = "PLNSBR"
# Hand kinds 0..6 in the C layout: P L N S B R G.
_HAND_LETTERS = "PLNSBRG"


class Position:
    """A shogi position in the C layout: `board` (81 cells, 0 empty or 1 + kind + 16 *
    colour), `hand` ([2, 7] counts, kinds P L N S B R G) and `side` (0 Black, 1 White),
    with the SFEN's `move_number` (1 when the SFEN gave none; the rules do not read it)."""

    __slots__ = ("board", "hand", "side", "move_number")

    def __init__(self, board: bytes, hand: bytes, side: int, move_number: int = 1):
        self.board, self.hand, self.side = bytes(board), bytes(hand), int(side)
        self.move_number = int(move_number)
        # the layout every method reads (a side of 5 was an IndexError in sfen(), 2**40 an
        # unnamed OverflowError in the C core); whether the cells make a legal position is
        # the C core's question (analyse)
        if len(self.board) != 81 or len(self.hand) != 14:
            raise ValueError(f"shogi: Position needs an 81-byte board and a 14-byte hand, got "
                             f"{len(self.board)} and {len(self.hand)} bytes")
        if self.side not in (0, 1):
            raise ValueError(f"shogi: Position's side must be 0 (Black) or 1 (White), got {self.side}")
        if self.move_number < 0:
            raise ValueError(f"shogi: Position's move_number must be >= 0, got {self.move_number}")

    def analyse(self, moves: str = "dlshogi"):
        """(status, moves, labels, tokens) from the C core, labels in the encoding `moves`;
        status 0 means valid."""
        return _core.shogi_analyse(self.board, self.hand, self.side, MOVE_ENCODINGS[check_moves(moves)])

    def sfen(self) -> str:
        rows = []
        for rank in range(9):
            row, empty = "", 0
            for file in range(9, 0, -1):
                cell = self.board[9 * (file - 1) + rank]
                if not cell:
                    empty += 1
                    continue
                if empty:
                    row, empty = row + str(empty), 0
                kind, color = (cell & 15) - 1, cell >> 4
                if not 0 <= kind < 14 or color > 1:  # it was written as another piece (255: "+g")
                    raise ValueError(f"shogi: Position's cell {9 * (file - 1) + rank} holds {cell}, "
                                     "which is no piece (1 + kind + 16 * colour, kind 0..13)")
                letter = ("+" + _LETTERS[kind - 8]) if kind >= 8 else _LETTERS[kind]
                row += letter if color == 0 else letter.lower()
            rows.append(row + (str(empty) if empty else ""))
        hand = ""
        for color in (0, 1):
            for letter in "RBGSNLP":
                n = self.hand[color * 7 + _HAND_LETTERS.index(letter)]
                if n:
                    hand += (str(n) if n > 1 else "") + (letter if color == 0 else letter.lower())
        return f"{'/'.join(rows)} {'bw'[self.side]} {hand or '-'} {self.move_number}"

    def play(self, move) -> Tuple["Position", bool]:
        """(the position after `move`, its move number one more, whether its side to move
        is in check). `move` is a USI string or a cshogi move16 (an int: a float or a bool is a
        TypeError, not truncated into another move); ValueError when it is not legal here
        (checked by the C move generator) or the position is not valid."""
        m = usi_to_move(move) if isinstance(move, str) else _move16(move)
        try:
            board, hand, side, check = _core.shogi_apply_move(self.board, self.hand, self.side, m)
        except ValueError as e:
            if isinstance(move, str) and "is not legal" in str(e):  # the text given, not its move16
                raise ValueError(f"shogi: {move} is not a legal move of {self.sfen()!r}") from None
            raise
        return Position(board, hand, side, self.move_number + 1), check

    def key(self) -> bytes:
        """The cells, hands and side to move as one bytes value (repetition counting)."""
        return self.board + self.hand + bytes((self.side,))

    def __eq__(self, other) -> bool:
        return isinstance(other, Position) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def __repr__(self) -> str:
        return f"shogi.Position({self.sfen()!r})"


def parse_sfen(sfen: str) -> Position:
    """A Position from an SFEN string: ``board side hand [move number]``, after an optional
    leading ``sfen``; the move number (digits, 1 when absent) is kept, so
    ``parse_sfen(s).sfen() == s``. Raises ValueError naming the part that is malformed."""
    if not isinstance(sfen, str):
        raise TypeError(f"shogi: sfen must be a str, got {type(sfen).__name__}")
    parts = sfen.split()
    if parts and parts[0] == "sfen":
        parts = parts[1:]
    if len(parts) < 3:
        raise ValueError(f"shogi: {sfen!r} is not an SFEN (board side hand [move])")
    if len(parts) > 4:  # "... 1 moves 7g7f" would silently be the position before the moves
        raise ValueError(f"shogi: {sfen!r}: unexpected {' '.join(parts[4:])!r} after the move number "
                         "(an SFEN is board side hand [move number])")
    rows = parts[0].split("/")
    if len(rows) != 9:
        raise ValueError(f"shogi: {sfen!r}: the board needs 9 ranks, got {len(rows)}")
    board = bytearray(81)
    for rank, row in enumerate(rows):
        file, promoted = 9, False
        for ch in row:
            if ch in "123456789":  # not str.isdigit: "９" was read as 9, "²" an unnamed int() error, "0" skipped
                file -= int(ch)
                continue
            if ch == "+":
                promoted = True
                continue
            up = ch.upper()
            if up not in _KIND or (promoted and up not in _PROMOTABLE) or file < 1:
                raise ValueError(f"shogi: {sfen!r}: bad board at rank {rank + 1}: {row!r}")
            kind = _KIND[up] + (8 if promoted else 0)
            board[9 * (file - 1) + rank] = 1 + kind + (16 if ch.islower() else 0)
            file, promoted = file - 1, False
        if file != 0 or promoted:
            raise ValueError(f"shogi: {sfen!r}: rank {rank + 1} ({row!r}) does not have 9 files")
    if parts[1] not in ("b", "w"):
        raise ValueError(f"shogi: {sfen!r}: side to move must be 'b' or 'w', got {parts[1]!r}")
    hand = _parse_hand(sfen, parts[2])
    move_number = 1
    if len(parts) == 4:
        if not (parts[3].isascii() and parts[3].isdigit()):
            raise ValueError(f"shogi: {sfen!r}: the move number must be an integer, got {parts[3]!r}")
        move_number = int(parts[3])
    return Position(bytes(board), bytes(hand), 0 if parts[1] == "b" else 1, move_number)


def _parse_hand(sfen: str, text: str) -> bytearray:
    """The [2, 7] hand counts of an SFEN hand: ``-``, or pieces each preceded by an optional
    count of 2 to 18 (``2P``; a count alone, a count after its piece, or a count of 0 or 1
    is malformed)."""
    hand = bytearray(14)
    if text == "-":
        return hand
    count = ""
    for ch in text:
        if ch.isascii() and ch.isdigit():
            count += ch
            continue
        up = ch.upper()
        if up not in _HAND_LETTERS:
            raise ValueError(f"shogi: {sfen!r}: bad hand piece {ch!r} in the hand {text!r}")
        if count and not (count[0] != "0" and 2 <= int(count) <= 18):
            raise ValueError(f"shogi: {sfen!r}: bad count {count!r} before {ch!r} in the hand {text!r} "
                             "(a count is 2 to 18; one piece has none)")
        hand[(7 if ch.islower() else 0) + _HAND_LETTERS.index(up)] += int(count) if count else 1
        count = ""
    if count:
        raise ValueError(f"shogi: {sfen!r}: the hand {text!r} ends with the count {count!r} and no piece "
                         "(a count comes before its piece: 2P)")
    return hand


def _checked(position) -> Tuple[Position, tuple]:
    pos = position if isinstance(position, Position) else parse_sfen(position)
    result = pos.analyse()
    if result[0] != 0:
        raise ValueError(f"shogi: {pos.sfen()!r} is not a valid position: {_core.shogi_reason(result[0])}")
    return pos, result


def _square(s: int) -> str:
    return f"{s // 9 + 1}{'abcdefghi'[s % 9]}"


def _move16(move) -> int:
    """`move` as an int in [0, 2**16): int() took 1.5 as move 1 (a move played that nobody
    named) and True as 1; a number beyond 64 bits was an OverflowError."""
    import numbers

    if isinstance(move, bool) or not isinstance(move, numbers.Integral):
        raise TypeError(f"shogi: a move must be USI text or a move16 int, got {type(move).__name__}")
    if not 0 <= int(move) < 1 << 16:
        raise ValueError(f"shogi: move must be a 16-bit move, got {int(move)}")
    return int(move)


def move_to_usi(move: int) -> str:
    """USI text of a cshogi move16 (to | from << 7 | promote << 14, drops from = 81 + kind);
    the inverse of :func:`usi_to_move`. A number that is no move16 (a square beyond 81, a
    drop of no piece or promoted, from = to, a bit beyond 15) is a ValueError: it was read
    as whatever its bits spelled ("1a15b", "P*10a", 0 as "1a1a"), or an IndexError."""
    import numbers

    if isinstance(move, bool) or not isinstance(move, numbers.Integral):
        raise TypeError(f"shogi: a move16 must be an int, got {type(move).__name__}")
    move = int(move)
    to, frm, promote = move & 127, (move >> 7) & 127, (move >> 14) & 1
    drop = 81 <= frm < 81 + len(_HAND_LETTERS)
    if not (0 <= move < 1 << 15 and to < 81 and (drop and not promote or frm < 81 and frm != to)):
        raise ValueError(f"shogi: {move} is not a move16 (to | from << 7 | promote << 14: squares below 81, "
                         f"from = 81 + a hand piece's kind for a drop, which does not promote)")
    if drop:
        return f"{_HAND_LETTERS[frm - 81]}*{_square(to)}"
    return _square(frm) + _square(to) + ("+" if promote else "")


_FILE_RANK = {f"{s // 9 + 1}{'abcdefghi'[s % 9]}": s for s in range(81)}


def usi_to_move(usi: str) -> int:
    """The cshogi move16 of a USI move's text ("7g7f", "8h2b+", "P*5e"), without asking
    whether it is legal anywhere (ValueError when the text is not a move)."""
    if not isinstance(usi, str):
        raise TypeError(f"shogi: a USI move must be a str, got {type(usi).__name__}")
    if len(usi) == 4 and usi[1] == "*" and usi[0] in _HAND_LETTERS and usi[2:] in _FILE_RANK:
        return _FILE_RANK[usi[2:]] | (81 + _HAND_LETTERS.index(usi[0])) << 7
    if len(usi) in (4, 5) and usi[:2] in _FILE_RANK and usi[2:4] in _FILE_RANK and usi[4:] in ("", "+"):
        frm, to = _FILE_RANK[usi[:2]], _FILE_RANK[usi[2:4]]
        if frm != to:
            return to | frm << 7 | (len(usi) == 5) << 14
    raise ValueError(f"shogi: {usi!r} is not a USI move (like 7g7f, 8h2b+ or P*5e)")


def apply_move(sfen: str, usi: str) -> str:
    """The SFEN after the legal move `usi` (its move number one more than the given one,
    1 when none is given). ValueError when the move is not legal there."""
    position, _ = _checked(sfen)  # parse_sfen keeps the move number (and refuses a malformed one)
    move = usi_to_move(usi)
    try:
        after, _ = position.play(move)
    except ValueError as e:
        raise ValueError(f"shogi: {usi!r} is not a legal move of {position.sfen()!r}") from e
    return after.sfen()


def in_check(position) -> bool:
    """Whether the side to move of a valid position (SFEN or Position) is in check."""
    pos, _ = _checked(position)
    return bool(_core.shogi_in_check(pos.board, pos.hand, pos.side))


def legal_moves(position) -> List[str]:
    """The legal moves of a position (SFEN or Position) in USI, sorted."""
    _, (_, moves, _, _) = _checked(position)
    return sorted(move_to_usi(int(m)) for m in moves)


def legal_labels(position) -> np.ndarray:
    """The legal moves' dlshogi labels, sorted ascending (int32)."""
    _, (_, _, labels, _) = _checked(position)
    return np.sort(labels)


def encode(position) -> Tuple[np.ndarray, np.ndarray]:
    """(tokens int32 [2, 40], legal labels int32 [n] sorted): a position as manaka sees it."""
    _, (_, _, labels, tokens) = _checked(position)
    return tokens, np.sort(labels)


def label_to_usi(label: int, position) -> str:
    """The legal move of `position` with dlshogi label `label`, in USI (ValueError if none)."""
    import operator

    try:  # an int (NumPy's too); not a str, a float or None, which int() would read or refuse unnamed
        label = operator.index(label)
    except TypeError:
        raise TypeError(f"shogi: label must be an int, got {type(label).__name__}") from None
    _, (_, moves, labels, _) = _checked(position)
    hit = np.nonzero(labels == label)[0]
    if len(hit) == 0:
        raise ValueError(f"shogi: label {label} is not a legal move of this position")
    return move_to_usi(int(moves[hit[0]]))


def usi_to_label(usi: str, position) -> int:
    """The dlshogi label of the legal move `usi` (ValueError if it is not legal)."""
    if not isinstance(usi, str):
        raise TypeError(f"shogi: a USI move must be a str, got {type(usi).__name__}")
    _, (_, moves, labels, _) = _checked(position)
    for m, l in zip(moves, labels):
        if move_to_usi(int(m)) == usi:
            return int(l)
    raise ValueError(f"shogi: {usi!r} is not a legal move of this position")
