"""``python -m manaka.bench play --model m.manaka``: a trained model's playing strength, as
matches of its USI engine (python -m manaka.shogi usi) against the heuristic player and
against Fairy-Stockfish at small fixed node counts; W/D/L and Elo with a 95 % interval per
match (python -m manaka.shogi match; docs/shogi.md, "Playing").

Each search (--searches) plays each opponent; the model's engine gets --manaka-go per move
(default a byoyomi), Fairy-Stockfish ``go nodes N`` for each N in --fsf-nodes, the heuristic
the same byoyomi (it answers at once). Games alternate colours from random openings.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import time

from ..shogi.match import Clock, Player, run_match, summary, summary_line
from ..shogi.usi_client import EngineError
from .timing import OUT_HELP, note_resources, write_results

FSF = "/usr/games/fairy-stockfish"


def _ints(text: str):
    return [int(x) for x in text.split(",") if x.strip()]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m manaka.bench play", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="the model file to measure")
    p.add_argument("--games", type=int, default=20, help="games per match (default 20)")
    p.add_argument("--searches", default="policy,value,puct", help="the engine's searches to measure (default all)")
    p.add_argument("--manaka-go", default="btime 0 wtime 0 byoyomi 300",
                   help="go arguments for the model's engine (default 'btime 0 wtime 0 byoyomi 300')")
    p.add_argument("--threads", type=int, default=1, help="CPU threads of the model's engine (default 1)")
    p.add_argument("--heuristic", action=argparse.BooleanOptionalAction, default=True,
                   help="play the heuristic player (default yes)")
    p.add_argument("--fsf", default=FSF, help=f"Fairy-Stockfish's command (default {FSF}; '' to skip it)")
    p.add_argument("--fsf-nodes", type=_ints, default=[1, 10, 100], help="its node counts (default 1,10,100)")
    p.add_argument("--openings", default="6-12", help="random opening plies (default 6-12)")
    p.add_argument("--max-plies", type=int, default=256, help="a draw after this many plies (default 256)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tag", default="cpu", help="results are play-<tag>.md / .json (default cpu)")
    p.add_argument("--out", help=OUT_HELP)
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if not os.path.exists(args.model):
        print(f"bench play: no model file {args.model!r}", file=sys.stderr)
        return 2
    from ..model import Model
    from ..shogi.position import model_encoding
    try:  # a model its engine would refuse is refused here, before any match
        model_encoding(Model.load(args.model), repr(args.model))
    except (ValueError, OSError, MemoryError) as e:
        print(f"bench play: {e}", file=sys.stderr)
        return 2
    low, _, high = args.openings.partition("-")
    openings = (int(low), int(high or low))
    python = shlex.quote(sys.executable)
    opponents = []
    if args.heuristic:
        opponents.append(Player(f"{python} -m manaka.shogi heuristic --seed {args.seed}", "heuristic"))
    if args.fsf:
        if not os.path.exists(shlex.split(args.fsf)[0]):
            print(f"bench play: {args.fsf!r} not found; skipping Fairy-Stockfish", file=sys.stderr)
        else:
            opponents += [Player(args.fsf, f"fsf-nodes{n}", (), f"nodes {n}") for n in args.fsf_nodes]
    results, lines = [], []
    clock = Clock(byoyomi=1000, move_timeout=60.0)
    for search in [s for s in args.searches.split(",") if s]:
        me = Player(f"{python} -m manaka.shogi usi --model {shlex.quote(args.model)} --search {search} "
                    f"--threads {args.threads}", f"manaka-{search}", (), args.manaka_go)
        for opponent in opponents:
            started = time.monotonic()
            try:
                records = run_match(me, opponent, args.games, clock, openings, args.max_plies, args.seed,
                                    report=None)
            except EngineError as e:  # an engine that cannot play: one line, as the match runner says it
                print(f"bench play: {e}", file=sys.stderr)
                return 1
            s = summary(me, opponent, records)
            s["seconds"] = round(time.monotonic() - started, 1)
            s["manaka_go"], s["opponent_go"] = args.manaka_go, opponent.go or "byoyomi 1000"
            results.append(s)
            lines.append(summary_line(s) + f"; {s['seconds']:.0f} s")
            print(lines[-1], flush=True)
    payload = {"model": os.path.abspath(args.model), "games": args.games, "openings": args.openings,
               "max_plies": args.max_plies, "matches": results,
               "command": "python -m manaka.bench play " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))}
    for s in results:
        for k in ("elo", "elo_low", "elo_high"):
            if abs(s[k]) == float("inf"):
                s[k] = "inf" if s[k] > 0 else "-inf"
    note_resources(lines, payload, "matches under a time limit depend on the load; node limits do not")
    path = write_results("play", args.tag, payload, lines, args.out)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
