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


# The standard handicap games' start positions: White, the stronger player, plays without
# the pieces named and moves first.
HANDICAPS = {
    "lance": "lnsgkgsn1/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1",
    "bishop": "lnsgkgsnl/1r7/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1",
    "rook": "lnsgkgsnl/7b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1",
    "rook_lance": "lnsgkgsn1/7b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1",
    "2_pieces": "lnsgkgsnl/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1",
    "4_pieces": "1nsgkgsn1/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1",
    "6_pieces": "2sgkgs2/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1",
    "8_pieces": "3gkg3/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1",
    "10_pieces": "4k4/9/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL w - 1",
}

# The most legal moves a position can have: 593.
MOST_MOVES = "R8/2K1S1SSk/4B4/9/9/9/9/9/1L1L1L3 b RBGSNLP3g3n17p 1"


def _weights(board, moves, capture=6.0, drop=2.0):
    """Move weights favouring captures, checks, drops and promotions (drop < 0: drops are
    made rarer, divided by -drop, so that captured pieces stay in hand)."""
    weights = np.ones(len(moves))
    checks = set(board.check_moves)
    for i, m in enumerate(moves):
        if cshogi.move_is_drop(m):
            if drop >= 0:
                weights[i] += drop
            else:
                weights[i] /= -drop
        if cshogi.move_is_promotion(m):
            weights[i] += 2
        if board.piece(cshogi.move_to(m)):
            weights[i] += capture
        if m in checks:
            weights[i] += 4
    return weights / weights.sum()


def random_positions(n: int, seed: int, max_plies: int = 160, start: str = None, capture: float = 6.0,
                     drop: float = 2.0, min_in_hand: int = 0):
    """Yields n cshogi.Boards from random games whose moves favour captures, checks,
    drops and promotions, so that hands, pins, evasions and mates are frequent. `start`:
    an SFEN, or a list of them taken in turn (the standard start by default); `capture`,
    `drop`: the weights of _weights; only positions with at least `min_in_hand` pieces in
    the hands are yielded."""
    rng = np.random.default_rng(seed)
    starts = [start] if start is None or isinstance(start, str) else list(start)
    made, game = 0, 0
    while made < n:
        first = starts[game % len(starts)]
        game += 1
        board = cshogi.Board() if first is None else cshogi.Board(first)
        for _ in range(int(rng.integers(1, max_plies))):
            moves = list(board.legal_moves)
            if not moves:
                break
            if sum(map(sum, board.pieces_in_hand)) >= min_in_hand:
                yield board
                made += 1
                if made >= n:
                    return
            board.push(moves[int(rng.choice(len(moves), p=_weights(board, moves, capture, drop)))])


def hand_heavy_positions(n: int, seed: int):
    """Positions with many pieces in hand (the ones with the most legal moves): random
    games in which captures are 60 times likelier and drops 20 times rarer, from the
    20th piece captured on."""
    return random_positions(n, seed, max_plies=300, capture=60.0, drop=-20.0, min_in_hand=20)


def handicap_positions(n: int, seed: int, max_plies: int = 80):
    """Positions of random games from each standard handicap start in turn."""
    return random_positions(n, seed, max_plies, start=list(HANDICAPS.values()))


_ENDGAME_KINDS = "PLNSGBR"
_SET = {"P": 18, "L": 4, "N": 4, "S": 4, "G": 4, "B": 2, "R": 2}


def random_endgames(n: int, seed: int, absent: float = 0.25):
    """Yields n random legal positions with a legal move: the two kings and up to eight
    other pieces (some promoted) on the board, the other pieces in either hand, a random
    few of them left out of the game altogether in a share `absent` of the positions.
    Legal: no pawn, lance or knight that could never move, no two unpromoted pawns of a
    side on a file, the side not to move not in check (cshogi decides)."""
    rng = np.random.default_rng(seed)
    made = 0
    while made < n:
        board = [[""] * 9 for _ in range(9)]  # [rank][file index 0 = file 9] of SFEN letters
        free = [(r, f) for r in range(9) for f in range(9)]
        rng.shuffle(free)
        (r0, f0), (r1, f1) = free[0], free[1]
        if abs(r0 - r1) <= 1 and abs(f0 - f1) <= 1:
            continue
        board[r0][f0], board[r1][f1] = "K", "k"
        left = dict(_SET)
        pawn_files = (set(), set())
        for (r, f) in free[2:2 + int(rng.integers(0, 9))]:
            kind = _ENDGAME_KINDS[int(rng.integers(7))]
            if not left[kind]:
                continue
            white = bool(rng.integers(2))
            far = 8 - r if white else r  # ranks from the owner's far edge
            promoted = kind not in "G" and rng.random() < 0.3
            if not promoted and ((kind in "PL" and far == 0) or (kind == "N" and far <= 1)):
                continue
            if kind == "P" and not promoted:
                if f in pawn_files[white]:
                    continue
                pawn_files[white].add(f)
            left[kind] -= 1
            letter = ("+" if promoted else "") + kind
            board[r][f] = letter.lower() if white else letter
        hands = ({}, {})
        leave_out = rng.random() < absent
        for kind, count in left.items():
            for _ in range(count):
                if leave_out and rng.random() < 0.2:
                    continue
                side = int(rng.integers(2))
                hands[side][kind] = hands[side].get(kind, 0) + 1
        rows = []
        for r in range(9):
            row, empty = "", 0
            for f in range(9):
                if board[r][f]:
                    row += (str(empty) if empty else "") + board[r][f]
                    empty = 0
                else:
                    empty += 1
            rows.append(row + (str(empty) if empty else ""))
        hand = "".join(f"{c if c > 1 else ''}{k}" for k, c in hands[0].items())
        hand += "".join(f"{c if c > 1 else ''}{k.lower()}" for k, c in hands[1].items())
        turn = "bw"[int(rng.integers(2))]
        sfen = f"{'/'.join(rows)} {turn} {hand or '-'} 1"
        other = cshogi.Board(sfen.replace(f" {turn} ", " " + "bw"[turn == "b"] + " "))
        if other.is_check():  # the side not to move would be in check
            continue
        b = cshogi.Board(sfen)
        if not b.is_ok() or not any(True for _ in b.legal_moves):
            continue
        yield b
        made += 1


