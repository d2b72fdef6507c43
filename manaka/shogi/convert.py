"""Game records to HCPE: ``python -m manaka.shogi convert OUT.hcpe RECORDS... [--force]``.

CSA (``.csa``, one or more games per file) and KIF (``.kif``, ``.kifu``; UTF-8 or cp932,
whatever the name) files are parsed by cshogi (``pip install cshogi``; the clone's ``pip install -e '.[shogi]'``); every position of every
game becomes one HCPE record: the position, the move played, the game's result (an
unfinished game or a draw: 0), eval 0. cshogi's parsers are known to crash the process on
some valid files, so they run in child processes, a batch of files each; a batch whose
child dies is redone one file per child, and the file that kills its child is reported and
skipped instead of ending the conversion.

The output is written through manaka's atomic writer: it appears only once the conversion
has succeeded, whole. It is refused, before anything is read, when it is one of the inputs
or looks like a game record (a .csa / .kif / .kifu name, or existing content that is not
HCPE), and an existing output is replaced only with ``--force``. A missing input is an
error; a conversion that yields no position writes nothing and fails. A game holding a move
that is not legal where it is played, or starting from a position that is not legal, is
left out whole, and reported (file, game, move); moves written after a CSA game's end
(cshogi keeps them) are dropped, and reported.
"""
from __future__ import annotations

import argparse
import errno
import json
import os
import re
import subprocess
import sys
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..atomic_file import atomic_write, unwritable
from .game import Game
from .position import move_to_usi

__all__ = ["convert", "main"]

BATCH = 64
# The child that parses a batch of files (a list of paths as JSON on stdin, results on stdout).
CHILD = [sys.executable, "-m", "manaka.shogi.convert", "--parse-child"]


