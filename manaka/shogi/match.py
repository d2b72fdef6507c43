"""``python -m manaka.shogi match ENGINE_A ENGINE_B --games N [...]``: two USI engines play
each other; W/D/L and A's Elo difference over B with a 95 % interval (docs/shogi.md,
"Playing"; the interval is manaka/shogi/elo.py's).

Games come in pairs: each pair starts from the same random opening (a number of uniformly
random legal plies, seeded) with the colours swapped. The runner adjudicates with manaka's
own rules (manaka/shogi/game.py): mate, fourfold repetition (a draw, or a loss for
perpetual check), the ply limit (a draw), a declaration (``bestmove win``: a win when the
27-point rule allows it, else a loss), and a loss for an illegal move, a resignation, a
crash and a timeout. With a
clock (--time, --byoyomi, --inc) the runner keeps both clocks and sends them with each
``go``; a move that took longer than the time left plus the byoyomi plus --grace loses.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import List, Optional, Sequence, Tuple

from ..atomic_file import atomic_write, unwritable
from ..train import path_option
from .elo import elo_interval
from .game import Game, declaration_wins
from .position import usi_to_move
from .usi_client import EngineError, UsiEngine
from .usi_protocol import MAX_GO_VALUE

WIN, DRAW, LOSS = 1.0, 0.5, 0.0

__all__ = ["Player", "Clock", "GameRecord", "run_match", "random_opening", "adjudicate", "main"]


@dataclass
class Player:
    command: str
    name: str
    options: Sequence[str] = ()
    go: Optional[str] = None  # the whole ``go`` arguments, replacing the shared limits


@dataclass
class Clock:
    """Shared limits (milliseconds): main time, byoyomi, increment, nodes per move."""
    time: Optional[int] = None
    byoyomi: Optional[int] = None
    inc: Optional[int] = None
    nodes: Optional[int] = None
    grace: int = 200
    move_timeout: float = 60.0  # seconds, for a move without a clock

    @property
    def timed(self) -> bool:
        return self.time is not None or self.byoyomi is not None or self.inc is not None


@dataclass
class GameRecord:
    black: str            # "A" or "B"
    result: float         # for A: 1 win, 0.5 draw, 0 loss
    reason: str
    plies: int            # plies played, the opening's included
    opening: int          # of which random
    moves: List[str] = field(default_factory=list)


def adjudicate(game: Game) -> Optional[Tuple[float, str]]:
    """None while the game goes on, else (result for Black, reason): a side with no legal
    move loses (mate; shogi has no stalemate), and Game.repetition's sennichite."""
    if not game.legal_moves():
        return (LOSS if game.position.side == 0 else WIN), "mate"
    repeated = game.repetition()
    if repeated is None:
        return None
    winner, reason = repeated
    return (DRAW if winner is None else WIN if winner == 0 else LOSS), reason


def random_opening(rng: random.Random, plies: int, max_tries: int = 100) -> List[int]:
    """`plies` uniformly random legal moves (move16) from the start that do not end the game."""
    for _ in range(max_tries):
        game, moves = Game(), []
        for _ in range(plies):
            move = rng.choice(game.legal_moves())
            game.play(move)
            moves.append(move)
            if adjudicate(game) is not None:
                break
        else:
            return moves
    raise RuntimeError(f"match: no {plies}-ply opening that does not end the game in {max_tries} tries")