def pieces_in_hand(board) -> int:
    return int(sum(map(sum, board.pieces_in_hand)))


# One cycle of ten positions of mixed_positions, by source.
MIXED_CYCLE = ["random"] * 6 + ["hand_heavy"] * 2 + ["endgame", "handicap"]


def mixed_positions(n: int, seed: int, most_moves_every: int = 1000):
    """Yields n (source, cshogi.Board): random-game positions, hand-heavy ones, random
    endgames (a quarter with pieces left out) and handicap games' positions interleaved
    6 : 2 : 1 : 1, and the 593-move position every `most_moves_every` positions."""
    sources = {"random": random_positions(n, seed), "hand_heavy": hand_heavy_positions(n, seed + 1),
               "endgame": random_endgames(n, seed + 2), "handicap": handicap_positions(n, seed + 3)}
    for k in range(n):
        if k % most_moves_every == most_moves_every - 1:
            yield "most_moves", cshogi.Board(MOST_MOVES)
        else:
            source = MIXED_CYCLE[k % len(MIXED_CYCLE)]
            yield source, next(sources[source])


def records(boards, fmt, rng):
    """The boards as HCPE (fmt == manaka.shogi.HCPE) or PSV records, with a random legal move
    and result each: (records, the cshogi moves)."""
    from manaka.shogi import HCPE  # the format codes of manaka.shogi.open_records
    arr = np.zeros(len(boards), cshogi.HuffmanCodedPosAndEval if fmt == HCPE else cshogi.PackedSfenValue)
    moves = []
    for i, board in enumerate(boards):
        legal = list(board.legal_moves)
        moves.append(legal[int(rng.integers(len(legal)))])
        if fmt == HCPE:
            board.to_hcp(arr["hcp"][i])
            arr["bestMove16"][i] = cshogi.move16(moves[-1])
            arr["gameResult"][i] = int(rng.integers(0, 3))
        else:
            board.to_psfen(arr["sfen"][i])
            arr["move"][i] = cshogi.move16_to_psv(cshogi.move16(moves[-1]))
            arr["game_result"][i] = int(rng.integers(-1, 2))
    return arr, moves


def make_records(n, seed):
    """cshogi boards with a random legal move, result and evaluation, as HCPE and PSV: the
    positions of random games, hand-heavy ones (hundreds of legal moves), endgames and
    handicap games (pieces left out), and the 593-move position every 100."""
    rng = np.random.default_rng(seed)
    hcpe = np.zeros(n, cshogi.HuffmanCodedPosAndEval)
    psv = np.zeros(n, cshogi.PackedSfenValue)
    boards = []
    for i, (_, board) in enumerate(mixed_positions(n, seed, most_moves_every=100)):
        move = list(board.legal_moves)[int(rng.integers(len(list(board.legal_moves))))]
        board.to_hcp(hcpe["hcp"][i])
        board.to_psfen(psv["sfen"][i])
        hcpe["bestMove16"][i] = cshogi.move16(move)
        psv["move"][i] = cshogi.move16_to_psv(cshogi.move16(move))
        hcpe["eval"][i] = psv["score"][i] = int(rng.integers(-3000, 3000))
        hcpe["gameResult"][i] = int(rng.integers(0, 3))
        psv["game_result"][i] = int(rng.integers(-1, 2))
        psv["gamePly"][i] = i
        boards.append((board.copy(), move))
    return boards, hcpe, psv
