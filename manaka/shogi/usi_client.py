"""Driving a USI engine in a child process: start it, send commands, read its lines with
time limits. The match runner's side of the protocol (manaka/shogi/match.py)."""
from __future__ import annotations

import queue
import shlex
import subprocess
import threading
import time
from typing import List, Optional, Sequence, Union

__all__ = ["EngineProcess", "EngineError", "EngineTimeout"]


class EngineError(RuntimeError):
    """The engine died, or did not answer in time."""


class EngineTimeout(EngineError):
    """The engine did not answer in time (it may still be running)."""


class EngineProcess:
    """A USI engine started from `command` (a shell-like string or an argument list); its
    stdout is read by a thread into a queue, so every read can have a deadline."""

    def __init__(self, command: Union[str, Sequence[str]], name: Optional[str] = None, stderr=None):
        argv = shlex.split(command) if isinstance(command, str) else list(command)
        if not argv:
            raise ValueError("engine command is empty")
        self.command, self.name = argv, name or argv[0]
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=stderr if stderr is not None else subprocess.DEVNULL,
                                         text=True, bufsize=1)
        except OSError as e:
            raise EngineError(f"{self.name}: cannot start {argv!r}: {e}") from None
        self.lines: "queue.Queue[Optional[str]]" = queue.Queue()
        self.log: List[str] = []  # everything read, for reports
        self.options: List[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)  # end of file: the engine is gone

    def send(self, line: str) -> None:
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            raise EngineError(f"{self.name}: the engine exited (cannot send {line!r})") from None

    def read_line(self, deadline: float) -> str:
        """The next line, waiting until `deadline` (time.monotonic()); EngineError when the
        engine exited or the deadline passed."""
        remaining = deadline - time.monotonic()
        try:
            line = self.lines.get(timeout=max(0.0, remaining))
        except queue.Empty:
            raise EngineTimeout(f"{self.name}: no answer in time") from None
        if line is None:
            self.lines.put(None)
            raise EngineError(f"{self.name}: the engine exited (code {self.proc.poll()})")
        self.log.append(line)
        return line

    def wait_for(self, first_word: str, timeout: float) -> List[str]:
        """The lines up to and including the first that starts with `first_word`."""
        deadline, got = time.monotonic() + timeout, []
        while True:
            line = self.read_line(deadline)
            got.append(line)
            if line.split()[:1] == [first_word]:
                return got

    def start(self, options: Sequence[str] = (), timeout: float = 30.0) -> None:
        """usi / usiok, the options (``Name=value``), isready / readyok. An engine that
        declares UCI_Variant (Fairy-Stockfish) is told the variant is shogi first."""
        self.send("usi")
        lines = self.wait_for("usiok", timeout)
        self.options = [l for l in lines if l.startswith("option ")]
        if any(l.split()[2:3] == ["UCI_Variant"] for l in self.options):
            self.send("setoption name UCI_Variant value shogi")
        for option in options:
            name, _, value = option.partition("=")
            self.send(f"setoption name {name} value {value}")
        self.ready(timeout)

    def ready(self, timeout: float = 30.0) -> None:
        self.send("isready")
        self.wait_for("readyok", timeout)

    def close(self, timeout: float = 2.0) -> None:
        """quit, then kill if it does not exit within `timeout`."""
        try:
            self.send("quit")
        except EngineError:
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
