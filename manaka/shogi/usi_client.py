"""Driving a USI engine in a child process (the client side of the USI protocol).

``UsiEngine(command)`` starts the engine, does the handshake (``usi`` … ``usiok``, the
options, ``isready`` … ``readyok``) and then answers ``think(moves, nodes)`` with the
engine's ``bestmove`` and the score of its last ``info … score`` line. Every wait has a
timeout: an engine that exits, closes its output or stays silent raises
:class:`EngineError`, whose message names the engine, what it was asked, its exit code and
the last lines it wrote to stderr, so a run never hangs and never dies without saying why.

The engine's stdout and stderr are read by two daemon threads (a pipe nobody reads would
block the engine once full); stdout lines go through a queue, so that waiting for a line
can time out.
"""
from __future__ import annotations

import collections
import os
import queue
import shlex
import signal
import subprocess
import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple, Union

__all__ = ["EngineError", "UsiEngine", "score_to_eval", "MATE_SCORE"]

# A mate in n plies is scored MATE_SCORE - n for the side that mates, -(MATE_SCORE - n) for
# the side that is mated (the usual ±32000-ply convention; it fits HCPE's int16 eval).
MATE_SCORE = 32000


# The characters of an engine's output line that are kept: the rest of a longer line is
# read and dropped, so that output with no newline (a binary, cat /dev/zero) cannot grow
# one line until memory runs out.
MAX_LINE = 1 << 16

# The output lines read ahead of the caller. Past this the reader waits, and so does an
# engine that floods its output (its pipe fills): at most MAX_QUEUED x MAX_LINE characters
# are held, where an unbounded queue grew by ~1 GB over a 60 s move timeout.
MAX_QUEUED = 1024


def _lines_of(stream):
    """`stream`'s lines without their line ends, each cut at MAX_LINE characters."""
    while True:
        line = stream.readline(MAX_LINE)
        if not line:
            return
        if not line.endswith("\n"):  # cut short, or the output's last line
            rest = line
            while rest and not rest.endswith("\n"):
                rest = stream.readline(MAX_LINE)
        yield line.rstrip("\r\n")


def _close(stream) -> None:
    try:
        stream.close()
    except (OSError, ValueError):
        pass


class EngineError(RuntimeError):
    """The engine died, closed its output, did not answer in time, or broke the protocol."""


def score_to_eval(kind: str, value: str) -> int:
    """An ``info`` line's score (``cp 35``, ``mate 7``, ``mate -4``, ``mate +``, ``mate -``)
    as an int16 eval for the side to move: centipawns clipped to int16, mates as ±(32000 -
    plies) (``mate +`` / ``mate -`` without a length: ±32000; ``mate 0`` or ``-0``: mated)."""
    if kind == "cp":
        return max(-32767, min(32767, int(value)))
    if kind != "mate":
        raise ValueError(f"usi: unknown score kind {kind!r}")
    if value in ("+", "-"):
        return MATE_SCORE if value == "+" else -MATE_SCORE
    plies = int(value)
    if plies > 0 and not value.startswith("-"):
        return MATE_SCORE - min(plies, MATE_SCORE)
    return -(MATE_SCORE - min(-plies, MATE_SCORE))


def parse_score(line: str) -> Optional[int]:
    """The eval of an ``info`` line with a score (None without one, or for a MultiPV line
    other than the first)."""
    words = line.split()
    if words[1:2] == ["string"]:  # free text, whatever words it holds
        return None
    if "multipv" in words:
        i = words.index("multipv")
        if i + 1 < len(words) and words[i + 1] != "1":
            return None
    if "score" not in words:
        return None
    i = words.index("score")
    if i + 2 >= len(words):
        return None
    try:
        return score_to_eval(words[i + 1], words[i + 2])
    except (ValueError, IndexError):
        return None


