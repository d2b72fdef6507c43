"""Checks manaka's shogi rules against cshogi on N random-game positions:
``nice python tools/shogi_oracle.py 100000 [--seed S]``.

For every position of random games (moves biased towards captures, checks, drops and
promotions, as in tests/shogi_reference.py): the legal moves as USI, their dlshogi labels
and the tokens must equal cshogi's (the tokens from the specification over cshogi's
board). Prints the totals and the first disagreements; exits 1 if there is any."""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import shogi_reference as ref  # noqa: E402

from manaka import _core  # noqa: E402
from manaka.shogi import move_to_usi  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int, help="positions")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    start, moves, bad, checks, drops = time.time(), 0, 0, 0, 0
    for k, board in enumerate(ref.random_positions(args.n, args.seed)):
        if k and k % 50_000 == 0:
            print(f"{k:,} positions, {moves:,} legal moves, {bad} disagreement(s), {time.time() - start:.0f} s",
                  flush=True)
        cells, hand, side = ref.c_position(board)
        status, got, labels, tokens = _core.shogi_analyse(cells, hand, side)
        want = sorted(ref.cshogi.move_to_usi(m) for m in board.legal_moves)
        moves += len(want)
        checks += board.is_check()
        drops += any(u[1] == "*" for u in want)
        ok = (status == 0 and sorted(move_to_usi(int(m)) for m in got) == want
              and np.array_equal(np.sort(labels), ref.labels(board)) and np.array_equal(tokens, ref.tokens(board)))
        if not ok:
            bad += 1
            if bad <= 10:
                print(f"DISAGREE: {board.sfen()}")
    print(f"{args.n:,} positions (seed {args.seed}), {moves:,} legal moves, {checks:,} in check, "
          f"{drops:,} with drops: {bad} disagreement(s), {time.time() - start:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
