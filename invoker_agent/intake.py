"""How the agent's batch threads get their dispatches: one reads for all that are idle.

The batch threads that wait for work take turns at the node's stream (leader and followers): one at a
time reads (``XREADGROUP ... COUNT k BLOCK``), asking for as many dispatches as there are threads not
running one (:meth:`Intake.running`), itself included; it keeps the first and leaves the rest to the
other threads, one of which reads next. So a scheduler turn's dispatches arrive at the agent in one
read, not one read each, and are answered as one cohort (:class:`~invoker_agent.channel.AnswerGroup`):
the scheduler's loop handles them in one turn, as it sent them.

A thread answering its batch counts as free: the threads of a cohort finish running at about the same
time and answer together, and the first back would otherwise read for itself alone and split the next
cohort. What it reads for them waits here until their answers are in (a few milliseconds). No read asks
for more than the threads not running a batch, so a dispatch the agent cannot start soon waits in the
stream, where a scheduler can still take it back; one read and not yet started is in the consumer
group's pending list, as a running one is, and is handed out even while the agent drains.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from agent_channel.streams import Entry

#: How often a waiting thread looks at the stop flag (the agent's stop sets it without notifying this
#: intake's condition).
WAIT_S = 0.2


class Intake:
    def __init__(self, read: Callable[[int, int], list[Entry]], stop: threading.Event, block_ms: int,
                 threads: int = 1) -> None:
        self._read = read
        self._threads = threads
        self._busy = 0
        self._stop = stop
        self._block_ms = block_ms
        self._cond = threading.Condition()
        self._handed: deque[Entry] = deque()
        self._reading = False
        self._waiting = 0

    def next(self) -> Entry | None:
        """The next dispatch for the calling thread; None once the agent stops and none is left read.
        Raises what the read raised (the caller retries)."""
        while True:
            with self._cond:
                self._waiting += 1
                try:
                    while not self._handed and self._reading and not self._stop.is_set():
                        self._cond.wait(WAIT_S)
                finally:
                    self._waiting -= 1
                if self._handed:
                    return self._handed.popleft()
                if self._stop.is_set():
                    return None
                self._reading = True
                count = max(self._waiting + 1, self._threads - self._busy - len(self._handed))
            got: list[Entry] = []
            try:
                got = self._read(count, self._block_ms)
            finally:
                with self._cond:
                    self._reading = False
                    self._handed.extend(got[1:])
                    self._cond.notify(len(got))     # a taker for each one left, and the next reader
            if got:
                return got[0]

    @contextmanager
    def running(self) -> Iterator[None]:
        """Around a batch's run (not its answer): the calling thread is not free meanwhile."""
        with self._cond:
            self._busy += 1
        try:
            yield
        finally:
            with self._cond:
                self._busy -= 1