class UsiEngine:
    """A USI engine in a child process.

    command: a command line (split like a shell would) or an argument list. options:
    ``setoption`` names and values, sent after ``usi``; a name the engine did not list
    is an EngineError. variant: ``"auto"`` sends ``setoption name UCI_Variant value
    shogi`` when the engine lists a ``UCI_Variant`` option offering ``shogi`` (as
    Fairy-Stockfish does) and nothing otherwise; ``None`` never sends it; any other
    string is sent as the value. timeout: seconds to wait for a ``bestmove``;
    start_timeout: for ``usiok`` and ``readyok`` (engines may load large files there),
    at least `timeout`.
    """

    def __init__(self, command: Union[str, Sequence[str]], options: Optional[Dict[str, str]] = None,
                 variant: Optional[str] = "auto", timeout: float = 60.0, start_timeout: float = 60.0):
        self.argv = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
        if not self.argv:
            raise ValueError("usi: the engine command is empty")
        self.name = " ".join(self.argv)
        self.timeout = float(timeout)
        self.start_timeout = max(float(start_timeout), self.timeout)
        self.stderr_tail: collections.deque = collections.deque(maxlen=20)
        self._lines: "queue.Queue[Optional[str]]" = queue.Queue(MAX_QUEUED)
        self._closed = threading.Event()  # close(): a reader waiting on a full queue gives up
        try:
            # its own process group (POSIX), so that killing it ends what it started too: an
            # engine behind a wrapper script is the script's child
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True, errors="replace", bufsize=1,
                                         start_new_session=os.name == "posix")
        except OSError as e:
            raise EngineError(f"usi: cannot start the engine {self.name!r}: {e}") from e
        self._reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._reader.start()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        self.options: Dict[str, str] = {}  # name -> the rest of its "option name" line
        self.engine_name = ""
        try:
            self._send("usi")
            for line in self._until("usiok", "waiting for usiok"):
                words = line.split()
                if words[:2] == ["option", "name"] and len(words) > 2:
                    rest = line.split(None, 2)[2]
                    name = rest.split(" type ")[0].strip()
                    self.options[name] = rest
                elif words[:2] == ["id", "name"]:
                    self.engine_name = line.split(None, 2)[2] if len(words) > 2 else ""
            self.variant = self._variant(variant)
            if self.variant is not None:
                self._send(f"setoption name UCI_Variant value {self.variant}")
            for name, value in (options or {}).items():
                if name not in self.options:
                    raise EngineError(f"usi: the engine {self.name!r} has no option {name!r} "
                                      f"(it offers: {', '.join(sorted(self.options)) or 'none'})")
                self._send(f"setoption name {name} value {value}")
            self.ready()
        except BaseException:
            self.close()
            raise

    def _variant(self, variant: Optional[str]) -> Optional[str]:
        if variant != "auto":
            return variant
        words = self.options.get("UCI_Variant", "").split()
        offered = any(a == "var" and b == "shogi" for a, b in zip(words, words[1:]))
        return "shogi" if offered else None

    # Each reader closes its own pipe at its end: close() must not, since closing a pipe
    # another thread is reading waits for that read, and a process the engine started (a
    # wrapper script's engine, which kill() does not reach) may keep the pipe open for good.
    def _read_stdout(self) -> None:
        try:
            for line in _lines_of(self.proc.stdout):
                if not self._queue(line):
                    break
        except (OSError, ValueError):  # undecodable output
            pass
        finally:
            _close(self.proc.stdout)
        self._queue(None)  # end of output

    def _queue(self, line: Optional[str]) -> bool:
        """Puts `line` once the queue has room; False (dropped) once close() was called, so
        that a reader of a flooding engine never waits for good on a queue nobody reads."""
        while True:
            try:
                self._lines.put(line, timeout=0.1)
                return True
            except queue.Full:
                if self._closed.is_set():
                    return False

    def _read_stderr(self) -> None:
        try:
            for line in _lines_of(self.proc.stderr):
                self.stderr_tail.append(line)
        except (OSError, ValueError):
            pass
        finally:
            _close(self.proc.stderr)

    def _failure(self, what: str, doing: str) -> EngineError:
        """An EngineError saying what happened while `doing`, with the exit code and stderr."""
        code = self.proc.poll()
        if code is None and what == "closed its output":
            try:
                code = self.proc.wait(1.0)
            except subprocess.TimeoutExpired:
                code = None
        exited = f", exit code {code}" if code is not None else ""
        time.sleep(0.05)  # let the stderr reader catch the last lines
        tail = " | ".join(line[:300] for line in list(self.stderr_tail)[-5:])  # one readable line
        return EngineError(f"usi: the engine {self.name!r} {what} while {doing}{exited}"
                           + (f"; its stderr ends: {tail}" if tail else ""))

    def _send(self, line: str) -> None:
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            raise self._failure("exited", f"being sent {line.split()[0]!r}") from None

    def _line(self, doing: str, deadline: float, limit: float) -> str:
        wait = deadline - time.monotonic()
        try:
            # past the deadline no line is read, though some are waiting: an engine that
            # keeps writing lines that are not the answer (garbage, endless info) must time
            # out too, not keep its caller reading forever
            if wait <= 0:
                raise queue.Empty
            # a wait of centuries (a clock of 2^62 ms) overflowed the platform's time_t: an
            # OverflowError traceback; threading's bound is as good as forever
            line = self._lines.get(timeout=min(wait, threading.TIMEOUT_MAX))
        except queue.Empty:
            raise self._failure(f"did not answer within {limit:g} s", doing) from None
        if line is None:
            self._lines.put_nowait(None)  # stay at the end for any later read (just taken: room)
            raise self._failure("closed its output", doing)
        return line

    def _until(self, token: str, doing: str):
        """The lines before the first line that starts with `token` (that line is consumed)."""
        deadline = time.monotonic() + self.start_timeout
        while True:
            line = self._line(doing, deadline, self.start_timeout)
            if line.split()[:1] == [token]:
                return
            yield line

    def ready(self) -> None:
        self._send("isready")
        for _ in self._until("readyok", "waiting for readyok"):
            pass

    def new_game(self) -> None:
        """``usinewgame`` (engines clear their hash there), then ``isready``."""
        self._send("usinewgame")
        self.ready()

    def think(self, moves: List[str], nodes: int, start: str = "startpos") -> Tuple[str, Optional[int]]:
        """(the word after ``bestmove``: a USI move, ``resign`` or ``win``; the eval of the
        last scored ``info`` line, None without one) after ``position {start} moves …`` and
        ``go nodes {nodes}``."""
        return self.go(moves, f"nodes {int(nodes)}", self.timeout, start)

    def go(self, moves: List[str], limits: str, timeout: float, start: str = "startpos") -> Tuple[str, Optional[int]]:
        """`think` with any ``go`` arguments (``btime 1000 wtime 1000 byoyomi 100``, ``nodes
        100``), waiting at most `timeout` seconds for bestmove. An EngineError while the
        process is still running (``self.proc.poll() is None``) is a timeout."""
        position = f"position {start}" + (" moves " + " ".join(moves) if moves else "")
        self._send(position)
        self._send(f"go {limits}".rstrip())
        score = None
        deadline = time.monotonic() + timeout
        doing = f"thinking at ply {len(moves)} (go {limits})"
        while True:
            line = self._line(doing, deadline, timeout)
            words = line.split()
            if words[:1] == ["info"]:
                s = parse_score(line)
                if s is not None:
                    score = s
            elif words[:1] == ["bestmove"]:
                if len(words) < 2:
                    raise EngineError(f"usi: the engine {self.name!r} answered {line!r} while {doing}")
                return words[1], score

    def stop(self, timeout: float = 2.0) -> None:
        """``stop`` and its late bestmove swallowed, then ``isready``: after a timeout, so
        that the next ``go`` does not read the previous search's answer. EngineError if the
        engine does not answer within `timeout` seconds."""
        self._send("stop")
        deadline = time.monotonic() + timeout
        while self._line("waiting for bestmove after stop", deadline, timeout).split()[:1] != ["bestmove"]:
            pass
        self.ready()

    def gameover(self, result: str) -> None:
        """``gameover win``, ``lose`` or ``draw``."""
        self._send(f"gameover {result}")

    def close(self) -> None:
        """``quit``, then the process is killed if it has not exited within 2 s."""
        self._closed.set()
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
            except (OSError, ValueError):
                pass
            try:
                self.proc.wait(2.0)
            except subprocess.TimeoutExpired:
                self._kill_group()
                self.proc.wait()
        _close(self.proc.stdin)  # stdout and stderr: by their readers

    def kill(self) -> None:
        """Ends the process and the processes it started now (an interrupted run)."""
        self._closed.set()
        if self.proc.poll() is None:
            self._kill_group()

    def _kill_group(self) -> None:
        """SIGKILL to the engine's process group. Only while the engine has not been reaped
        (poll() said None; it is ours alone to reap): its pid is then still reserved, so the
        group cannot be another's."""
        if os.name != "posix":
            self.proc.kill()
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            self.proc.kill()

    def __enter__(self) -> "UsiEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
