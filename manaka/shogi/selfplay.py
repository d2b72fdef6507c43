"""Engine-labelled games: ``python -m manaka.shogi selfplay --engine CMD --nodes N --games G --out x.hcpe``.

A USI engine plays itself from random openings; every position it moves in becomes an
HCPE record (the position, the engine's move, its eval for the side to move, the game's
result), written by manaka's own encoder. docs/shogi.md describes the command; here is
what a reader of the code needs:

- Game i's random opening (a count in --random-plies, then uniform choices among the
  legal moves) comes from a generator seeded by (seed, i), and the engine gets
  ``usinewgame`` before each game; with --fresh-engine (a new process per game) a
  deterministic engine (Fairy-Stockfish with one thread at fixed nodes) then plays the
  same game whichever worker plays it and whenever. Without it, state an engine keeps
  across ``usinewgame`` can change a game slightly (Fairy-Stockfish 11.1 does).
- Games are written in index order, each whole or not at all: its records are appended to
  its file and fsynced, then one line (its number of positions) is appended to the file's
  ``.games`` index and fsynced. That line is the commit: on a rerun, records past the
  positions the index counts (a game cut short by a crash) are cut off, and play resumes
  at the first game not in either index. Output therefore does not depend on --workers
  beyond what the engine itself carries from game to game (see above). A run holds a lock
  on --out while it writes: a second run on the same files is refused.
- The held-out split is by game (game i held out iff i < --held-out-games, or a draw from
  generator (seed, i) falls below --held-out-fraction), so no game has positions in both.
- Every engine move is checked against the C move generator. An illegal move ends its
  game, which is written as 0 positions (its result is unknown) and reported. An engine
  that dies or does not answer in time is restarted and the game replayed from its start;
  when that fails too, the run stops with the error, having written every game before it.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from .. import _core
from ..atomic_file import atomic_write, naming_the_file
from .game import Game, declaration_wins
from .position import usi_to_move
from .usi_client import EngineError, UsiEngine

__all__ = ["Settings", "GameRecord", "play_game", "selfplay", "main", "HCPE_DTYPE", "held_out_path"]

HCPE_DTYPE = np.dtype([("hcp", np.uint8, 32), ("eval", "<i2"), ("bestMove16", "<u2"), ("gameResult", "u1"),
                       ("dummy", "u1")])
DRAW, BLACK_WON, WHITE_WON = 0, 1, 2
RESULT_NAMES = {DRAW: "draw", BLACK_WON: "Black won", WHITE_WON: "White won"}


@dataclass
class Settings:
    """What a game depends on (checked equal on a rerun) and how the run is done."""
    engine: str
    nodes: int
    seed: int = 0
    random_plies: Tuple[int, int] = (6, 16)
    max_plies: int = 300
    resign_score: int = 3000  # 0: never resign on the score
    options: Dict[str, str] = field(default_factory=dict)
    variant: Optional[str] = "auto"
    held_out_games: Optional[int] = None
    held_out_fraction: Optional[float] = None
    # how the run is done: free to change between reruns
    timeout: float = 60.0
    fresh_engine: bool = False  # a new engine process for every game

    def identity(self) -> dict:
        """The settings a rerun must repeat to continue the same games."""
        d = asdict(self)
        d.pop("timeout")
        d.pop("fresh_engine")
        d["random_plies"] = list(self.random_plies)
        return d


@dataclass
class GameRecord:
    """One game as played: index, every move (the random opening's included), the number
    of opening plies, the records (HCPE_DTYPE, the engine's moves), the result (0 draw, 1
    Black won, 2 White won), why it ended, and an error when it was abandoned."""
    index: int
    moves: List[str]
    opening_plies: int
    records: np.ndarray
    result: int
    reason: str
    error: Optional[str] = None


def _rng(seed: int, index: int, stream: int) -> random.Random:
    # Python's Mersenne Twister seeded by an int: stable across Python versions.
    return random.Random((seed * 1_000_003 + index) * 4 + stream)


def is_held_out(settings: Settings, index: int) -> bool:
    if settings.held_out_games is not None:
        return index < settings.held_out_games
    if settings.held_out_fraction is not None:
        return _rng(settings.seed, index, 1).random() < settings.held_out_fraction
    return False


def _winner_result(colour: int) -> int:
    return BLACK_WON if colour == 0 else WHITE_WON


def play_game(engine: UsiEngine, index: int, settings: Settings) -> GameRecord:
    """Plays game `index` (see the module's notes); EngineError when the engine fails."""
    rng = _rng(settings.seed, index, 0)
    game = Game()
    lo, hi = settings.random_plies
    opening = rng.randint(lo, hi)
    rows: List[Tuple[bytes, int, int]] = []  # (hcp, move16, eval)

    def done(result: int, reason: str, error: Optional[str] = None) -> GameRecord:
        records = np.zeros(0 if error else len(rows), HCPE_DTYPE)
        if not error:
            for r, (hcp, move, ev) in enumerate(rows):
                records[r]["hcp"] = np.frombuffer(hcp, np.uint8)
                records[r]["eval"], records[r]["bestMove16"] = ev, move
            records["gameResult"] = result
        return GameRecord(index, list(game.moves), min(opening, game.ply), records, result, reason, error)

    def ended() -> Optional[GameRecord]:
        rep = game.repetition()
        if rep is not None:
            winner, reason = rep
            return done(DRAW if winner is None else _winner_result(winner), reason)
        if game.ply >= settings.max_plies:
            return done(DRAW, "max plies")
        return None

    for _ in range(opening):
        legal = game.legal_moves()
        if not legal:  # mated by the random moves: no engine position to record
            return done(_winner_result(1 - game.position.side), "mate in the random opening")
        game.play(legal[rng.randrange(len(legal))])
        end = ended()
        if end:
            return end
    engine.new_game()
    while True:
        legal = game.legal_moves()
        side = game.position.side
        if not legal:
            return done(_winner_result(1 - side), "mate")
        best, score = engine.think(game.moves, settings.nodes)
        if best == "resign":
            return done(_winner_result(1 - side), "resign")
        if best == "win":
            if declaration_wins(game.position):
                return done(_winner_result(side), "declaration")
            return done(_winner_result(1 - side), "wrong declaration")
        try:
            move = usi_to_move(best)
        except ValueError:
            move = -1
        if move not in legal:
            return done(DRAW, "illegal move", f"game {index}: the engine played {best!r} at ply {game.ply}, "
                        f"which is not legal in {game.position.sfen()!r} (after moves: {' '.join(game.moves)})")
        p = game.position
        ev = 0 if score is None else score
        rows.append((_core.shogi_encode_hcp(p.board, p.hand, p.side), move, ev))
        if settings.resign_score and score is not None and score < -settings.resign_score:
            return done(_winner_result(1 - side), "resign score")
        game.play(move)
        end = ended()
        if end:
            return end


# ---------------------------------------------------------------- the output files


def held_out_path(out: str) -> str:
    """The default held-out file beside `out`: x.hcpe -> x-heldout.hcpe."""
    stem, ext = os.path.splitext(out)
    return f"{stem}-heldout{ext or '.hcpe'}"


class GameFile:
    """An HCPE file and its ``.games`` index, opened for appending whole games."""

    def __init__(self, path: str, log: Callable[[str], None], data=None):
        """`data`: `path` already opened for appending (and locked by _lock)."""
        self.path, self.index_path = path, path + ".games"
        self.counts = self._recover(log)
        # unbuffered: what append wrote is in the file, and what it takes back is not left in a
        # buffer that a later flush writes behind the cut
        self.data = open(path, "ab", buffering=0) if data is None else data
        self.data.seek(0, os.SEEK_END)  # opened before _recover cut it: tell() is where games are appended
        self.index = open(self.index_path, "ab", buffering=0)

    def _recover(self, log) -> List[int]:
        counts: List[int] = []
        if os.path.exists(self.index_path):
            with open(self.index_path, "rb") as f:
                text = f.read()
            whole = text[:text.rfind(b"\n") + 1]  # a line without its newline was never committed
            for n, line in enumerate(whole.decode("ascii", "replace").splitlines()):
                if not line.strip().isdigit():
                    raise ValueError(f"selfplay: {self.index_path}: line {n + 1} ({line!r}) is not a count of positions")
                counts.append(int(line))
            if len(whole) != len(text):
                with open(self.index_path, "r+b") as f:
                    f.truncate(len(whole))
        size = os.path.getsize(self.path) if os.path.exists(self.path) else 0
        want = sum(counts) * HCPE_DTYPE.itemsize
        if size < want:
            raise ValueError(f"selfplay: {self.path} has {size} bytes but its index {self.index_path} counts "
                             f"{sum(counts)} positions ({want} bytes): the files do not belong together")
        if size > want:
            log(f"selfplay: {self.path}: cutting {size - want} bytes of a game that was not finished writing")
            with open(self.path, "r+b") as f:
                f.truncate(want)
        return counts

    def append(self, records: np.ndarray) -> None:
        """One whole game: its records, then its line in the index. A failure or Ctrl-C before
        the line is written takes the records back out, so the data file never holds a game
        its index does not count (a reader of the file would see it; a rerun cut it off)."""
        start, line_start, indexed = self.data.tell(), self.index.tell(), False
        try:
            _write_all(self.data, records.tobytes(), self.path)
            os.fsync(self.data.fileno())
            _write_all(self.index, f"{len(records)}\n".encode(), self.index_path)
            indexed = True  # the whole line is in the file
            os.fsync(self.index.fileno())
        except BaseException:
            if not indexed:  # a full disk may have taken part of either
                os.ftruncate(self.data.fileno(), start)
                os.ftruncate(self.index.fileno(), line_start)
            raise
        self.counts.append(len(records))

    def close(self) -> None:
        self.data.close()
        self.index.close()


def _write_all(f, data: bytes, path: str) -> None:
    """Every byte of `data` to the unbuffered file `f` (a write may take fewer); a full disk's
    error names `path`."""
    view = memoryview(data)
    try:
        while view:
            view = view[f.write(view):]
    except OSError as e:
        raise naming_the_file(e, path) from None


def _write_settings(meta: str, identity: dict) -> None:
    with atomic_write(meta) as f:
        f.write(json.dumps(identity, indent=1, sort_keys=True).encode() + b"\n")


def _holds_games(out: str, held: Optional[str]) -> bool:
    """Whether a data file or an index of the run has any byte (a game, or part of one)."""
    paths = [p for f in (out, held) if f for p in (f, f + ".games")]
    return any(os.path.exists(p) and os.path.getsize(p) > 0 for p in paths)


def _open_outputs(out: str, held: Optional[str], settings: Settings, log) -> Tuple[GameFile, Optional[GameFile]]:
    """The output files, recovered, after checking a rerun repeats the settings."""
    meta = out + ".selfplay.json"
    # every file of the run is its own: a held-out file named like one of --out's files
    # (its index, its settings) would be written into it
    files = [("--out", out), ("--out's index", out + ".games"), ("--out's settings", meta)]
    if held:
        files += [("the held-out file", held), ("the held-out file's index", held + ".games")]
    real = [os.path.realpath(f) for _, f in files]
    for i, (role, f) in enumerate(files):
        if real[i] in real[:i]:
            other, g = files[real.index(real[i])]
            raise ValueError(f"selfplay: {role} {f} is also {other} {g}: choose another --out or held-out file; "
                             "nothing was written")
    for role, f in files:  # a FIFO blocked the open that appends to it (a hang); a folder is no file
        if os.path.exists(f) and not os.path.isfile(f):
            raise ValueError(f"selfplay: {role} {f} is not a regular file (a folder, FIFO, socket or device): "
                             "choose another --out or held-out file; nothing was written")
    # refused (a held-out file that cannot be opened, say): leave none of the files this call made
    made = [f for f in (out, out + ".games", meta) if not os.path.exists(f)]
    lock = _lock(out)
    try:
        return _open_locked(out, held, meta, settings, log, lock)
    except BaseException:
        lock.close()
        if out in made and os.path.exists(out) and os.path.getsize(out) == 0:  # no game: the others hold none
            for f in made:
                if os.path.exists(f):
                    os.remove(f)
        raise


def _lock(path: str):
    """`path` opened for appending, with an exclusive lock that lasts as long as the run: a
    second run writing the same files (the command started twice) cut the first one's game
    in progress as "not finished writing" and played the same games again beside it."""
    f = open(path, "ab", buffering=0)  # GameFile's data file: unbuffered
    try:
        import fcntl
    except ImportError:  # no flock (Windows): unlocked, as before
        return f
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise ValueError(f"selfplay: another selfplay run is writing {path} (it holds the file's lock): wait for "
                         "it to end, or write to another --out; nothing was written") from None
    return f


def _open_locked(out: str, held: Optional[str], meta: str, settings: Settings, log, lock) -> Tuple[GameFile, Optional[GameFile]]:
    identity = settings.identity()
    if os.path.exists(meta):
        try:
            with open(meta, "rb") as f:
                before = json.loads(f.read().decode())
        except (ValueError, OSError) as e:  # JSON and UTF-8 errors are ValueErrors
            raise ValueError(f"selfplay: {meta} cannot be read as this command's settings "
                             f"({type(e).__name__}: {e}); it is left alone: choose another --out") from None
        for path in (out, held):
            # a rerun continues files this command wrote, each beside its index: a data file
            # without one (a held-out file named now for the first time) is someone else's
            if path and os.path.exists(path) and os.path.getsize(path) > 0 and not os.path.exists(path + ".games"):
                raise ValueError(f"selfplay: {path} exists and is not a selfplay output of this command "
                                 f"(no {path}.games); it is left alone: choose another file")
        # the default held-out file too, which a run without a split does not name: a run that
        # had written its game 0 there replayed it into --out (a held-out game trained on)
        if before != identity and not _holds_games(out, held) and not _holds_games(held_out_path(out), None):
            # a run that wrote no game (an engine command with a typo) binds no settings
            log(f"selfplay: {out} holds no game yet: its settings are replaced by this command's")
            _write_settings(meta, identity)
        elif before != identity:
            diff = [f"{k}: {before.get(k)!r} before, {identity.get(k)!r} now"
                    for k in sorted(set(before) | set(identity)) if before.get(k) != identity.get(k)]
            raise ValueError(f"selfplay: {out} holds games made with other settings ({'; '.join(diff)}); "
                             f"rerun with the same settings to continue it, or write to another --out")
    else:
        for path in (out, held):
            if path and os.path.exists(path) and os.path.getsize(path) > 0:
                raise ValueError(f"selfplay: {path} exists and is not a selfplay output of this command "
                                 f"(no {meta}); it is left alone: choose another --out")
        _write_settings(meta, identity)
    train = GameFile(out, log, lock)
    heldout = GameFile(held, log) if held else None
    return train, heldout


# ---------------------------------------------------------------- the run


def selfplay(out: str, games: int, settings: Settings, workers: int = 1, held_out_out: Optional[str] = None,
             log: Callable[[str], None] = print, on_game: Optional[Callable[[GameRecord], None]] = None,
             progress_seconds: float = 10.0) -> dict:
    """Plays games until `games` are in the output files (see the module's notes) with
    `workers` engine processes; returns the run's counts and rates. `on_game` is called
    with each game as it is written. Raises EngineError when an engine fails twice on one
    game (the games before it are written), ValueError for bad arguments or files."""
    if games < 0 or workers < 1 or settings.nodes < 1:
        raise ValueError(f"selfplay: games must be >= 0, workers >= 1 and nodes >= 1 "
                         f"(got {games}, {workers}, {settings.nodes})")
    if settings.nodes > 2**63 - 1:  # "go nodes" beyond what an engine reads: refused by it, or wrapped
        raise ValueError(f"selfplay: nodes must be <= 2^63 - 1, got {settings.nodes}")
    lo, hi = settings.random_plies
    if not 0 <= lo <= hi:
        raise ValueError(f"selfplay: random plies must be a range lo-hi with 0 <= lo <= hi, got {lo}-{hi}")
    if hi >= settings.max_plies >= 1:  # a game whose opening reaches it ends before the engine moves: no record
        raise ValueError(f"selfplay: random plies {lo}-{hi} reach max plies {settings.max_plies}: no ply would be "
                         "left to the engine (give fewer random plies or more max plies)")
    if settings.held_out_games is not None and settings.held_out_fraction is not None:
        raise ValueError("selfplay: give --held-out-games or --held-out-fraction, not both")
    if settings.held_out_fraction is not None and not 0.0 <= settings.held_out_fraction <= 1.0:
        raise ValueError(f"selfplay: the held-out fraction must be in [0, 1], got {settings.held_out_fraction}")
    if settings.held_out_games is not None and settings.held_out_games < 0:
        raise ValueError(f"selfplay: the held-out games must be >= 0, got {settings.held_out_games}")
    if settings.max_plies < 1 or settings.resign_score < 0 or settings.seed < 0:
        raise ValueError("selfplay: max plies must be >= 1, the resign score >= 0 and the seed >= 0")
    if not 0 < settings.timeout < float("inf"):  # nan: every wait for the engine would be unbounded
        raise ValueError(f"selfplay: the timeout must be a finite number of seconds > 0, got {settings.timeout}")
    splitting = settings.held_out_games is not None or settings.held_out_fraction is not None
    if held_out_out and not splitting:
        raise ValueError("selfplay: a held-out file needs --held-out-games or --held-out-fraction")
    held = (held_out_out or held_out_path(out)) if splitting else None
    if held and os.path.abspath(held) == os.path.abspath(out):
        raise ValueError(f"selfplay: the held-out file must differ from --out ({out})")

    train, heldout = _open_outputs(out, held, settings, log)
    try:
        done = len(train.counts) + (len(heldout.counts) if heldout else 0)
        n_held = sum(is_held_out(settings, i) for i in range(done))
        if heldout is not None and n_held != len(heldout.counts) or heldout is None and n_held:
            raise ValueError(f"selfplay: {out} and {held} hold {len(train.counts)} and "
                             f"{len(heldout.counts) if heldout else 0} games, which is not the split of "
                             f"the first {done} games: the files do not belong together")
        if done >= games:
            log(f"selfplay: {out}" + (f" and {held}" if held else "") + f" already hold {done} games: nothing to play")
        elif done:
            log(f"selfplay: resuming after {done} games already in {out}" + (f" and {held}" if held else ""))
        return _run(train, heldout, done, games, settings, workers, log, on_game, progress_seconds)
    finally:
        train.close()
        if heldout:
            heldout.close()


def _run(train, heldout, first, games, settings, workers, log, on_game, progress_seconds) -> dict:
    lock = threading.Condition()
    # next: the next game to start; written: the next to write; limit: no game from it on
    # is started (the run's end, or a game that failed for good); stop: why everything stops
    state = {"next": first, "written": first, "limit": games, "stop": None}
    finished: Dict[int, GameRecord] = {}
    engines: List[UsiEngine] = []
    window = 2 * workers  # games played ahead of the next one to write

    def start_engine() -> UsiEngine:
        engine = UsiEngine(settings.engine, settings.options, settings.variant, settings.timeout)
        with lock:
            engines.append(engine)
        return engine

    def stop_engine(engine: Optional[UsiEngine], failed: bool = False) -> None:
        if engine is not None:
            if failed:  # a broken engine may not read "quit": do not wait for it
                engine.kill()
            engine.close()
            with lock:
                if engine in engines:
                    engines.remove(engine)

    def worker() -> None:
        engine = None
        try:
            while True:
                with lock:
                    while (state["stop"] is None and state["next"] < state["limit"]
                           and state["next"] >= state["written"] + window):
                        lock.wait()
                    if state["stop"] is not None or state["next"] >= state["limit"]:
                        return
                    index = state["next"]
                    state["next"] += 1
                outcome = None
                for attempt in (1, 2):
                    try:
                        if engine is None:
                            engine = start_engine()
                        outcome = play_game(engine, index, settings)
                        if settings.fresh_engine:
                            stop_engine(engine)
                            engine = None
                        break
                    except EngineError as e:
                        stop_engine(engine, failed=True)
                        engine = None
                        with lock:
                            if state["stop"] is not None:
                                return
                        if attempt == 2:
                            outcome = EngineError(f"selfplay: game {index} failed twice, stopping ({e}); the games "
                                                  f"before it are written: rerun the same command to resume")
                        else:
                            log(f"selfplay: game {index}: {e}; restarting the engine and replaying the game")
                with lock:
                    finished[index] = outcome
                    if isinstance(outcome, BaseException):  # no game after it is started
                        state["limit"] = min(state["limit"], index)
                    lock.notify_all()
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            with lock:
                if state["stop"] is None:
                    state["stop"] = e
                lock.notify_all()
        finally:
            stop_engine(engine)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(workers, max(games - first, 0)))]
    stats = {"games": 0, "failed_games": 0, "positions": 0, "held_out_games": 0, "held_out_positions": 0,
             "results": {name: 0 for name in RESULT_NAMES.values()}, "ends": {}}
    start = last_report = time.monotonic()
    for t in threads:
        t.start()

    def report() -> None:
        elapsed = max(time.monotonic() - start, 1e-9)
        log(f"selfplay: {state['written']}/{games} games, {stats['positions']:,} positions this run "
            f"({stats['held_out_positions']:,} held out) in {elapsed:.1f} s: "
            f"{stats['positions'] / elapsed:,.1f} positions/s, {stats['games'] / elapsed:.3f} games/s"
            + (f"; {stats['failed_games']} games failed" if stats["failed_games"] else ""))

    try:
        while state["written"] < games:
            with lock:
                while state["written"] not in finished and state["stop"] is None:
                    lock.wait(timeout=1.0)
                    if not any(t.is_alive() for t in threads) and state["written"] not in finished:
                        break
                record = finished.pop(state["written"], None)
                if record is None:
                    break
                if isinstance(record, BaseException):
                    state["stop"] = record
                    break
            target = heldout if heldout is not None and is_held_out(settings, record.index) else train
            target.append(record.records)
            n = len(record.records)
            stats["games"] += 1
            stats["positions"] += n
            if target is heldout:
                stats["held_out_games"] += 1
                stats["held_out_positions"] += n
            if record.error:
                stats["failed_games"] += 1
                log(f"selfplay: {record.error}; the game is written as 0 positions")
            else:
                stats["results"][RESULT_NAMES[record.result]] += 1
            stats["ends"][record.reason] = stats["ends"].get(record.reason, 0) + 1
            if on_game:
                on_game(record)
            with lock:
                state["written"] += 1
                lock.notify_all()
            if time.monotonic() - last_report >= progress_seconds:
                report()
                last_report = time.monotonic()
    except BaseException as e:
        with lock:
            if state["stop"] is None:
                state["stop"] = e
            lock.notify_all()
    finally:
        with lock:
            failed = state["stop"] is not None  # an interrupt or an error: the games in play are not needed
            if state["stop"] is None:
                state["stop"] = StopIteration()
            lock.notify_all()
            if failed:
                for engine in list(engines):
                    engine.kill()
        for t in threads:
            t.join()
    elapsed = max(time.monotonic() - start, 1e-9)
    stats.update(seconds=elapsed, positions_per_second=stats["positions"] / elapsed,
                 games_per_second=stats["games"] / elapsed, written=state["written"])
    failure = state["stop"]
    if failure is not None and not isinstance(failure, StopIteration):
        raise failure
    return stats


