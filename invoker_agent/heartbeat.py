"""The node report sent to the heartbeat stream every second (:class:`esg.protocol.Heartbeat`)."""

from __future__ import annotations

import threading
import time

from esg.model import Config
from esg.protocol import Heartbeat, SliceStatus
from invoker_agent.runner import WorkerKey, WorkerPool
from invoker_agent.slices import SliceManager
from invoker_agent.vcpus import VcpuAllocator


class WarmRegistry:
    """Which (function, config) each worker key serves, so heartbeats can name warm workers.

    A key is noted before its batch runs (its worker may still be starting); keys without workers are
    forgotten only after ``forget_s``, longer than any cold start.
    """

    def __init__(self, forget_s: float = 3600.0) -> None:
        self.forget_s = forget_s
        self._lock = threading.Lock()
        self._keys: dict[WorkerKey, tuple[str, Config, float]] = {}

    def note(self, key: WorkerKey, function: str, config: Config) -> None:
        with self._lock:
            self._keys[key] = (function, config, time.monotonic())

    def warm(self, pool: WorkerPool) -> tuple[tuple[str, Config], ...]:
        with self._lock:
            items = list(self._keys.items())
        out: set[tuple[str, Config]] = set()
        now = time.monotonic()
        for key, (function, config, noted) in items:
            if pool.warm_count(key) > 0:
                out.add((function, config))
            elif now - noted > self.forget_s:
                with self._lock:
                    self._keys.pop(key, None)
        return tuple(sorted(out, key=lambda fc: (fc[0], fc[1].label())))


class HeartbeatBuilder:
    def __init__(self, node: str, memory_mb: int, vcpus: VcpuAllocator, slices: SliceManager,
                 pool: WorkerPool, warm: WarmRegistry) -> None:
        self.node = node
        self.memory_mb = memory_mb
        self.vcpus = vcpus
        self.slices = slices
        self.pool = pool
        self.warm = warm
        self._seq = 0
        self._lock = threading.Lock()

    def build(self, draining: bool = False) -> Heartbeat:
        with self._lock:
            self._seq += 1
            seq = self._seq
        slices = tuple(SliceStatus(s.ref, s.busy, s.uuid) for s in self.slices.status())
        return Heartbeat(self.node, self.vcpus.total, self.vcpus.free, self.memory_mb, self.slices.gpu_model,
                         slices, self.warm.warm(self.pool), draining, seq, int(time.time() * 1000))
