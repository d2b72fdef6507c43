"""Game records to HCPE: ``python -m manaka.shogi convert OUT.hcpe RECORDS...``.

CSA (``.csa``, one or more games per file) and KIF (``.kif``, ``.kifu``) files are parsed
by cshogi (``pip install cshogi``, the ``manaka[shogi]`` extra); every position of every
game becomes one HCPE record: the position, the move played, the game's result (an
unfinished game or a draw: 0), eval 0. cshogi's parsers are known to crash the process on
some valid files, so they run in child processes, a batch of files each; a batch whose
child dies is redone one file per child, and the file that kills its child is reported and
skipped instead of ending the conversion.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Dict, List, Tuple

import numpy as np

__all__ = ["convert", "main"]

BATCH = 64
# The child that parses a batch of files (a list of paths as JSON on stdin, results on stdout).
CHILD = [sys.executable, "-m", "manaka.shogi.convert", "--parse-child"]


def _parse(paths: List[str]) -> List[Dict]:
    """Parses files in this process: [{"file", "games": [{"sfen", "moves", "win"}] or "error"}]."""
    import cshogi.CSA
    import cshogi.KIF

    out = []
    for path in paths:
        try:
            if path.lower().endswith(".csa"):
                games = cshogi.CSA.Parser.parse_file(path)
            else:
                games = [cshogi.KIF.Parser.parse_file(path)]
            out.append({"file": path, "games": [{"sfen": g.sfen, "moves": [int(m) for m in g.moves],
                                                 "win": int(g.win or 0)} for g in games]})
        except Exception as e:  # a parse error is reported per file
            out.append({"file": path, "error": f"{type(e).__name__}: {e}"})
    return out


def _parse_isolated(paths: List[str]) -> Tuple[List[Dict], List[str]]:
    """Parses in a child process; (results, files whose child crashed)."""
    child = subprocess.run(CHILD, input=json.dumps(paths), capture_output=True, text=True)
    if child.returncode == 0:
        return json.loads(child.stdout), []
    if len(paths) == 1:
        return [], paths
    results, crashed = [], []
    for p in paths:
        r, c = _parse_isolated([p])
        results += r
        crashed += c
    return results, crashed


def convert(out: str, inputs: List[str], log=print) -> Dict[str, int]:
    """Writes every position of the games in `inputs` to the HCPE file `out`; returns counts."""
    import cshogi

    files = []
    for p in inputs:
        if os.path.isdir(p):
            files += sorted(os.path.join(p, f) for f in os.listdir(p)
                            if f.lower().endswith((".csa", ".kif", ".kifu")))
        else:
            files.append(p)
    bad = [f for f in files if not f.lower().endswith((".csa", ".kif", ".kifu"))]
    if bad:
        raise ValueError(f"shogi convert: {bad[0]!r} is not a .csa, .kif or .kifu file")
    counts = {"files": len(files), "games": 0, "positions": 0, "failed_files": 0, "crashed_files": 0}
    with open(out, "wb") as f:
        for start in range(0, len(files), BATCH):
            results, crashed = _parse_isolated(files[start:start + BATCH])
            for path in crashed:
                log(f"shogi convert: {path}: cshogi's parser crashed on it; skipped")
            counts["crashed_files"] += len(crashed)
            for r in results:
                if "error" in r:
                    log(f"shogi convert: {r['file']}: {r['error']}; skipped")
                    counts["failed_files"] += 1
                    continue
                for game in r["games"]:
                    board = cshogi.Board(game["sfen"])
                    records = np.zeros(len(game["moves"]), cshogi.HuffmanCodedPosAndEval)
                    n = 0
                    for move in game["moves"]:
                        if not board.is_legal(move):
                            log(f"shogi convert: {r['file']}: move {n + 1} is not legal; the game is cut there")
                            break
                        board.to_hcp(records["hcp"][n])
                        records["bestMove16"][n] = cshogi.move16(move)
                        records["gameResult"][n] = game["win"] if game["win"] in (1, 2) else 0
                        board.push(move)
                        n += 1
                    records[:n].tofile(f)
                    counts["games"] += 1
                    counts["positions"] += n
    return counts


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--parse-child"]:
        json.dump(_parse(json.loads(sys.stdin.read())), sys.stdout)
        return 0
    parser = argparse.ArgumentParser(prog="python -m manaka.shogi convert", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="the HCPE file to write")
    parser.add_argument("records", nargs="+", help=".csa / .kif / .kifu files or folders of them")
    args = parser.parse_args(argv)
    try:
        import cshogi  # noqa: F401
    except ImportError:
        print("python -m manaka.shogi convert: needs cshogi (pip install 'manaka[shogi]')", file=sys.stderr)
        return 2
    try:
        counts = convert(args.out, args.records, log=lambda line: print(line, file=sys.stderr))
    except (ValueError, OSError) as e:
        print(f"python -m manaka.shogi convert: {e}", file=sys.stderr)
        return 2
    print(f"wrote {counts['positions']:,} positions of {counts['games']:,} games from {counts['files']:,} files "
          f"to {args.out} ({counts['failed_files']} unreadable, {counts['crashed_files']} crashed the parser)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