# ---------------------------------------------------------------- the command


def _plies(text: str) -> Tuple[int, int]:
    parts = text.split("-")
    try:
        lo, hi = (int(parts[0]), int(parts[-1])) if len(parts) <= 2 else (None, None)
    except ValueError:
        lo = hi = None
    if lo is None or not 0 <= lo <= hi:
        raise argparse.ArgumentTypeError(f"expected N or LO-HI with 0 <= LO <= HI, got {text!r}")
    return lo, hi


def _option(text: str) -> Tuple[str, str]:
    if "=" not in text or not text.partition("=")[0].strip():  # "=3": an option named ''
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    name, value = text.split("=", 1)
    return name.strip(), value.strip()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m manaka.shogi selfplay", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", required=True, help="the USI engine's command line")
    parser.add_argument("--nodes", type=int, required=True, help="nodes per move (go nodes N)")
    parser.add_argument("--games", type=int, required=True, help="games in the output when done (a rerun continues)")
    parser.add_argument("--out", required=True, help="the HCPE file (train games); OUT.games indexes its games")
    split = parser.add_mutually_exclusive_group()
    split.add_argument("--held-out-games", type=int, help="games 0..H-1 go to the held-out file")
    split.add_argument("--held-out-fraction", type=float, help="each game goes to the held-out file with this chance")
    parser.add_argument("--held-out-out", help="the held-out HCPE file (default: OUT with -heldout before .hcpe)")
    parser.add_argument("--workers", type=int, default=1, help="engine processes playing at once (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="game i's random opening is seeded by (seed, i)")
    parser.add_argument("--random-plies", type=_plies, default=(6, 16), help="random opening plies, LO-HI (default 6-16)")
    parser.add_argument("--max-plies", type=int, default=300, help="a game this long is a draw (default 300)")
    parser.add_argument("--resign-score", type=int, default=3000,
                        help="the side to move loses when the engine's score is below -this (default 3000; 0: never)")
    parser.add_argument("--option", type=_option, action="append", default=[], metavar="NAME=VALUE",
                        help="setoption for the engine (repeatable)")
    parser.add_argument("--variant", default="auto",
                        help="UCI_Variant to set: auto (shogi when the engine offers it), none, or a value")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for a bestmove (default 60); the usi / isready "
                        "handshake waits at least 60 s (engines may load large files there)")
    parser.add_argument("--fresh-engine", action="store_true",
                        help="a new engine process for every game: the games then do not depend on which "
                             "process played what before (Fairy-Stockfish keeps a little state across usinewgame)")
    args = parser.parse_args(argv)
    settings = Settings(engine=args.engine, nodes=args.nodes, seed=args.seed, random_plies=args.random_plies,
                        max_plies=args.max_plies, resign_score=args.resign_score, options=dict(args.option),
                        variant=None if args.variant == "none" else args.variant,
                        held_out_games=args.held_out_games, held_out_fraction=args.held_out_fraction,
                        timeout=args.timeout, fresh_engine=args.fresh_engine)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        stats = selfplay(args.out, args.games, settings, workers=args.workers, held_out_out=args.held_out_out,
                         log=log)
    except (ValueError, OSError, EngineError) as e:
        why = str(e)  # the API's messages start "selfplay: ", which the command's prefix says already
        print(f"python -m manaka.shogi selfplay: {why[len('selfplay: '):] if why.startswith('selfplay: ') else why}",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("python -m manaka.shogi selfplay: interrupted; the games written so far are kept (rerun to resume)",
              file=sys.stderr)
        return 130
    results = ", ".join(f"{k} {v}" for k, v in stats["results"].items())
    ends = ", ".join(f"{k} {v}" for k, v in sorted(stats["ends"].items()))
    print(f"selfplay: {stats['games']} games ({stats['failed_games']} failed), {stats['positions']:,} positions "
          f"({stats['held_out_positions']:,} held out) in {stats['seconds']:.1f} s: "
          f"{stats['positions_per_second']:,.1f} positions/s, {stats['games_per_second']:.3f} games/s; "
          f"{results}; ended by {ends or 'nothing'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
