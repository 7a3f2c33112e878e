"""The main loop's inbox: what the reader threads and the record writer hand on, taken a turn at a time.

Each turn of the loop has costs of its own, whatever it carries: the core's step, the Redis pipeline
(redis-py packs and parses each command in Python), the producer's poll. Under a burst the loop turns
as often as the readers hand something on -- a few activations a turn, as the agent's answers come in
small cohorts -- and those costs were paid for every few activations. So :meth:`Inbox.take` gathers:
after a turn that took at least :data:`GATHER_MIN` messages, which only a burst gives (at a trickle
each turn has one poll of one activation, or one result), and when the next item comes within
:data:`HOT_S` of that turn's take, it waits up to :data:`GATHER_S` more for what follows. A trickle's
activations never wait; a burst's wait at most :data:`GATHER_S` a turn, where they queue for much
longer anyway.

A poll's activations (:class:`~controller_plugin.activations.Polled`) and a read's results and
heartbeats (:class:`~controller_plugin.dispatcher.Delivered`) come as one item each and are taken
apart here, in order.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable

from controller_plugin.activations import Polled
from controller_plugin.dispatcher import Delivered

#: A take of at least this many messages makes the next one gather.
GATHER_MIN = 4
#: How long after a gathering take the next may still gather (seconds).
HOT_S = 0.01
#: The most a take waits for more, once it has something (seconds).
GATHER_S = 0.002


def unpack(item: object, into: list[object]) -> int:
    """``item`` into ``into``: a poll's or a read's messages one by one, in order; how many."""
    if isinstance(item, Polled):
        into.extend(item.items)
        return len(item.items)
    if isinstance(item, Delivered):
        into.extend(item.messages)
        return len(item.messages)
    into.append(item)
    return 1


class Inbox(queue.Queue):
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._clock = clock
        self._hot_until = float("-inf")
        self.takes = 0
        """Takes that returned something (turns with work)."""

    def take(self, wait_s: float, limit: int) -> list[object]:
        """The messages of one turn: waits at most ``wait_s`` for the first item, then takes what is
        there (and, gathering, what comes within :data:`GATHER_S`), up to about ``limit`` messages."""
        items: list[object] = []
        try:
            unpack(self.get(timeout=wait_s) if wait_s > 0 else self.get_nowait(), items)
        except queue.Empty:
            return items
        start = self._clock()
        gather = start <= self._hot_until
        try:
            while len(items) < limit:
                unpack(self.get_nowait(), items)
        except queue.Empty:
            pass
        if gather:
            end = start + GATHER_S
            while len(items) < limit and (left := end - self._clock()) > 0:
                try:
                    unpack(self.get(timeout=left), items)
                except queue.Empty:
                    break
        self.takes += 1
        self._hot_until = self._clock() + HOT_S if len(items) >= GATHER_MIN else float("-inf")
        return items
