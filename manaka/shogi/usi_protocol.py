"""The USI protocol of an engine: reading commands, thinking in a thread, answering bestmove.

One engine loop for every player manaka has (the network's searches, the heuristic): a
player is a function from (game, budget, report) to a SearchResult. The loop reads stdin
while the player thinks, so ``stop``, ``ponderhit``, ``isready`` and ``quit`` are answered
during a search; a command it does not understand is answered with ``info string`` and
ignored. Every bestmove is checked against the C generator's legal moves of the position.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, TextIO

from .game import Game
from .position import STARTING_SFEN, move_to_usi, usi_to_move
from .search import Budget, SearchResult, pv_usi, value_to_cp

__all__ = ["Option", "UsiEngine", "GoLimits", "think_time", "parse_position"]

# A bare ``go`` (no limits at all) thinks this long, so that it cannot hang a caller.
DEFAULT_MOVETIME_MS = 1000
# The largest number a ``go`` argument may have (a signed 64-bit integer, what C engines
# read): a larger one would overflow the float arithmetic of think_time.
MAX_GO_VALUE = 2 ** 63 - 1


@dataclass
class Option:
    """A USI option: `kind` is check, spin, combo or string; `apply` is called with the
    value (converted) when it is set."""
    kind: str
    default: object
    apply: Callable[[object], None]
    minimum: int = 0
    maximum: int = 0
    choices: tuple = ()

    def declaration(self, name: str) -> str:
        text = f"option name {name} type {self.kind} default {str(self.default).lower() if self.kind == 'check' else self.default}"
        if self.kind == "spin":
            text += f" min {self.minimum} max {self.maximum}"
        if self.kind == "combo":
            text += "".join(f" var {c}" for c in self.choices)
        return text

    def convert(self, text: str):
        if self.kind == "spin":
            value = int(text)
            if not self.minimum <= value <= self.maximum:
                raise ValueError(f"{value} is outside [{self.minimum}, {self.maximum}]")
            return value
        if self.kind == "check":
            if text not in ("true", "false"):
                raise ValueError(f"expected true or false, got {text!r}")
            return text == "true"
        if self.kind == "combo" and text not in self.choices:
            raise ValueError(f"expected one of {', '.join(self.choices)}, got {text!r}")
        return text


@dataclass
class GoLimits:
    """A ``go`` command's arguments (milliseconds; None when absent)."""
    btime: Optional[int] = None
    wtime: Optional[int] = None
    byoyomi: Optional[int] = None
    binc: Optional[int] = None
    winc: Optional[int] = None
    movetime: Optional[int] = None
    nodes: Optional[int] = None
    infinite: bool = False
    ponder: bool = False

    @classmethod
    def parse(cls, args: List[str]) -> "GoLimits":
        limits, i = cls(), 0
        numbers = ("btime", "wtime", "byoyomi", "binc", "winc", "movetime", "nodes")
        while i < len(args):
            word = args[i]
            if word in ("infinite", "ponder"):
                setattr(limits, word, True)
                i += 1
            elif word in numbers and i + 1 < len(args):
                value = int(args[i + 1])  # ValueError: reported by the caller
                if not 0 <= value <= MAX_GO_VALUE:
                    raise ValueError(f"go: {word} must be in [0, 2^63-1], got {value}")
                setattr(limits, word, value)
                i += 2
            else:
                raise ValueError(f"go: unknown or incomplete argument {word!r}")
        return limits


def think_time(limits: GoLimits, side: int, margin_ms: int) -> Optional[float]:
    """Seconds to think, or None for no time limit (infinite, or nodes only).

    With a clock: a fortieth of the time left plus the increment and the byoyomi, never
    more than the time left plus the byoyomi (what may be spent before losing on time),
    less `margin_ms` for the delay between this process and the opponent's clock. The
    increment is added after the move, so it is not counted as spendable."""
    if limits.infinite:
        return None
    if limits.movetime is not None:
        return max(0.0, (limits.movetime - margin_ms) / 1000)
    left = limits.btime if side == 0 else limits.wtime
    inc = (limits.binc if side == 0 else limits.winc) or 0
    byoyomi = limits.byoyomi or 0
    if left is None and limits.byoyomi is None and inc == 0:
        return None if limits.nodes is not None else max(0.0, (DEFAULT_MOVETIME_MS - margin_ms) / 1000)
    left = left or 0
    target = min(left / 40 + inc + byoyomi, left + byoyomi)
    return max(0.0, (target - margin_ms) / 1000)