def kif_text(path: str) -> str:
    """A KIF file's text, whatever its encoding: UTF-8 (with or without a byte-order mark),
    else cp932 (Shift-JIS, the format's original encoding). cshogi's own reader picks by the
    name (.kifu UTF-8, .kif cp932), and so failed on the UTF-8 .kif files today's programs
    write. Japanese text in cp932 is not valid UTF-8, so the first decoding that succeeds
    is the file's."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("cp932")


# A CSA move statement ("+7776FU"); statements of a line are separated by commas.
_CSA_MOVE = re.compile(r"[+-]\d{4}[A-Z]{2}")


def csa_moves_before_end(path: str) -> List[Optional[int]]:
    """For each game of a CSA file (games are separated by "/" lines): how many moves come
    before its first special move (%TORYO, %SENNICHITE, ...), or None when it has none.
    cshogi's parser keeps the moves written after the game's end; they are not the game."""
    with open(path, "rb") as f:
        text = f.read().decode("ascii", errors="replace")
    ends: List[Optional[int]] = []
    moves, end = 0, None
    for line in text.splitlines():
        if line.startswith("'"):  # a comment
            continue
        for statement in line.split(","):
            statement = statement.strip()
            if statement == "/":
                ends.append(end)
                moves, end = 0, None
            elif statement.startswith("%") and end is None:
                end = moves
            elif _CSA_MOVE.fullmatch(statement):
                moves += 1
    ends.append(end)
    return ends


def _parse(paths: List[str]) -> List[Dict]:
    """Parses files in this process: [{"file", "games": [{"sfen", "moves", "win"}] or "error"}]."""
    import cshogi.CSA
    import cshogi.KIF

    out = []
    for path in paths:
        try:
            if path.lower().endswith(".csa"):
                games = cshogi.CSA.Parser.parse_file(path)
                ends = csa_moves_before_end(path)
                if len(ends) != len(games):  # not split as cshogi split it: nothing to cut by
                    ends = [None] * len(games)
            else:
                games = [cshogi.KIF.Parser.parse_str(kif_text(path))]
                ends = [None]
            out.append({"file": path, "games": [{"sfen": g.sfen, "moves": [int(m) for m in g.moves][:end],
                                                 "after_end": max(0, len(g.moves) - end) if end is not None else 0,
                                                 "win": int(g.win or 0)} for g, end in zip(games, ends)]})
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


RECORD_SUFFIXES = (".csa", ".kif", ".kifu")
HCPE_SIZE = 38
USAGE = "the first argument is the HCPE file to write: convert OUT.hcpe RECORDS..."


def _record_files(inputs: List[str]) -> List[str]:
    """The record files named by `inputs` (files, or folders listed one level deep)."""
    files = []
    for p in inputs:
        if os.path.isdir(p):
            files += sorted(os.path.join(p, f) for f in os.listdir(p) if f.lower().endswith(RECORD_SUFFIXES))
        elif not os.path.exists(p):
            raise FileNotFoundError(errno.ENOENT, f"the record file {p!r} does not exist; nothing was written")
        elif not p.lower().endswith(RECORD_SUFFIXES):
            raise ValueError(f"{p!r} is not a .csa, .kif or .kifu file; nothing was written")
        else:
            files.append(p)
    if not files:
        raise ValueError(f"no .csa, .kif or .kifu file in {', '.join(map(repr, inputs))}; nothing was written")
    for p in files:  # a FIFO would block the parser reading it (a hang)
        if not os.path.isfile(p):
            raise ValueError(f"the record {p!r} is not a regular file (a folder, FIFO, socket or device); "
                             "nothing was written")
    return files


def _not_hcpe(path: str) -> str:
    """Why the existing file `path` is not an HCPE file ('' when it may be one). HCPE records
    are 38 bytes and binary: their padding byte (and any eval of 0) is a zero byte, which a
    game record (text) never holds."""
    size = os.path.getsize(path)
    if size % HCPE_SIZE:
        return f"{size:,} bytes, not a multiple of the {HCPE_SIZE}-byte HCPE record"
    with open(path, "rb") as f:
        head = f.read(4096)
    if head and b"\0" not in head:
        return "it holds text"
    return ""


def _check_output(out: str, inputs: List[str], files: List[str], force: bool) -> None:
    """Refuses an output that would destroy an input, a game record or, without `force`,
    an existing file: before anything is read or written."""
    real = os.path.realpath(out)
    if any(os.path.realpath(p) == real for p in list(inputs) + files):
        raise ValueError(f"the output {out!r} is also an input; {USAGE}; nothing was written")
    if out.lower().endswith(RECORD_SUFFIXES):
        raise ValueError(f"the output {out!r} is named as a game record, not an HCPE file; {USAGE}; "
                         "nothing was written")
    if os.path.isdir(out):
        raise IsADirectoryError(errno.EISDIR, f"the output {out!r} is a folder; {USAGE}")
    # a FIFO or device (never replaced), or a folder we may not write: refused now, before
    # _not_hcpe opens it (a FIFO blocked that open: a hang) and before every record is parsed
    problem = unwritable(out)
    if problem:
        raise PermissionError(errno.EACCES, f"the output {out!r} cannot be written: {problem}; nothing was written")
    if not os.path.exists(out):
        return
    why = _not_hcpe(out)
    if why:
        raise ValueError(f"the output {out!r} exists and is not an HCPE file ({why}); {USAGE}; "
                         "it was left untouched")
    if not force:
        raise FileExistsError(errno.EEXIST, f"the output {out!r} exists ({os.path.getsize(out) // HCPE_SIZE:,} "
                              "HCPE records); pass --force to replace it; it was left untouched")


def _start_refused(sfen: str) -> str:
    """Why manaka's C core refuses a game's starting position ('' when it accepts it). cshogi
    parses boards no game can reach (three kings, a pawn on the last rank) and encodes them
    into HCPE records that are another position or that the loader refuses; legal moves
    from an accepted position only reach accepted ones."""
    try:
        Game(sfen)
    except ValueError as e:
        return str(e)
    return ""


def _game_records(cshogi, game: Dict, where: str, log):
    """The HCPE records of one parsed game, or None when its starting position or a recorded
    move is not legal: the whole game is then left out. Its result belongs to the game as it
    was really played, which the record no longer shows from that move on (a corrupted or
    mis-parsed record, or an illegal move that ended the game), and HCPE has no code for an
    unknown result: a draw (0) would be a false label too."""
    refused = _start_refused(game["sfen"])
    if refused:
        log(f"shogi convert: {where}: the starting position is not legal ({refused}); "
            f"the game ({len(game['moves'])} moves) is left out")
        return None
    if game.get("after_end"):
        log(f"shogi convert: {where}: {game['after_end']} move(s) written after the game's end "
            f"(its %-line) are not part of it; the game's {len(game['moves'])} moves before it are kept")
    board = cshogi.Board(game["sfen"])
    records = np.zeros(len(game["moves"]), cshogi.HuffmanCodedPosAndEval)
    result = game["win"] if game["win"] in (1, 2) else 0
    for n, move in enumerate(game["moves"]):
        if not board.is_legal(move):
            # cshogi's parsers record a move they cannot read on that board as 0
            text = f"{move_to_usi(cshogi.move16(move))} " if cshogi.move16(move) else ""
            log(f"shogi convert: {where}: move {n + 1} {text}is not legal there; "
                f"the game ({len(game['moves'])} moves) is left out")
            return None
        board.to_hcp(records["hcp"][n])
        records["bestMove16"][n] = cshogi.move16(move)
        records["gameResult"][n] = result
        board.push(move)
    return records


def convert(out: str, inputs: List[str], log=print, force: bool = False) -> Dict[str, int]:
    """Writes every position of the games in `inputs` to the HCPE file `out`; returns counts.

    Raises FileNotFoundError for a missing input, ValueError (FileExistsError for an existing
    output without `force`, PermissionError for one that cannot be written: a FIFO or device,
    a folder without write access) for an output it refuses, before reading any record, and
    ValueError when no position was converted; `out` is then unchanged."""
    import cshogi

    files = _record_files(list(inputs))
    _check_output(out, inputs, files, force)
    counts = {"files": len(files), "games": 0, "positions": 0, "failed_files": 0, "crashed_files": 0,
              "left_out_games": 0}
    with atomic_write(out) as f:
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
                for k, game in enumerate(r["games"]):
                    where = f"{r['file']}: game {k + 1} of {len(r['games'])}"
                    records = _game_records(cshogi, game, where, log)
                    if records is None:
                        counts["left_out_games"] += 1
                        continue
                    # f.write, not records.tofile(f): numpy's tofile drops the error of a
                    # buffered write (a full disk under 4 KB) and the file came out short
                    f.write(records.tobytes())
                    counts["games"] += 1
                    counts["positions"] += len(records)
        if counts["positions"] == 0:  # raised inside the writer: no file, an old one kept
            raise ValueError(f"no position was converted from {counts['files']:,} files ({_summary(counts)}); "
                             f"{out!r} was not written")
    return counts


def _summary(counts: Dict[str, int]) -> str:
    return (f"{counts['failed_files']} unreadable, {counts['crashed_files']} crashed the parser, "
            f"{counts['left_out_games']} games left out for an illegal move or position")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--parse-child"]:
        json.dump(_parse(json.loads(sys.stdin.read())), sys.stdout)
        return 0
    parser = argparse.ArgumentParser(prog="python -m manaka.shogi convert", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="the HCPE file to write (never one of the records)")
    parser.add_argument("records", nargs="+", help=".csa / .kif / .kifu files or folders of them")
    parser.add_argument("--force", action="store_true", help="replace OUT when it exists (an HCPE file)")
    args = parser.parse_args(argv)
    try:
        import cshogi  # noqa: F401
    except ImportError:
        print("python -m manaka.shogi convert: needs cshogi (pip install cshogi)", file=sys.stderr)
        return 2
    try:
        counts = convert(args.out, args.records, log=lambda line: print(line, file=sys.stderr), force=args.force)
    except (ValueError, OSError) as e:
        # our own OSErrors carry their whole sentence in strerror; the system's name their file
        own = isinstance(e, OSError) and e.filename is None and e.strerror
        print(f"python -m manaka.shogi convert: {e.strerror if own else e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # the atomic writer has removed its temporary: OUT is as it was
        print(f"python -m manaka.shogi convert: interrupted; nothing was written ({args.out} is as it was)",
              file=sys.stderr)
        return 130
    print(f"wrote {counts['positions']:,} positions of {counts['games']:,} games from {counts['files']:,} files "
          f"to {args.out} ({_summary(counts)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
