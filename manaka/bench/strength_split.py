"""Train / held-out split of HCPE game files BY GAME (positions of one game are correlated:
a split by position flatters every model).

Each ``x.hcpe`` comes with ``x.hcpe.games``, the number of positions of each game in order
(one integer a line), as ``python -m manaka.shogi selfplay`` and the engine-game generators
write them. Only whole games are read: a file still being appended to is cut at the last
game its .games file lists (and that its bytes hold). Every `every`-th game (the last of
each run of `every`) is held out, so both sets span the whole generation.

    python -m manaka.bench.strength_split a.hcpe b.hcpe --out /work/data/split --every 10
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import List, Sequence, Tuple

import numpy as np

from ..atomic_file import atomic_write

RECORD = 38


def read_games(path: str) -> List[int]:
    """The whole games of `path` (their position counts) that its bytes hold."""
    games_path = path + ".games"
    try:
        with open(games_path) as f:
            counts = [int(line) for line in f.read().split()]
    except FileNotFoundError:
        raise ValueError(f"{games_path}: missing (needed to split {path} by game)") from None
    except ValueError as e:
        raise ValueError(f"{games_path}: not one integer a line ({e})") from None
    if any(c < 1 for c in counts):
        raise ValueError(f"{games_path}: a game of fewer than 1 position")
    have = os.path.getsize(path) // RECORD
    kept, total = [], 0
    for c in counts:
        if total + c > have:
            break
        kept.append(c)
        total += c
    return kept


def split(paths: Sequence[str], every: int = 10, max_games: int = 0) -> Tuple[list, list, dict]:
    """([(records, game counts)] train, same for held-out, summary)."""
    if every < 2:
        raise ValueError(f"every must be >= 2, got {every}")
    train, held = [], []
    summary = {"files": {}, "every": every}
    for path in paths:
        counts = read_games(path)
        if max_games:
            counts = counts[:max_games]
        n = sum(counts)
        records = np.fromfile(path, np.uint8, count=n * RECORD).reshape(n, RECORD)
        starts = np.concatenate([[0], np.cumsum(counts)])
        t_rows, h_rows, t_games, h_games = [], [], [], []
        for g, c in enumerate(counts):
            rows = records[starts[g]:starts[g + 1]]
            if g % every == every - 1:
                h_rows.append(rows), h_games.append(c)
            else:
                t_rows.append(rows), t_games.append(c)
        train.append((t_rows, t_games))
        held.append((h_rows, h_games))
        summary["files"][path] = {"games": len(counts), "positions": n, "train_games": len(t_games),
                                  "train_positions": int(sum(t_games)), "held_games": len(h_games),
                                  "held_positions": int(sum(h_games))}
    for name, part in (("train", train), ("held", held)):
        summary[f"{name}_games"] = sum(len(g) for _, g in part)
        summary[f"{name}_positions"] = int(sum(sum(g) for _, g in part))
    return train, held, summary


def write(part, path: str) -> None:
    rows = [r for rs, _ in part for r in rs]
    games = [c for _, gs in part for c in gs]
    data = np.concatenate(rows) if rows else np.zeros((0, RECORD), np.uint8)
    with atomic_write(path) as f:
        f.write(data.tobytes())
    with atomic_write(path + ".games") as f:
        f.write("".join(f"{c}\n" for c in games).encode())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m manaka.bench.strength_split", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("hcpe", nargs="+", help="HCPE files, each with its .games file")
    p.add_argument("--out", required=True, help="folder for train.hcpe, held.hcpe (+ .games) and split.json")
    p.add_argument("--every", type=int, default=10, help="hold out one game in this many (default 10)")
    p.add_argument("--max-games", type=int, default=0, help="at most this many games of each file (0: all)")
    p.add_argument("--prefix", default="", help="prefix of the output names")
    a = p.parse_args(argv)
    try:
        train, held, summary = split(a.hcpe, a.every, a.max_games)
    except (ValueError, OSError) as e:
        print(f"strength_split: {e}", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    write(train, os.path.join(a.out, a.prefix + "train.hcpe"))
    write(held, os.path.join(a.out, a.prefix + "held.hcpe"))
    with atomic_write(os.path.join(a.out, a.prefix + "split.json")) as f:
        f.write(json.dumps(summary, indent=1).encode())
    print(f"train: {summary['train_games']} games, {summary['train_positions']:,} positions; "
          f"held-out: {summary['held_games']} games, {summary['held_positions']:,} positions -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