def parse_position(args: List[str]) -> Game:
    """The game of a ``position`` command's arguments (``startpos [moves ...]`` or
    ``sfen BOARD SIDE HAND [N] [moves ...]``), every move checked legal; ValueError naming
    the problem."""
    if not args:
        raise ValueError("expected 'startpos' or 'sfen ...'")
    i = args.index("moves") if "moves" in args else len(args)
    head, moves = args[:i], args[i + 1:]
    if head == ["startpos"]:
        start = STARTING_SFEN
    elif head[0] == "sfen" and len(head) in (4, 5):
        start = " ".join(head[1:])
    else:
        raise ValueError(f"expected 'startpos' or 'sfen BOARD SIDE HAND [N]', got {' '.join(head)!r}")
    game = Game(start)
    for n, m in enumerate(moves):
        try:
            game.play(usi_to_move(m))
        except ValueError as e:
            raise ValueError(f"move {n + 1} ({m[:20]}): {e}") from None  # the text sent: the C core names move16
    return game


# The bytes of a command line that are read: a longer one (no USI command is: a position
# of thousands of moves is a few tens of kB) is dropped with an info string, so that input
# with no line end cannot grow one line until memory runs out.
MAX_LINE_BYTES = 1 << 22


def _stdin_lines():
    """stdin's lines decoded as UTF-8 whatever the locale, a byte that is not UTF-8 (a GUI's
    Shift-JIS option value) as U+FFFD: a UnicodeDecodeError would end the engine. USI's own
    words, positions and moves are ASCII. A line over MAX_LINE_BYTES is read to its end and
    given as the unknown command 'overlong'."""
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # a text stream set by the caller (tests): already decoded
        yield from sys.stdin
        return
    while True:
        raw = stream.readline(MAX_LINE_BYTES)
        if not raw:
            return
        if len(raw) == MAX_LINE_BYTES and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):
                raw = stream.readline(MAX_LINE_BYTES)
            raw = f"overlong line (over {MAX_LINE_BYTES} bytes)".encode()
        yield raw.decode("utf-8", "replace")


