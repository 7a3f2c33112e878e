"""AFW (application-function-wise) queues: one FIFO of waiting jobs per (app, function)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from esg.model import Job

QueueKey = tuple[str, str]
"""(app name, function name)."""


@dataclass
class AfwQueue:
    key: QueueKey
    jobs: deque[Job] = field(default_factory=deque)

    def __len__(self) -> int:
        return len(self.jobs)

    @property
    def head(self) -> Job:
        return self.jobs[0]

    def push(self, job: Job) -> None:
        self.jobs.append(job)

    def push_front(self, job: Job) -> None:
        self.jobs.appendleft(job)

    def take(self, n: int) -> tuple[Job, ...]:
        jobs = self.jobs
        return tuple([jobs.popleft() for _ in range(min(n, len(jobs)))])  # (a list: compiled, no generator)

    def keep(self, wanted: Callable[[Job], bool]) -> None:
        """Drop the jobs ``wanted`` refuses (order kept)."""
        kept = deque([j for j in self.jobs if wanted(j)])
        if len(kept) != len(self.jobs):
            self.jobs = kept

    def peek(self, n: int) -> tuple[Job, ...]:
        return tuple(self.jobs[i] for i in range(min(n, len(self.jobs))))


class AfwQueues:
    """All AFW queues, created on first use."""

    def __init__(self) -> None:
        self._queues: dict[QueueKey, AfwQueue] = {}
        self._filled: dict[QueueKey, AfwQueue] = {}
        """The queues a job was pushed to since :meth:`non_empty` last found them empty: every non-empty
        queue is among them (jobs only leave a queue otherwise), so :meth:`non_empty` looks at these,
        not at every queue."""

    def push(self, job: Job) -> None:
        self._filling(job).push(job)

    def push_front(self, job: Job) -> None:
        """Put a job back at the head of its queue (its batch was lost with its node)."""
        self._filling(job).push_front(job)

    def _filling(self, job: Job) -> AfwQueue:
        """The queue of ``job``'s (app, function), made if new, and counted among those filled."""
        key = (job.app, job.function)
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = AfwQueue(key)
        self._filled[key] = queue
        return queue

    def get(self, key: QueueKey) -> AfwQueue | None:
        return self._queues.get(key)

    def non_empty(self) -> list[AfwQueue]:
        """Queues with waiting jobs, the one whose head has the earliest deadline first."""
        filled = [q for q in self._filled.values() if q.jobs]
        if len(filled) != len(self._filled):
            self._filled = {q.key: q for q in filled}
        if len(filled) < 2:
            return filled  # (nothing to sort: most steps have one queue waiting, or none)
        return sorted(filled, key=lambda q: (q.head.deadline_ms, q.key))

    def lengths(self) -> dict[QueueKey, int]:
        return {k: len(q) for k, q in self._queues.items()}

    def __iter__(self) -> Iterator[AfwQueue]:
        return iter(self._queues.values())

    def total(self) -> int:
        return sum(len(q) for q in self._queues.values())
