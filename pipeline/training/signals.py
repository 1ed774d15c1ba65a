"""Stopping a training with SIGINT or SIGTERM: between updates, never inside a save.

The train command turns both signals into `Stopped` (a KeyboardInterrupt, so
the MLflow run ends as KILLED on the way out) and exits with the shell's code
for the signal, 128 + its number. Saves run with both signals blocked: one
that arrives meanwhile is raised once the files are whole (docs/exact-resume.md).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(KeyboardInterrupt):
    """Training was asked to stop by a signal."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # what a shell reports for a process ended by the signal


def _raise_stopped(signum: int, frame: FrameType | None) -> None:
    raise Stopped(signum)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within: SIGINT and SIGTERM raise Stopped (the main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _raise_stopped) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Within: SIGINT and SIGTERM wait; one that came is delivered (and raised) on the way out."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
