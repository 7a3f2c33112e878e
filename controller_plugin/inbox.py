"""The main loop's inbox: what the reader threads and the record writer hand on, taken a turn at a time.

A poll's activations (:class:`~controller_plugin.activations.Polled`) and a read's results and
heartbeats (:class:`~controller_plugin.dispatcher.Delivered`) come as one item each -- a hand-off per
message cost both threads a lock and a wake-up each -- and are taken apart here, in order.

A turn takes what is there and does not wait for more: with a real agent's batches in flight, any wait
for a larger turn lengthens every round trip (a 2-ms hold cut the scheduler's CPU per activation by a
twentieth and the burst's throughput by a tenth: docs/results/2026-11-28-live-path-runs.md, run L).
"""

from __future__ import annotations

import queue

from controller_plugin.activations import Polled
from controller_plugin.dispatcher import Delivered, ReadMark


def unpack(item: object, into: list[object]) -> int:
    """``item`` into ``into``: a poll's or a read's messages one by one, in order (a read's after a
    :class:`~controller_plugin.dispatcher.ReadMark` saying when it started); how many messages."""
    if isinstance(item, Polled):
        into.extend(item.items)
        return len(item.items)
    if isinstance(item, Delivered):
        into.append(ReadMark(item.started_s, item.caught_up, item.results_at))
        into.extend(item.messages)
        return len(item.messages)
    into.append(item)
    return 1


class Inbox(queue.Queue):
    def take(self, wait_s: float, limit: int) -> list[object]:
        """The messages of one turn: waits at most ``wait_s`` for the first item, then takes what is
        there, up to about ``limit`` messages (a poll or a read is never split)."""
        items: list[object] = []
        try:
            unpack(self.get(timeout=wait_s) if wait_s > 0 else self.get_nowait(), items)
            while len(items) < limit:
                unpack(self.get_nowait(), items)
        except queue.Empty:
            pass
        return items
