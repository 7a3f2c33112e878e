"""Node models: vCPUs, the MIG layout of the node's GPU, and its warm workers.

A node changes its MIG layout only as ESG_Dispatch's :class:`esg.cluster.Fit` says (idle instances
destroyed, one created), and each changed instance costs ``mig_reconfig_ms``. A *worker* is bound to
(function, MIG instance or CPU): it serves any batch size on any vCPU count (a container's CPU quota
can be changed in place), one batch at a time; a batch with no
idle worker of its kind on the node pays the function's cold start, and a worker idle for longer than
the keep-alive is gone. Destroying an instance kills its workers.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from esg import mig
from esg.cluster import NodeState, Slice, SliceRef
from esg.scheduler import Dispatch

WorkerKey = tuple[str, SliceRef | None]


@dataclass(frozen=True)
class StartCost:
    """What a dispatch pays before it runs on this node."""

    reconfig_ms: float
    reconfigured: int
    cold: bool


@dataclass
class NodeModel:
    name: str
    vcpus_total: int
    gpu_model: str | None
    vcpus_free: int = -1
    slices: dict[SliceRef, bool] = field(default_factory=dict)
    """Existing MIG instances -> busy."""
    idle_workers: dict[WorkerKey, list[float]] = field(default_factory=dict)
    """Idle warm workers by kind -> the times they expire."""

    def __post_init__(self) -> None:
        if self.vcpus_free < 0:
            self.vcpus_free = self.vcpus_total
        self._state: NodeState | None = None
        self._next_expiry = math.inf

    def snapshot(self, now_ms: float) -> NodeState:
        """The node as the scheduler sees it. Rebuilt only when the node changed since the last one: the
        scheduler mutates a snapshot only where it places a batch, and every placement reaches
        :meth:`start`, which marks the node changed."""
        if self._state is None or now_ms >= self._next_expiry:
            self._expire(now_ms)
            idle = {k: len(ts) for k, ts in self.idle_workers.items() if ts}
            self._state = NodeState(self.name, self.vcpus_total, self.vcpus_free, self.gpu_model,
                                    [Slice(ref, busy) for ref, busy in sorted(self.slices.items())],
                                    idle_workers=idle)
            self._next_expiry = min((ts[0] for ts in self.idle_workers.values() if ts), default=math.inf)
        return self._state

    def start(self, d: Dispatch, now_ms: float, reconfig_ms: float) -> StartCost:
        """Claim the batch's resources, apply its MIG change, and take (or miss) a warm worker."""
        self._state = None
        cfg, fit = d.config, d.fit
        if cfg.vcpus > self.vcpus_free:
            raise AssertionError(f"{self.name}: {cfg.vcpus} vCPUs asked, {self.vcpus_free} free")
        self.vcpus_free -= cfg.vcpus
        changed = 0
        if fit.slice is not None:
            for victim in fit.destroy:
                if self.slices.pop(victim, None) is not False:
                    raise AssertionError(f"{self.name}: MIG instance {victim} destroyed while busy or absent")
                self._kill_workers(victim)
                changed += 1
            if fit.create:
                if fit.slice in self.slices:
                    raise AssertionError(f"{self.name}: MIG instance {fit.slice} created twice")
                self.slices[fit.slice] = True
                changed += 1
            elif self.slices.get(fit.slice) is not False:
                raise AssertionError(f"{self.name}: MIG instance {fit.slice} is busy or absent")
            else:
                self.slices[fit.slice] = True
        cold = not self._take_worker((d.function, fit.slice), now_ms)
        return StartCost(changed * reconfig_ms, changed, cold)

    def finish(self, d: Dispatch, now_ms: float, keep_alive_ms: float) -> None:
        """Give the batch's resources back; its worker becomes idle until the keep-alive expires."""
        self._state = None
        self.vcpus_free += d.config.vcpus
        if d.fit.slice is not None:
            self.slices[d.fit.slice] = False
        self.idle_workers.setdefault((d.function, d.fit.slice), []).append(
            now_ms + keep_alive_ms)

    def _expire(self, now_ms: float) -> None:
        """Drop workers idle past their keep-alive. Each list is in expiry order: workers join it
        with ``now + keep_alive`` as time goes forward, and leave it from the end."""
        for ts in self.idle_workers.values():
            gone = bisect.bisect_left(ts, now_ms)
            if gone:
                del ts[:gone]

    def _take_worker(self, key: WorkerKey, now_ms: float) -> bool:
        pool = self.idle_workers.get(key)
        if not pool:
            return False
        del pool[:bisect.bisect_left(pool, now_ms)]
        if not pool:
            del self.idle_workers[key]
            return False
        pool.pop()  # the most recently idle worker: the others keep their expiry order
        return True

    def _kill_workers(self, ref: SliceRef) -> None:
        for key in [k for k in self.idle_workers if k[1] == ref]:
            del self.idle_workers[key]

    def layout_valid(self) -> bool:
        if self.gpu_model is None:
            return not self.slices
        return mig.place(self.gpu_model, [], [(r.profile, r.start) for r in self.slices]) is not None
