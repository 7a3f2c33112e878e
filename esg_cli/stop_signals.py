"""Stop requests from signals, acted on outside the signal handler.

A Python signal handler runs in the main thread between two of its instructions, possibly while that
thread holds a lock: a queue's while it takes the next item, an event's while it waits. A handler that
takes the same lock (a ``queue.put``, an ``Event.set``, starting a thread) then waits for itself and never
returns, and the process outlives the parent whose death sent the signal. So the handler here only writes
the signal's number to a pipe; a thread of its own reads it, arms the deadline first and then asks the
service to stop. The deadline's exit takes no lock either: it writes its line straight to stderr and
ends the process.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterable


class StopSignals:
    """Calls ``stop(signum)`` from a thread of its own for each of ``signals`` received; with ``grace_s``,
    the first one also arms a deadline: the process exits with status 1 (after writing ``overdue`` to
    stderr) unless it has ended ``grace_s`` seconds later."""

    def __init__(self, stop: Callable[[int], None], signals: Iterable[signal.Signals],
                 grace_s: float | None = None, overdue: str = "did not stop in time; exiting") -> None:
        self.stop = stop
        self.signals = tuple(signals)
        self.grace_s = grace_s
        self.overdue = overdue
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._armed = False
        self._thread = threading.Thread(target=self._watch, name="stop-signals", daemon=True)

    def install(self) -> None:
        """Start the watching thread, then route the signals to it (a signal before this is the default's)."""
        self._thread.start()
        for sig in self.signals:
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame) -> None:
        try:
            os.write(self._write, bytes([signum]))
        except BlockingIOError:  # a pipe full of stop requests: one more adds nothing
            pass

    def _watch(self) -> None:
        while True:
            signum = os.read(self._read, 1)[0]
            if self.grace_s is not None and not self._armed:
                self._armed = True
                deadline = threading.Timer(self.grace_s, self._exit_overdue)
                deadline.daemon = True
                deadline.start()
            try:
                self.stop(signum)
            except Exception:  # a failed stop must not leave the next signal unheard
                logging.getLogger("esg.stop").exception("stopping on signal %d failed", signum)

    def _exit_overdue(self) -> None:
        os.write(2, f"{self.overdue}\n".encode())
        os._exit(1)