class UsiEngine:
    """The protocol loop. `player(game, budget, report)` returns a SearchResult; `options`
    are the engine's own USI options (MarginMs is added)."""

    def __init__(self, name: str, player: Callable[..., SearchResult], options: Dict[str, Option] = None,
                 author: str = "manaka", out: TextIO = None):
        self.name, self.author, self.player = name, author, player
        self.out = out or sys.stdout
        self.margin_ms = 50
        self.options = dict(options or {})
        self.options["MarginMs"] = Option("spin", 50, lambda v: setattr(self, "margin_ms", v), 0, 60000)
        self.game: Optional[Game] = None
        self.gone = False  # set when the output's reader has closed it: the loop then ends
        self._write_lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._budget: Optional[Budget] = None
        self._hold = threading.Event()     # set while bestmove must wait (infinite / ponder)
        self._answered = threading.Event()  # set when the search thread has sent bestmove
        self._limits: Optional[GoLimits] = None
        self._side = 0  # the side to move of the searched position (self.game may change meanwhile)
        self._started = 0.0

    # ------------------------------------------------------------------ output
    def send(self, line: str) -> None:
        """Writes one line; once the reader has closed its end (a GUI that died, ``| head``)
        nothing more is written and the loop ends at the next command, not with a traceback
        from whichever thread wrote."""
        with self._write_lock:
            if self.gone:
                return
            try:
                self.out.write(line + "\n")
                self.out.flush()
            except (BrokenPipeError, ValueError):  # ValueError: the stream was closed
                self.gone = True
                if self.out is sys.stdout:
                    # the interpreter flushes stdout at exit: that write must not fail too
                    try:
                        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                    except (OSError, ValueError):
                        pass

    def info(self, text: str) -> None:
        self.send("info string " + " ".join(text.split()))

    # ------------------------------------------------------------------ loop
    def run(self, lines=None) -> int:
        if lines is None:
            lines = _stdin_lines()
            if self.out is sys.stdout and hasattr(self.out, "reconfigure"):
                # an echoed line (info string) in a character the locale cannot write
                self.out.reconfigure(errors="backslashreplace")
        code = 0
        try:
            for line in lines:
                if not self.command(line) or self.gone:
                    break
        except KeyboardInterrupt:  # Ctrl-C in a terminal: as quit, with the shell's status, no traceback
            code = 130
        self._stop_search()
        return code

    def command(self, line: str) -> bool:
        """Handles one line; False after ``quit``."""
        words = line.split()
        if not words:
            return True
        verb, args = words[0], words[1:]
        try:
            if verb == "quit":
                return False
            handler = getattr(self, "_on_" + verb, None)
            if handler is None:
                self.info(f"ignored unknown command: {line.strip()[:200]}")
            else:
                handler(args)
        except ValueError as e:
            self.info(f"ignored {verb}: {e}")
        return True

    def _on_usi(self, args) -> None:
        self.send(f"id name {self.name}")
        self.send(f"id author {self.author}")
        for name, option in self.options.items():
            self.send(option.declaration(name))
        self.send("usiok")

    def _on_isready(self, args) -> None:
        self.send("readyok")

    def _on_setoption(self, args) -> None:
        if len(args) < 2 or args[0] != "name":
            raise ValueError("expected 'setoption name NAME [value VALUE]'")
        if "value" in args:
            i = args.index("value")
            name, value = " ".join(args[1:i]), " ".join(args[i + 1:])
        else:
            name, value = " ".join(args[1:]), ""
        option = self.options.get(name)
        if option is None:
            if name.startswith("USI_"):  # the GUI's own options (USI_Hash, USI_Ponder): nothing to do
                return
            raise ValueError(f"no option {name!r}")
        option.apply(option.convert(value))

    def _on_usinewgame(self, args) -> None:
        self.game = None

    def _on_gameover(self, args) -> None:
        self._stop_search()

    def _on_position(self, args) -> None:
        self.game = None  # a refused position must not leave the previous one to be played
        if self._searching():
            raise ValueError("a search is running (send stop first)")
        self.game = parse_position(args)

    def _on_go(self, args) -> None:
        if self._searching():
            raise ValueError("a search is running")
        if "mate" in args:
            # a mate search (tsume): its caller waits for a ``checkmate`` line, never for
            # bestmove, and USI's answer for an engine without one is this
            self.send("checkmate notimplemented")
            return
        try:
            limits = GoLimits.parse(args)
        except ValueError as e:  # a GUI waits for bestmove after any go: never leave it waiting
            why = str(e)  # GoLimits' own messages start "go: "; int()'s do not
            self.info(f"go: {why[len('go: '):] if why.startswith('go: ') else why}; thinking {DEFAULT_MOVETIME_MS} ms "
                      "instead")
            limits = GoLimits(movetime=DEFAULT_MOVETIME_MS)
        if self.game is None:
            self.info("no position was set (or it was refused): resigning")
            self.send("bestmove resign")
            return
        self._started, self._side = time.monotonic(), self.game.position.side
        seconds = None if limits.ponder else think_time(limits, self._side, self.margin_ms)
        self._budget = Budget(nodes=limits.nodes, deadline=None if seconds is None else self._started + seconds)
        self._limits = limits
        if limits.infinite or limits.ponder:
            self._hold.set()
        else:
            self._hold.clear()
        self._answered.clear()
        self._thread = threading.Thread(target=self._search, args=(self.game, self._budget), daemon=True)
        self._thread.start()

    def _on_stop(self, args) -> None:
        self._stop_search()

    def _on_ponderhit(self, args) -> None:
        if not self._searching() or self._limits is None or not self._limits.ponder:
            return
        self._started = time.monotonic()
        # the clock of the position being searched: a ``position`` or ``usinewgame`` sent
        # during the ponder has cleared self.game, not the search
        seconds = think_time(GoLimits(**{**self._limits.__dict__, "ponder": False}), self._side, self.margin_ms)
        self._budget.deadline = None if seconds is None else self._started + seconds
        if not self._limits.infinite:
            self._hold.clear()

    # ------------------------------------------------------------------ search
    def _searching(self) -> bool:
        """Whether a search has not answered yet. Once bestmove is sent the thread only
        returns, so it is joined here: the caller may already have sent the next command."""
        if self._thread is not None and self._answered.is_set():
            self._thread.join()
            self._thread = None
        return self._thread is not None and self._thread.is_alive()

    def _stop_search(self) -> None:
        if self._thread is None:
            return
        self._budget.stop.set()
        self._hold.clear()
        self._thread.join()
        self._thread = None

    def _report(self, result: SearchResult) -> None:
        ms = int((time.monotonic() - self._started) * 1000)
        nps = int(result.nodes * 1000 / ms) if ms > 0 else 0
        line = (f"info depth {result.depth} nodes {result.nodes} nps {nps} time {ms} "
                f"score cp {value_to_cp(result.value)}")
        if result.pv:
            line += " pv " + pv_usi(result.pv)
        self.send(line)

    def _search(self, game: Game, budget: Budget) -> None:
        legal = set(game.legal_moves())
        try:
            result = self.player(game, budget, self._report)
        except Exception as e:  # never leave the caller waiting: say why and resign
            self.info(f"error: the search failed: {type(e).__name__}: {e}")
            result = SearchResult(None, 0.0, 0)
        if result.move is not None and result.move not in legal:
            self.info(f"error: the search chose {move_to_usi(result.move)}, not legal here: resigning")
            result = SearchResult(None, 0.0, 0)
        if result.move is None and legal:
            self.info("error: the search gave no move though there are legal moves")
        elif result.move is not None:
            self._report(result)
        # after ``go infinite`` / ``go ponder`` bestmove waits for stop or ponderhit
        while self._hold.is_set() and not budget.stop.is_set():
            budget.stop.wait(0.01)
        # set before the line is written: once the caller can read bestmove, _searching
        # must see the search as answered (and joins this thread, which only returns)
        self._answered.set()
        self.send("bestmove " + ("resign" if result.move is None else move_to_usi(result.move)))
