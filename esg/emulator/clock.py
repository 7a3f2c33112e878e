"""The event heap: events ordered by (virtual time, priority, insertion sequence).

The sequence number from ``itertools.count()`` breaks ties, so two runs with the same seed pop events
in exactly the same order (no comparison ever reaches the payload).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Any, Final

DONE: Final = 0
ARRIVAL: Final = 1
TIMER: Final = 2
WARM: Final = 3
"""Priorities at equal times: completions free resources before arrivals and timers look for them (a
pre-warmed worker's end of start-up, ``WARM``, is folded into the same step as them: its order among
them changes nothing)."""


@dataclass
class Scheduled:
    """An event popped from the heap (not frozen: see its ``__init__``; nothing changes one)."""

    time_ms: float
    kind: int
    payload: Any

    def __init__(self, time_ms: float, kind: int, payload: Any) -> None:
        # written out (the dataclass keeps it): compiled, an __init__ the dataclass generates stays
        # interpreted Python, and a frozen one cannot be written natively
        self.time_ms, self.kind, self.payload = time_ms, kind, payload


class EventHeap:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = itertools.count()

    def push(self, time_ms: float, kind: int, payload: Any = None) -> None:
        heapq.heappush(self._heap, (time_ms, kind, next(self._seq), payload))

    def pop(self) -> Scheduled:
        t, kind, _, payload = heapq.heappop(self._heap)
        return Scheduled(t, kind, payload)

    def peek_time(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def __len__(self) -> int:
        return len(self._heap)
