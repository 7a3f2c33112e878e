"""The node report sent to the heartbeat stream every second (:class:`agent_channel.protocol.Heartbeat`).

Besides the node's vCPUs and MIG slices it names the idle warm workers by (function, vCPUs, slice)
and the batches running and recently answered, which the scheduler needs to tell what the report
already shows from what it reserved since. The batches are read before the workers and slices: a
batch that starts in between shows as a worker taken that the scheduler still reserves (its view is
one worker short, never one too many), and one that ends in between shows running with its worker
idle for at most one heartbeat.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from agent_channel.protocol import Heartbeat, IdleWorkers, PrewarmDone
from esg.cluster import SliceRef
from esg.model import Config
from invoker_agent.slices import SliceManager
from invoker_agent.vcpus import VcpuAllocator
from invoker_agent.workers import WorkerKey, WorkerPool


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

    def of(self, key: WorkerKey) -> tuple[str, Config] | None:
        """The (function, config) ``key`` last served."""
        with self._lock:
            got = self._keys.get(key)
        return None if got is None else (got[0], got[1])

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


class BatchTrack:
    """The batches taken and not yet answered, and those answered in the last ``keep_s`` seconds.

    A scheduler keeps each batch it got a result for on its node's view (the worker idle there) until a
    heartbeat names it answered; one it never sees named stays until a 30 s backstop, and every turn of
    its main loop plans over it. So every answered batch must appear in a heartbeat: the window is a
    time (a few heartbeats), not a count, which a burst of more batches per heartbeat than the count
    used to overflow (thousands of stale claims after a 3,000-activation burst). ``cap`` bounds a
    heartbeat's size under extreme rates; batches beyond it fall back to the scheduler's backstop.
    A pre-warm is named done with its outcome (:class:`~agent_channel.protocol.PrewarmDone`), kept as
    long as its id.
    """

    def __init__(self, keep_s: float = 3.0, cap: int = 20000, clock=time.monotonic) -> None:
        self.keep_s = keep_s
        self.cap = cap
        self.clock = clock
        self._lock = threading.Lock()
        self._running: set[str] = set()
        self._done: deque[tuple[float, str]] = deque()
        self._outcomes: dict[str, PrewarmDone] = {}

    def taken(self, batch_id: str) -> None:
        with self._lock:
            self._running.add(batch_id)

    def answered(self, batch_id: str, prewarm: PrewarmDone | None = None) -> None:
        """``batch_id`` answered (a pre-warm's id: done, with what became of it)."""
        with self._lock:
            self._running.discard(batch_id)
            self._done.append((self.clock(), batch_id))
            if prewarm is not None:     # named done again (delivered twice): what it did, not the repeat
                known = self._outcomes.get(batch_id)
                if known is None or known.outcome == "repeated":
                    self._outcomes[batch_id] = prewarm
            if len(self._done) > self.cap:
                self._forget(self._done.popleft()[1])

    def is_running(self, batch_id: str) -> bool:
        with self._lock:
            return batch_id in self._running

    def view(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        running, done, _ = self.report()
        return running, done

    def report(self) -> tuple[tuple[str, ...], tuple[str, ...], tuple[PrewarmDone, ...]]:
        """The ids running, those answered within ``keep_s``, and the outcomes of the pre-warms among
        them (one read: every pre-warm named done comes with its outcome)."""
        with self._lock:
            horizon = self.clock() - self.keep_s
            while self._done and self._done[0][0] < horizon:
                self._forget(self._done.popleft()[1])
            done = tuple(b for _, b in self._done)
            outcomes = self._outcomes
            return (tuple(sorted(self._running)), done,
                    tuple(outcomes[b] for b in dict.fromkeys(done) if b in outcomes) if outcomes else ())

    def _forget(self, batch_id: str) -> None:
        if batch_id not in self._outcomes:
            return
        if not any(b == batch_id for _, b in self._done):    # (named done twice: kept for the later one)
            del self._outcomes[batch_id]


class HeartbeatBuilder:
    def __init__(self, node: str, memory_mb: int, vcpus: VcpuAllocator, slices: SliceManager,
                 pool: WorkerPool, warm: WarmRegistry, batches: BatchTrack | None = None) -> None:
        self.node = node
        self.batches = batches or BatchTrack()
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
        running, done, prewarmed = self.batches.report()
        status = self.slices.status()
        return Heartbeat(self.node, self.vcpus.total, self.vcpus.free, self.memory_mb, self.slices.gpu_model,
                         status, self.warm.warm(self.pool), draining, seq, int(time.time() * 1000),
                         self.idle(status), running, done, prewarmed)

    def idle(self, status) -> tuple[IdleWorkers, ...]:
        """Idle warm workers by (function, vCPUs, slice); a worker on a slice no longer listed is left out."""
        refs = {s.uuid: s.ref for s in status if s.uuid}
        out: dict[tuple, int] = {}
        for key, n in self.pool.idle_counts().items():
            served = self.warm.of(key)
            if served is None or (key.slice_uuid is not None and key.slice_uuid not in refs):
                continue
            function, config = served
            ref = refs.get(key.slice_uuid) if key.slice_uuid else None
            k = (function, config.vcpus, ref)
            out[k] = out.get(k, 0) + n
        return tuple(IdleWorkers(f, v, r, n) for (f, v, r), n in
                     sorted(out.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or SliceRef("", -1))))
