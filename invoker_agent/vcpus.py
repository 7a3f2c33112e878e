"""vCPU bookkeeping of one node: which logical vCPUs each running batch holds.

The node advertises ``--vcpus N`` logical vCPUs, ids ``0..N-1``; a batch with ``config.vcpus = k`` gets k
of them, and no id is ever held by two batches at once. A logical id maps onto a host CPU for
``sched_setaffinity``: id ``i`` runs on ``host_cpus[i % len(host_cpus)]``, where ``host_cpus`` are the
CPUs this process may use. When the node advertises no more vCPUs than the host has, the mapping is
one-to-one (exclusive CPUs per batch); when it advertises more (an over-subscribed test node, or a
deliberate over-commit), several logical vCPUs share a host CPU and batches pinned to them share it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence


class VcpuError(ValueError):
    """A request for more vCPUs than the node has at all."""


class VcpuAllocator:
    """Hands out logical vCPU ids (lowest free first); thread-safe; ``acquire`` can wait for a release."""

    def __init__(self, total: int, host_cpus: Sequence[int] | None = None) -> None:
        if total < 1:
            raise VcpuError(f"a node needs at least one vCPU, not {total}")
        self.total = total
        self.host_cpus = tuple(sorted(host_cpus if host_cpus is not None else os.sched_getaffinity(0)))
        if not self.host_cpus:
            raise VcpuError("no host CPU is available to this process")
        self._free = set(range(total))
        self._cond = threading.Condition()

    @property
    def free(self) -> int:
        with self._cond:
            return len(self._free)

    def try_acquire(self, n: int) -> tuple[int, ...] | None:
        """``n`` logical ids now, or None when fewer are free."""
        self._check(n)
        with self._cond:
            return self._take(n)

    def acquire(self, n: int, timeout_s: float | None = None) -> tuple[int, ...] | None:
        """``n`` logical ids, waiting up to ``timeout_s`` (forever when None) for running batches to release."""
        self._check(n)
        with self._cond:
            got: list[tuple[int, ...] | None] = [None]

            def ready() -> bool:
                got[0] = self._take(n)
                return got[0] is not None
            self._cond.wait_for(ready, timeout_s)
            return got[0]

    def release(self, ids: Sequence[int]) -> None:
        with self._cond:
            for i in ids:
                if i in self._free or not 0 <= i < self.total:
                    raise VcpuError(f"vCPU {i} released twice or never allocated")
            self._free.update(ids)
            self._cond.notify_all()

    def host_ids(self, ids: Sequence[int]) -> tuple[int, ...]:
        """The host CPUs to pin logical ``ids`` to (distinct, sorted)."""
        return tuple(sorted({self.host_cpus[i % len(self.host_cpus)] for i in ids}))

    def _check(self, n: int) -> None:
        if n < 1 or n > self.total:
            raise VcpuError(f"a batch asks for {n} vCPUs; this node has {self.total}")

    def _take(self, n: int) -> tuple[int, ...] | None:
        if len(self._free) < n:
            return None
        ids = tuple(sorted(self._free)[:n])
        self._free.difference_update(ids)
        return ids
