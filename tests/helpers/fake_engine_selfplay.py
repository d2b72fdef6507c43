"""A tiny USI engine for the self-play tests (cshogi plays the moves), with fault modes.

Run as ``python fake_engine_selfplay.py [--illegal-at N] [--resign-at N] [--crash-at N]
[--hang-at N] [--win-at N] [--lose-score-at N] [--no-variant-option]``: N counts the
``go`` commands this process has answered (1 = the first). Its move and score are a pure
function of the position (``choose``), so a test can say what it must have played:
a mate in one when there is one (score ``mate 1``), else a seeded choice that favours
captures (score ``cp`` from the same seed). It offers a ``UCI_Variant`` option like
Fairy-Stockfish does and refuses to think until it is set to shogi; with
``--no-variant-option`` it offers none and exits if it is set anyway. ``--stateful`` adds
the number of games the process has begun to its centipawn scores, as an engine that
keeps state across ``usinewgame`` would differ.
"""
import argparse
import sys
import time
import zlib

import cshogi


def choose(board):
    """(USI move, score words) of this engine in `board` (a cshogi.Board)."""
    # cshogi's mate search assumes the side to move is not in check (it can answer an
    # illegal move there)
    mate = 0 if board.is_check() else board.mate_move_in_1ply()
    if mate and board.is_legal(mate):
        return cshogi.move_to_usi(mate), "mate 1"
    seed = zlib.crc32(board.sfen().rsplit(" ", 1)[0].encode())
    moves = sorted(board.legal_moves, key=cshogi.move_to_usi)
    captures = [m for m in moves if board.piece(cshogi.move_to(m))]
    pool = captures if captures and seed % 4 else moves
    return cshogi.move_to_usi(pool[seed % len(pool)]), f"cp {seed % 1601 - 800}"


def main():
    p = argparse.ArgumentParser()
    for name in ("illegal", "resign", "crash", "hang", "win", "lose-score"):
        p.add_argument(f"--{name}-at", type=int, default=0)
    p.add_argument("--no-variant-option", action="store_true")
    p.add_argument("--stateful", action="store_true", help="add the games this process began to each cp score")
    args = p.parse_args()
    out = sys.stdout
    board, gos, variant, new_games = cshogi.Board(), 0, None, 0

    def say(line):
        out.write(line + "\n")
        out.flush()

    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        cmd = words[0]
        if cmd == "usi":
            say("id name FakeUSI")
            say("option name Hash type spin default 16 min 1 max 1024")
            if not args.no_variant_option:
                say("option name UCI_Variant type combo default chess var chess var shogi var xiangqi")
            say("usiok")
        elif cmd == "setoption":
            name = words[2] if len(words) > 2 else ""
            if name == "UCI_Variant":
                if args.no_variant_option:
                    print("fake: UCI_Variant was set but is not offered", file=sys.stderr)
                    sys.exit(4)
                variant = words[4] if len(words) > 4 else None
        elif cmd == "isready":
            say("readyok")
        elif cmd == "usinewgame":
            new_games += 1
        elif cmd == "position":
            board = cshogi.Board()
            if "moves" in words:
                for m in words[words.index("moves") + 1:]:
                    board.push_usi(m)
        elif cmd == "go":
            gos += 1
            if not args.no_variant_option and variant != "shogi":
                print(f"fake: UCI_Variant is {variant!r}, not shogi", file=sys.stderr)
                sys.exit(5)
            if gos == args.crash_at:
                print(f"fake: crashing at go {gos} as asked", file=sys.stderr)
                sys.stderr.flush()
                sys.exit(3)
            if gos == args.hang_at:
                time.sleep(3600)
            if gos == args.resign_at:
                say("bestmove resign")
                continue
            if gos == args.win_at:
                say("bestmove win")
                continue
            move, score = choose(board)
            if args.stateful and score.startswith("cp"):
                score = f"cp {int(score.split()[1]) + new_games}"
            if gos == args.lose_score_at:
                score = "cp -5000"
            if gos == args.illegal_at:
                legal = {cshogi.move_to_usi(m) for m in board.legal_moves}
                move = next(f"{f}{r}{f}{s}" for f in range(1, 10) for r in "abcdefghi" for s in "abcdefghi"
                            if r != s and f"{f}{r}{f}{s}" not in legal)
            say(f"info depth 1 score {score} nodes 1 pv {move}")
            say(f"bestmove {move}")
        elif cmd == "quit":
            return


if __name__ == "__main__":
    main()
