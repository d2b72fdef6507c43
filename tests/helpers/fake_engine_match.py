"""A tiny USI engine for the match runner's tests, independent of manaka (moves from cshogi):
``python fake_engine_match.py MODE [SEED]``. MODE: random (a uniformly random legal move),
first (the first legal move), resign (always resigns), illegal (a move that is never legal
at the start: 5e5d), hang (never answers go), crash (exits on go), slow (answers after 2 s),
win (declares a win by entering king at once), flood (answers go with info lines without
end, never bestmove), flood-usi (answers usi with other lines without end, never usiok),
wrapper (like a wrapper script whose engine hangs: at isready it starts a process that keeps
its stdout and stderr open for 20 s, and never answers), no-newline (answers usi with output
that has no line end, without end, on stdout and stderr)."""
import random
import subprocess
import sys
import time

import cshogi

mode = sys.argv[1]
rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
board = cshogi.Board()
for line in sys.stdin:
    words = line.split()
    if not words:
        continue
    if words[0] == "usi" and mode == "flood-usi":
        while True:
            print("this is not usiok", flush=True)
    if words[0] == "usi" and mode == "no-newline":
        while True:
            sys.stdout.write("x" * 65536)
            sys.stderr.write("y" * 65536)
    if words[0] == "usi":
        print(f"id name fake-{mode}\nid author tests\nusiok", flush=True)
    elif words[0] == "isready" and mode == "wrapper":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(20)"], stdin=subprocess.DEVNULL)
        print(f"child {child.pid}", file=sys.stderr, flush=True)
        time.sleep(600)
    elif words[0] == "isready":
        print("readyok", flush=True)
    elif words[0] == "position":
        board.set_position(line.strip()[len("position "):])
    elif words[0] == "go":
        moves = list(board.legal_moves)
        if mode == "crash":
            sys.exit(3)
        if mode == "hang":
            continue
        if mode == "flood":
            while True:
                print("info depth 1 nodes 1 score cp 0 pv 7g7f", flush=True)
        if mode == "slow":
            time.sleep(2)
        if mode == "resign" or not moves:
            answer = "resign"
        elif mode == "win":
            answer = "win"
        elif mode == "illegal":
            answer = "5e5d"
        elif mode == "first":
            answer = cshogi.move_to_usi(moves[0])
        else:
            answer = cshogi.move_to_usi(rng.choice(moves))
        print(f"info depth 1 nodes 1\nbestmove {answer}", flush=True)
    elif words[0] == "quit":
        break
