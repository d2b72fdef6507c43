"""Ctrl-C during a training loop, held back until the step in progress has finished.

``mk.fit`` saves a checkpoint when interrupted, and a checkpoint must be the state after a
whole number of steps: a step's parameters, optimizer moments and loader position change
together. :class:`StepGuard` installs a SIGINT handler (in the main thread, and only over
Python's default one) that, while ``stepping`` is set, only notes the first Ctrl-C; the
loop raises KeyboardInterrupt itself once the step is done. Outside a step, and for a
second Ctrl-C (a step that never ends must stay interruptible), it raises at once, as
Python does: a KeyboardInterrupt caught while ``stepping`` is still set means that the
step may have been half applied.
"""
from __future__ import annotations

import signal
import threading

__all__ = ["StepGuard"]


class StepGuard:
    def __init__(self):
        self.stepping = False   # set by the loop around the step's work
        self.pending = False    # a Ctrl-C arrived while stepping: raise after the step
        self.installed = False  # whether the handler is ours (else Ctrl-C raises anywhere)
        self._previous = None

    def __enter__(self) -> "StepGuard":
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            self._previous = signal.signal(signal.SIGINT, self._handler)
            self.installed = True
        return self

    def __exit__(self, *exc) -> None:
        if self.installed:
            signal.signal(signal.SIGINT, self._previous)
            self.installed = False

    def _handler(self, signum, frame) -> None:
        if self.stepping and not self.pending:
            self.pending = True
            return
        raise KeyboardInterrupt

    def check(self) -> None:
        """Called between steps: raises the Ctrl-C held back during the last one."""
        if self.pending:
            self.pending = False
            raise KeyboardInterrupt
