"""Which dispatch offsets may be committed, when batches finish out of order.

Batches run concurrently, so they finish in any order; an offset may only be committed once every
dispatch before it on its partition is finished (run and answered, or skipped). :class:`OffsetTracker`
keeps, per partition, the offsets taken and not yet finished; the commit point is the lowest of those,
or one past the highest taken when none is pending. A restarted agent resumes at the commit point, so
an unfinished batch is read again, never lost. Not thread-safe: the consumer thread owns it.
"""

from __future__ import annotations

from collections.abc import Hashable


class OffsetTracker:
    def __init__(self) -> None:
        self._pending: dict[Hashable, set[int]] = {}
        self._next: dict[Hashable, int] = {}
        self._committed: dict[Hashable, int] = {}

    def taken(self, partition: Hashable, offset: int) -> None:
        self._pending.setdefault(partition, set()).add(offset)
        self._next[partition] = max(self._next.get(partition, 0), offset + 1)

    def finished(self, partition: Hashable, offset: int) -> None:
        self._pending.get(partition, set()).discard(offset)

    def pending(self) -> int:
        return sum(len(p) for p in self._pending.values())

    def to_commit(self) -> dict[Hashable, int]:
        """Partitions whose commit point moved since :meth:`committed` was last told, with that point."""
        out = {}
        for part, nxt in self._next.items():
            pend = self._pending.get(part)
            point = min(pend) if pend else nxt
            if point > self._committed.get(part, -1):
                out[part] = point
        return out

    def committed(self, points: dict[Hashable, int]) -> None:
        self._committed.update(points)


class RecentBatches:
    """The last ``size`` batch ids taken, so a redelivered dispatch is not run twice."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._ids: dict[str, None] = {}

    def add(self, batch_id: str) -> bool:
        """Remember ``batch_id``; False when it was already there."""
        if batch_id in self._ids:
            return False
        self._ids[batch_id] = None
        while len(self._ids) > self.size:
            del self._ids[next(iter(self._ids))]
        return True

    def __contains__(self, batch_id: object) -> bool:
        return batch_id in self._ids
