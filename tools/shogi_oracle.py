"""Checks manaka's shogi rules against cshogi on N positions:
``nice python tools/shogi_oracle.py 100000 [--seed S]``.

The positions come from four sources, interleaved (6 : 2 : 1 : 1), plus the 593-move
position every 1,000 (tests/helpers/shogi_reference.py, mixed_positions):
- random games whose moves favour captures, checks, drops and promotions;
- hand-heavy positions: random games with captures 60 times likelier and drops 20 times
  rarer, from 20 pieces in hand on (most legal moves: half have more than 256);
- random endgames: kings and a few pieces on the board, the rest in hand, a quarter of
  them with pieces left out of the game;
- random games from each standard handicap start (pieces left out).
For every position the legal moves as USI, their dlshogi labels and the tokens must equal
cshogi's (the tokens from the specification over cshogi's board). The same positions then
go through the producers' path: cshogi writes each as an HCPE and a PSV record (with a
random legal move and game result), and ``_core.shogi_decode`` must give cshogi's board,
hands, side to move, move and result, and ``_core.shogi_rows`` (decoding, validation, the
legal labels, the played move's index, the tokens and the value, as a loader producer
computes them) the same sorted labels and tokens, the index of the recorded move's label
and the result for the side to move. The rows are made in calls of a random number of
records (1 to 2,000), so that one call's label buffer also grows from small sizes. Prints
the totals and the first disagreements; exits 1 if there is any."""
import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "helpers"))
sys.path.insert(0, ROOT)  # this checkout's manaka
import shogi_reference as ref  # noqa: E402

from manaka import _core  # noqa: E402
from manaka.shogi import move_to_usi  # noqa: E402

CHUNK = 2000  # the most positions per call of the producers' path


class RowCheck:
    """Positions with what the producers must make of them, checked a chunk at a time."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed + 1_000_003)
        self.pending = []
        self.checked, self.calls = 0, 0
        self.chunk = self.next_chunk()

    def next_chunk(self) -> int:
        """The size of the next call: 1 to 4 records a quarter of the time, else up to CHUNK."""
        return int(self.rng.integers(1, 5) if self.rng.random() < 0.25 else self.rng.integers(1, CHUNK + 1))

    def full(self) -> bool:
        return len(self.pending) >= self.chunk

    def add(self, board, labels, tokens):
        moves = list(board.legal_moves)
        move = moves[int(self.rng.integers(len(moves)))]
        result = int(self.rng.integers(0, 3))  # HCPE: 0 draw, 1 Black won, 2 White won
        self.pending.append((board.copy(), move, result, labels, tokens))

    def flush(self) -> list:
        """Checks the pending positions; returns the SFENs that disagree."""
        if not self.pending:
            return []
        n = len(self.pending)
        hcpe = np.zeros(n, ref.cshogi.HuffmanCodedPosAndEval)
        psv = np.zeros(n, ref.cshogi.PackedSfenValue)
        for i, (board, move, result, _, _) in enumerate(self.pending):
            board.to_hcp(hcpe["hcp"][i])
            board.to_psfen(psv["sfen"][i])
            hcpe["bestMove16"][i] = ref.cshogi.move16(move)
            psv["move"][i] = ref.cshogi.move16_to_psv(ref.cshogi.move16(move))
            hcpe["gameResult"][i] = result
            turn = board.turn
            psv["game_result"][i] = 0 if result == 0 else (1 if (result == 1) == (turn == 0) else -1)
        bad = []
        for fmt, arr in ((0, hcpe), (1, psv)):
            raw = arr.view(np.uint8).reshape(n, -1)
            cells, hands, sides, move16, _, results, decoded = _core.shogi_decode(fmt, raw)
            tok, off, lab, target, value, status = _core.shogi_rows(fmt, raw, 0.0)
            for i, (board, move, result, labels, tokens) in enumerate(self.pending):
                played = ref.cshogi.dlshogi.make_move_label(move, board.turn)
                want_value = 0.5 if result == 0 else float((result == 1) == (board.turn == 0))
                want_cells, want_hand, turn = ref.c_position(board)
                row = lab[off[i]:off[i + 1]]
                ok = (status[i] == 0 and np.array_equal(row, labels) and np.array_equal(tok[i], tokens)
                      and target[i] == int(np.searchsorted(labels, played)) and value[i] == want_value
                      and decoded[i] == 0 and bytes(cells[i]) == want_cells
                      and bytes(hands[i].reshape(-1)) == want_hand and sides[i] == turn
                      and move16[i] == ref.cshogi.move16(move) and results[i] == want_value)
                if not ok:
                    bad.append(f"{'HCPE' if fmt == 0 else 'PSV'} row: {board.sfen()}")
        self.checked += n
        self.calls += 1
        self.pending = []
        self.chunk = self.next_chunk()
        return bad


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int, help="positions")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    start, moves, bad, checks, drops = time.time(), 0, 0, 0, 0
    per_source, most, over_256, short = {}, 0, 0, 0
    rows = RowCheck(args.seed)

    def report(lines):
        nonlocal bad
        for line in lines:
            bad += 1
            if bad <= 10:
                print(f"DISAGREE: {line}", flush=True)

    for k, (source, board) in enumerate(ref.mixed_positions(args.n, args.seed)):
        if k and k % 50_000 == 0:
            print(f"{k:,} positions, {moves:,} legal moves, {bad} disagreement(s), {time.time() - start:.0f} s",
                  flush=True)
        cells, hand, side = ref.c_position(board)
        status, got, labels, tokens = _core.shogi_analyse(cells, hand, side)
        want = sorted(ref.cshogi.move_to_usi(m) for m in board.legal_moves)
        want_labels, want_tokens = ref.labels(board), ref.tokens(board)
        moves += len(want)
        checks += board.is_check()
        drops += any(u[1] == "*" for u in want)
        per_source[source] = per_source.get(source, 0) + 1
        most = max(most, len(want))
        over_256 += len(want) > 256
        short += sum(1 for p in board.pieces if p) + sum(map(sum, board.pieces_in_hand)) < 40
        ok = (status == 0 and sorted(move_to_usi(int(m)) for m in got) == want
              and np.array_equal(np.sort(labels), want_labels) and np.array_equal(tokens, want_tokens))
        if not ok:
            report([f"{source}: {board.sfen()}"])
        rows.add(board, want_labels, want_tokens)
        if rows.full():
            report(rows.flush())
    report(rows.flush())
    sources = ", ".join(f"{v:,} {k}" for k, v in per_source.items())
    print(f"{args.n:,} positions (seed {args.seed}: {sources}), {moves:,} legal moves (at most {most}; "
          f"{over_256:,} positions with more than 256), {checks:,} in check, {drops:,} with drops, {short:,} with "
          f"pieces left out; {rows.checked:,} positions also as HCPE and PSV records in {rows.calls:,} calls: "
          f"{bad} disagreement(s), {time.time() - start:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
