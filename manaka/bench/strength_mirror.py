"""Left-right mirrored HCPE records (files 1..9 -> 9..1): a symmetry of shogi's rules, so a
mirrored record is another legal position with its engine move mirrored (same evaluation,
same result). Written with cshogi, to measure what the mirror buys as data augmentation:

    python -m manaka.bench.strength_mirror train.hcpe train-mirrored.hcpe [--both]

(--both: the original records followed by their mirrors, game by game, and a .games file.)
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from ..atomic_file import atomic_write


def mirror_sfen(sfen: str) -> str:
    """The SFEN of the position with files mirrored (each rank's row read backwards)."""
    board, rest = sfen.split(" ", 1)
    rows = []
    for row in board.split("/"):
        cells, i = [], 0
        while i < len(row):
            if row[i] == "+":
                cells.append(row[i:i + 2])
                i += 2
            else:
                cells.append(row[i])
                i += 1
        rows.append("".join(reversed(cells)))
    return "/".join(rows) + " " + rest


def mirror_usi(usi: str) -> str:
    """A USI move with its files mirrored (7g7f -> 3g3f, P*5e -> P*5e, 2b8h+ -> 8b2h+)."""
    def f(sq: str) -> str:
        return str(10 - int(sq[0])) + sq[1]
    if usi[1] == "*":
        return usi[:2] + f(usi[2:4])
    return f(usi[0:2]) + f(usi[2:4]) + usi[4:]


def mirror_records(records: np.ndarray) -> np.ndarray:
    import cshogi

    recs = records.view(cshogi.HuffmanCodedPosAndEval).reshape(-1)
    out = recs.copy()
    board = cshogi.Board()
    for i, r in enumerate(recs):
        board.set_hcp(r["hcp"])
        move = cshogi.move_to_usi(board.move_from_move16(int(r["bestMove16"])))
        mirrored = cshogi.Board(mirror_sfen(board.sfen()))
        m = mirrored.move_from_usi(mirror_usi(move))
        if not mirrored.is_legal(m):
            raise ValueError(f"record {i}: the mirrored move {mirror_usi(move)} is not legal in the mirrored position")
        mirrored.to_hcp(out["hcp"][i])
        out["bestMove16"][i] = cshogi.move16(m)
    return out.view(np.uint8).reshape(len(out), 38)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m manaka.bench.strength_mirror", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--both", action="store_true", help="each game followed by its mirror (needs SRC.games)")
    a = p.parse_args(argv)
    records = np.fromfile(a.src, np.uint8)
    records = records[:len(records) // 38 * 38].reshape(-1, 38)
    mirrored = mirror_records(records)
    if a.both:
        with open(a.src + ".games") as f:
            counts = [int(x) for x in f.read().split()]
        starts = np.concatenate([[0], np.cumsum(counts)])
        parts = []
        for g in range(len(counts)):
            parts += [records[starts[g]:starts[g + 1]], mirrored[starts[g]:starts[g + 1]]]
        data, games = np.concatenate(parts), [c for c in counts for _ in (0, 1)]
        with atomic_write(a.dst + ".games") as f:
            f.write("".join(f"{c}\n" for c in games).encode())
    else:
        data = mirrored
    with atomic_write(a.dst) as f:
        f.write(data.tobytes())
    print(f"wrote {len(data):,} records to {a.dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