class _Seat:
    """An engine process for one player, restarted after it died or hung."""

    def __init__(self, player: Player, move_timeout: float):
        self.player, self.engine, self.move_timeout = player, None, move_timeout

    def ensure(self) -> UsiEngine:
        if self.engine is None or self.engine.proc.poll() is not None:
            self.discard()
            options = dict(o.partition("=")[::2] for o in self.player.options)
            self.engine = UsiEngine(self.player.command, options, timeout=self.move_timeout)
        return self.engine

    def discard(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None

    def settle(self) -> None:
        """After a timeout: stop it and swallow its late bestmove, else restart it."""
        try:
            self.engine.stop(2.0)
        except EngineError:
            self.discard()


# go arguments --go-a / --go-b may carry: each with an integer value and its least value.
# "infinite" and "ponder" are not among them: a match never sends stop or ponderhit, so such
# a search would only end at --move-timeout and lose the game.
GO_LIMITS = {"nodes": 1, "depth": 1, "movetime": 1, "mate": 1, "byoyomi": 0, "btime": 0, "wtime": 0,
             "binc": 0, "winc": 0}
GO_BOUNDS = tuple(k for k in GO_LIMITS if k not in ("binc", "winc"))  # the increments bound nothing


def go_args_problem(text: str) -> Optional[str]:
    """Why `text` cannot be sent after "go" as every move's limit, or None: each word a known
    limit followed by an integer at least its least value (up to 2^63 - 1, once each), and at
    least one of them bounding the search."""
    words, seen = text.split(), set()
    if not words:
        return "is empty: give a limit, e.g. 'nodes 100'"
    for i in range(0, len(words), 2):
        key = words[i]
        if key not in GO_LIMITS:
            return f"has {key!r} where a limit is expected (one of {', '.join(GO_LIMITS)})"
        if key in seen:
            return f"gives {key} twice"
        seen.add(key)
        value = words[i + 1] if i + 1 < len(words) else None
        if value is None or not value.lstrip("-").isdigit():
            return f"needs an integer after {key}, got {value!r}"
        if not GO_LIMITS[key] <= int(value) <= MAX_GO_VALUE:
            return f"needs {key} >= {GO_LIMITS[key]} (and below 2^63), got {value}"
    if not seen & set(GO_BOUNDS):
        return f"bounds no search (give one of {', '.join(GO_BOUNDS)})"
    return None


def _go_args(player: Player, clock: Clock, left: List[int]) -> str:
    """The go arguments for a move with `left` ms on the clocks."""
    if player.go is not None:
        return player.go
    # at most USI's 2^63 - 1: a main time near it grows past it by the increments
    ms = lambda v: min(v, MAX_GO_VALUE)
    words = []
    if clock.timed:
        words += [f"btime {ms(left[0])}", f"wtime {ms(left[1])}"]
        if clock.inc:
            words += [f"binc {ms(clock.inc)}", f"winc {ms(clock.inc)}"]
        else:
            words += [f"byoyomi {ms(clock.byoyomi or 0)}"]
    if clock.nodes is not None:
        words.append(f"nodes {ms(clock.nodes)}")
    return " ".join(words)


def play_game(seats: Sequence[_Seat], opening: List[int], clock: Clock, max_plies: int) -> Tuple[float, str, Game]:
    """One game, seats[0] Black; (result for Black, reason, the game)."""
    game = Game()
    for m in opening:
        game.play(m)
    engines = []
    for seat in seats:
        engine = seat.ensure()
        engine.new_game()
        engines.append(engine)
    left = [clock.time or 0, clock.time or 0]
    while True:
        ended = adjudicate(game)
        if ended is not None:
            return ended[0], ended[1], game
        if game.ply >= max_plies:
            return DRAW, "max plies", game
        side = game.position.side
        seat, engine = seats[side], engines[side]
        lose = WIN if side == 1 else LOSS  # Black's result when the side to move loses
        timed = clock.timed and seat.player.go is None
        limit = (left[side] + (clock.byoyomi or 0) + clock.grace) / 1000 if timed else clock.move_timeout
        sent = time.monotonic()
        try:
            answer, _ = engine.go(game.moves, _go_args(seat.player, clock, left), limit)
        except EngineError:
            if engine.proc.poll() is None:  # still running: it did not answer in time
                seat.settle()
                return lose, "timeout", game
            seat.discard()
            return lose, "engine died", game
        used = int((time.monotonic() - sent) * 1000)
        if timed:
            if used > left[side] + (clock.byoyomi or 0) + clock.grace:
                return lose, "timeout", game
            left[side] = max(0, left[side] - used) + (clock.inc or 0)
        if answer == "resign":
            return lose, "resign", game
        if answer == "win":
            if declaration_wins(game.position):
                return 1.0 - lose, "declaration", game
            return lose, "false declaration", game
        try:
            game.play(usi_to_move(answer))
        except ValueError:
            return lose, f"illegal move {answer}", game


def run_match(a: Player, b: Player, games: int, clock: Clock, openings: Tuple[int, int] = (8, 8),
              max_plies: int = 320, seed: int = 0, report=print,
              records: Optional[List[GameRecord]] = None) -> List[GameRecord]:
    """`games` games, A Black in the even ones; openings drawn per pair of games. ValueError
    when an opening may reach `max_plies`: such a game ends a draw before either engine
    moves, and would count in the score. Each finished game is appended to `records` (a new
    list when None), which is returned: a caller that passes its own list keeps the games
    played before an EngineError or a Ctrl-C."""
    if openings[1] >= max_plies:
        raise ValueError(f"match: openings of up to {openings[1]} random plies leave no ply to the engines "
                         f"under max_plies={max_plies}")
    rng = random.Random(seed)
    seats = {"A": _Seat(a, clock.move_timeout), "B": _Seat(b, clock.move_timeout)}
    records = [] if records is None else records
    try:
        opening: List[int] = []
        for g in range(games):
            if g % 2 == 0:
                opening = random_opening(rng, rng.randint(*openings))
            black, white = ("A", "B") if g % 2 == 0 else ("B", "A")
            result, reason, game = play_game([seats[black], seats[white]], opening, clock, max_plies)
            for seat, res in ((seats[black], result), (seats[white], 1.0 - result)):
                if seat.engine is not None:
                    try:
                        seat.engine.gameover({WIN: "win", LOSS: "lose", DRAW: "draw"}[res])
                    except EngineError:
                        seat.discard()
            record = GameRecord(black, result if black == "A" else 1.0 - result, reason, game.ply,
                                len(opening), list(game.moves))
            records.append(record)
            if report:
                w, d, l = tally(records)
                outcome = {1.0: f"{a.name} wins", 0.0: f"{b.name} wins", 0.5: "draw"}[record.result]
                report(f"game {g + 1}/{games}: {a.name if black == 'A' else b.name} Black: {outcome} "
                       f"({reason}, {record.plies} plies); A: +{w} ={d} -{l}", flush=True)
    finally:
        for seat in seats.values():
            seat.discard()
    return records


def tally(records: Sequence[GameRecord]) -> Tuple[int, int, int]:
    w = sum(r.result == 1.0 for r in records)
    d = sum(r.result == 0.5 for r in records)
    return w, d, len(records) - w - d


def summary(a: Player, b: Player, records: Sequence[GameRecord]) -> dict:
    w, d, l = tally(records)
    elo, low, high = elo_interval(w, d, l)
    reasons = {}
    for r in records:
        reasons[r.reason] = reasons.get(r.reason, 0) + 1
    return {"a": a.name, "b": b.name, "games": len(records), "wins": w, "draws": d, "losses": l,
            "score": (w + d / 2) / len(records) if records else None, "elo": elo, "elo_low": low, "elo_high": high,
            "reasons": reasons, "mean_plies": sum(r.plies for r in records) / max(1, len(records))}


def _fmt(x: float) -> str:
    return "inf" if x == float("inf") else "-inf" if x == float("-inf") else f"{x:+.0f}"


def summary_line(s: dict) -> str:
    return (f"{s['a']} vs {s['b']}: {s['games']} games, +{s['wins']} ={s['draws']} -{s['losses']} "
            f"(score {s['score']:.3f}), Elo {_fmt(s['elo'])} [{_fmt(s['elo_low'])}, {_fmt(s['elo_high'])}] "
            f"(95 %, Wilson-type trinomial interval); endings: "
            + ", ".join(f"{k} {v}" for k, v in sorted(s["reasons"].items())))


def _plies(text: str) -> Tuple[int, int]:
    low, _, high = text.partition("-")
    try:
        lo, hi = int(low), int(high or low)
    except ValueError:  # argparse would say "invalid _plies value"
        lo, hi = -1, -1
    if not 0 <= lo <= hi:
        raise argparse.ArgumentTypeError(f"expected PLIES or LOW-HIGH with 0 <= LOW <= HIGH, got {text!r}")
    return lo, hi


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m manaka.shogi match", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("engine_a", help="engine A's command, e.g. 'python -m manaka.shogi usi --model m.manaka'")
    p.add_argument("engine_b", help="engine B's command, e.g. /usr/games/fairy-stockfish")
    p.add_argument("--games", type=int, default=20, help="games (default 20; even: each opening with both colours)")
    p.add_argument("--name-a", help="A's name in reports (default: its command)")
    p.add_argument("--name-b", help="B's name in reports (default: its command)")
    g = p.add_argument_group("limits (shared; --go-a / --go-b replace them for one engine)")
    g.add_argument("--nodes", type=int, help="nodes per move (go nodes N)")
    g.add_argument("--time", type=int, metavar="MS", help="main time per side and game")
    g.add_argument("--byoyomi", type=int, metavar="MS", help="byoyomi per move (default 1000 when no limit is given)")
    g.add_argument("--inc", type=int, metavar="MS", help="Fischer increment per move (instead of byoyomi)")
    g.add_argument("--grace", type=int, default=200, metavar="MS",
                   help="delay tolerated beyond the clock before a move loses on time (default 200)")
    g.add_argument("--go-a", metavar="ARGS", help="A's own go arguments, e.g. 'nodes 100' (no clock for A)")
    g.add_argument("--go-b", metavar="ARGS", help="B's own go arguments")
    g.add_argument("--move-timeout", type=float, default=60.0, metavar="S",
                   help="seconds a move without a clock may take before it loses (default 60)")
    p.add_argument("--option-a", action="append", default=[], metavar="NAME=VALUE", help="setoption for A")
    p.add_argument("--option-b", action="append", default=[], metavar="NAME=VALUE", help="setoption for B")
    p.add_argument("--openings", type=_plies, default=(8, 8), metavar="PLIES",
                   help="random opening plies, N or LOW-HIGH (default 8)")
    p.add_argument("--max-plies", type=int, default=320, help="a draw after this many plies (default 320)")
    p.add_argument("--seed", type=int, default=0, help="openings seed (default 0)")
    p.add_argument("--json", type=path_option, metavar="PATH",
                   help="also write the summary and every game (moves in USI) here")
    p.add_argument("--force", action="store_true", help="replace the --json file if it exists")
    args = p.parse_args(argv)
    if args.games < 1:
        p.error("--games must be >= 1")
    # limits an engine would be sent as they are ("go nodes -5"), or that end every game at once
    for option, value, low in (("--nodes", args.nodes, 1), ("--time", args.time, 0), ("--byoyomi", args.byoyomi, 0),
                               ("--inc", args.inc, 0), ("--grace", args.grace, 0), ("--max-plies", args.max_plies, 1),
                               ("--seed", args.seed, 0)):
        if value is not None and value < low:
            p.error(f"{option} must be >= {low}, got {value}")
        if value is not None and value > MAX_GO_VALUE:  # what an engine reads (a signed 64-bit integer)
            p.error(f"{option} must be <= 2^63 - 1, got {value}")
    # every game must have an engine move: one over at the opening's end is a draw nobody played
    if args.openings[1] >= args.max_plies:
        p.error(f"--openings {args.openings[1]} random plies reach --max-plies {args.max_plies}: "
                "no ply would be left to the engines (give fewer opening plies or more --max-plies)")
    for option, value in (("--go-a", args.go_a), ("--go-b", args.go_b)):
        problem = go_args_problem(value) if value is not None else None
        if problem:
            p.error(f"{option} {value!r} {problem}")
    if not args.move_timeout > 0 or args.move_timeout == float("inf"):
        p.error(f"--move-timeout must be a finite number of seconds > 0, got {args.move_timeout}")
    # refused before the match, not once its games are played and would be lost
    if args.json and os.path.isdir(args.json):
        p.error(f"--json {args.json} is a folder; give a file path")
    if args.json and os.path.lexists(args.json) and not args.force:
        p.error(f"--json {args.json} exists; pass --force to replace it")
    if args.json and unwritable(args.json):
        p.error(f"--json {args.json} cannot be written: {unwritable(args.json)}")
    if args.nodes is None and args.time is None and args.byoyomi is None and args.inc is None:
        args.byoyomi = 1000
    # refused now, not as a traceback when the first game starts the engine
    for name, command in (("ENGINE_A", args.engine_a), ("ENGINE_B", args.engine_b)):
        try:
            if not shlex.split(command):
                p.error(f"{name} is an empty command")
        except ValueError as e:  # unbalanced quotes
            p.error(f"{name} {command!r}: {e}")
    # NAME=VALUE: a bare NAME would be set to the empty string, its default lost
    for option, values in (("--option-a", args.option_a), ("--option-b", args.option_b)):
        for value in values:
            if "=" not in value or not value.partition("=")[0].strip():
                p.error(f"{option} expects NAME=VALUE, got {value!r}")
    a = Player(args.engine_a, args.name_a or args.engine_a, args.option_a, args.go_a)
    b = Player(args.engine_b, args.name_b or args.engine_b, args.option_b, args.go_b)
    clock = Clock(args.time, args.byoyomi, args.inc, args.nodes, args.grace, args.move_timeout)
    records: List[GameRecord] = []
    code = 0
    try:
        run_match(a, b, args.games, clock, args.openings, args.max_plies, args.seed, records=records)
    except (EngineError, KeyboardInterrupt) as e:
        # the games already played are summarised and written, not lost with a traceback
        code = 130 if isinstance(e, KeyboardInterrupt) else 1
        why = "interrupted" if code == 130 else str(e)
        print(f"match: {why}; stopped after {len(records)} of {args.games} games"
              + (" (the summary below is theirs)" if records else ""), file=sys.stderr)
        if not records:
            return code
    s = summary(a, b, records)
    print(summary_line(s))
    if args.json:
        finite = {k: (_fmt(v) if isinstance(v, float) and abs(v) == float("inf") else v) for k, v in s.items()}
        try:
            with atomic_write(args.json) as f:
                f.write(json.dumps({"summary": finite, "games": [asdict(r) for r in records]}, indent=1).encode())
        except OSError as e:  # checked writable before the games; a full disk or a vanished folder since
            print(f"match: --json {args.json} could not be written ({e}); the summary above is the "
                  "match's result", file=sys.stderr)
            return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
