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
        """No idle worker expires before this (exact when ``_expiry_known``)."""
        self._expiry_known = True
        self._refs: list[SliceRef] | None = None
        """The MIG instances in order (None: recomputed after a create or destroy)."""

    def snapshot(self, now_ms: float) -> NodeState:
        """The node as the scheduler sees it.

        One state object is kept and brought up to date in place: :meth:`finish` applies its release
        to it, and :meth:`start` keeps the scheduler's own reservation on it when that reservation says
        exactly what happened (``reserved``). It is built afresh only when that cannot be vouched for
        (a MIG instance destroyed with its workers, a warm worker taken that the reservation did not
        count) or when an idle worker's keep-alive ran out."""
        if self._state is not None and now_ms > self._next_expiry and now_ms > self.next_expiry_ms:
            self._state = None
        if self._state is None:
            if now_ms > self.next_expiry_ms:
                self._expire(now_ms)
            self._state = self.fresh_state(now_ms)
        return self._state

    def fresh_state(self, now_ms: float) -> NodeState:
        """The node's state at ``now_ms`` built from scratch (what :meth:`snapshot` must always be
        equivalent to); workers past their keep-alive are not counted."""
        if self._refs is None:
            self._refs = sorted(self.slices)
        slices = self.slices
        idle = {k: n for k, ts in self.idle_workers.items() if (n := len(ts) - bisect.bisect_left(ts, now_ms))}
        return NodeState(self.name, self.vcpus_total, self.vcpus_free, self.gpu_model,
                         [Slice(ref, slices[ref]) for ref in self._refs], idle_workers=idle)

    @property
    def snapshot_stale(self) -> bool:
        """Whether the next :meth:`snapshot` is a new state object (the last one no longer holds)."""
        return self._state is None

    @property
    def next_expiry_ms(self) -> float:
        """When the first idle worker expires (infinite: none idle); it is gone just after."""
        if not self._expiry_known:
            self._next_expiry = min((ts[0] for ts in self.idle_workers.values()), default=math.inf)
            self._expiry_known = True
        return self._next_expiry

    def start(self, d: Dispatch, now_ms: float, reconfig_ms: float, reserved: bool = False) -> StartCost:
        """Claim the batch's resources, apply its MIG change, and take (or miss) a warm worker.

        ``reserved``: the caller placed ``d`` with ``ClusterSnapshot.reserve`` on this node's current
        :meth:`snapshot` state, so that state may already show the claim."""
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
                self._refs = None
                changed += 1
            if fit.create:
                if fit.slice in self.slices:
                    raise AssertionError(f"{self.name}: MIG instance {fit.slice} created twice")
                self.slices[fit.slice] = True
                self._refs = None
                changed += 1
            elif self.slices.get(fit.slice) is not False:
                raise AssertionError(f"{self.name}: MIG instance {fit.slice} is busy or absent")
            else:
                self.slices[fit.slice] = True
        taken, exact = self._take_worker((d.function, fit.slice), now_ms)
        if not (reserved and exact and not fit.destroy and taken == (fit.warm_worker is not None)):
            self._state = None
        return StartCost(changed * reconfig_ms, changed, not taken)

    def finish(self, d: Dispatch, now_ms: float, keep_alive_ms: float) -> None:
        """Give the batch's resources back; its worker becomes idle until the keep-alive expires."""
        self.vcpus_free += d.config.vcpus
        if d.fit.slice is not None:
            self.slices[d.fit.slice] = False
        key = (d.function, d.fit.slice)
        expiry = now_ms + keep_alive_ms
        self.idle_workers.setdefault(key, []).append(expiry)
        self._next_expiry = min(self._next_expiry, expiry)
        state = self._state
        if state is not None:
            state.memo.clear()
            state.vcpus_free += d.config.vcpus
            for s in state.slices:
                if s.ref == d.fit.slice:
                    s.busy = False
            state.idle_workers[key] = state.idle_workers.get(key, 0) + 1

    def _expire(self, now_ms: float) -> None:
        """Drop workers idle past their keep-alive. Each list is in expiry order: workers join it
        with ``now + keep_alive`` as time goes forward, and leave it from the end. No list is left
        empty."""
        for key, ts in list(self.idle_workers.items()):
            gone = bisect.bisect_left(ts, now_ms)
            if gone == len(ts):
                del self.idle_workers[key]
            elif gone:
                del ts[:gone]
        self._expiry_known = False

    def _take_worker(self, key: WorkerKey, now_ms: float) -> tuple[bool, bool]:
        """Take the most recently idle worker of ``key``: (taken?, whether only that changed -- no
        worker past its keep-alive had to be dropped first)."""
        pool = self.idle_workers.get(key)
        if not pool:
            return False, True
        gone = bisect.bisect_left(pool, now_ms)
        if gone:
            del pool[:gone]
            self._expiry_known = False
        taken = bool(pool)
        if taken:
            pool.pop()  # the most recently idle worker: the others keep their expiry order
        if not pool:
            del self.idle_workers[key]
            self._expiry_known = False
        return taken, not gone

    def _kill_workers(self, ref: SliceRef) -> None:
        for key in [k for k in self.idle_workers if k[1] == ref]:
            del self.idle_workers[key]
        self._expiry_known = False

    def layout_valid(self) -> bool:
        if self.gpu_model is None:
            return not self.slices
        return mig.place(self.gpu_model, [], [(r.profile, r.start) for r in self.slices]) is not None
