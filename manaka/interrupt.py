"""Ctrl-C during a training loop, held back until the step in progress has finished.

``mk.fit`` saves a checkpoint when interrupted, and a checkpoint must be the state after a
whole number of steps: a step's parameters, optimizer moments and loader position change
together. :class:`StepGuard` installs a SIGINT handler (in the main thread, and only over
Python's default one) that, while ``stepping`` is set, only notes the first Ctrl-C; the
loop raises KeyboardInterrupt itself once the step is done. Outside a step, and for a
second Ctrl-C (a step that never ends must stay interruptible), it raises at once, as
Python does: a KeyboardInterrupt caught while ``stepping`` is still set means that the
step may have been half applied.

A command line can ask for the same treatment of SIGTERM (``kill PID``, a job scheduler's
time limit), which otherwise ends the process at once, losing every step since the last
checkpoint: :func:`stop_on_sigterm`. The library leaves SIGTERM alone (a notebook's kernel
is shut down with it).
"""
from __future__ import annotations

import signal
import threading

__all__ = ["StepGuard", "stop_on_sigterm", "last_signal"]

_signals = [signal.SIGINT]  # what every StepGuard holds back until the step has finished
_last = None  # the signal that stopped the last guarded run, if one did


def stop_on_sigterm() -> None:
    """From now on a StepGuard treats SIGTERM as it treats Ctrl-C (if SIGTERM still has
    the system's default action)."""
    if signal.SIGTERM not in _signals:
        _signals.append(signal.SIGTERM)


def last_signal():
    """The signal (SIGINT or SIGTERM) that interrupted the last guarded run, or None."""
    return _last


def _default(signum):
    """Whether the handler of signum is the one this process started with (so ours may
    replace it): Python's KeyboardInterrupt for SIGINT, the system's action otherwise."""
    current = signal.getsignal(signum)
    return current is (signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)


class StepGuard:
    def __init__(self):
        self.stepping = False   # set by the loop around the step's work
        self.pending = False    # a Ctrl-C arrived while stepping: raise after the step
        self.installed = False  # whether the SIGINT handler is ours (else Ctrl-C raises anywhere)
        self._previous = {}     # signal -> the handler ours replaced

    def __enter__(self) -> "StepGuard":
        global _last
        _last = None
        if threading.current_thread() is threading.main_thread():
            for signum in _signals:
                if _default(signum):
                    self._previous[signum] = signal.signal(signum, self._handler)
        self.installed = signal.SIGINT in self._previous
        return self

    def __exit__(self, *exc) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()
        self.installed = False

    def _handler(self, signum, frame) -> None:
        global _last
        _last = _last or signal.Signals(signum)
        if self.stepping and not self.pending:
            self.pending = True
            return
        raise KeyboardInterrupt

    def check(self) -> None:
        """Called between steps: raises the Ctrl-C held back during the last one."""
        if self.pending:
            self.pending = False
            raise KeyboardInterrupt
