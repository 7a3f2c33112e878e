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
        return tuple(self.jobs.popleft() for _ in range(min(n, len(self.jobs))))

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

    def push(self, job: Job) -> None:
        key = (job.app, job.function)
        if key not in self._queues:
            self._queues[key] = AfwQueue(key)
        self._queues[key].push(job)

    def push_front(self, job: Job) -> None:
        """Put a job back at the head of its queue (its batch was lost with its node)."""
        key = (job.app, job.function)
        if key not in self._queues:
            self._queues[key] = AfwQueue(key)
        self._queues[key].push_front(job)

    def get(self, key: QueueKey) -> AfwQueue | None:
        return self._queues.get(key)

    def non_empty(self) -> list[AfwQueue]:
        """Queues with waiting jobs, the one whose head has the earliest deadline first."""
        return sorted((q for q in self._queues.values() if q.jobs),
                      key=lambda q: (q.head.deadline_ms, q.key))

    def lengths(self) -> dict[QueueKey, int]:
        return {k: len(q) for k, q in self._queues.items()}

    def __iter__(self) -> Iterator[AfwQueue]:
        return iter(self._queues.values())

    def total(self) -> int:
        return sum(len(q) for q in self._queues.values())
