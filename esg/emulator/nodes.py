"""Node models: vCPUs, the MIG layout of the node's GPU, and its warm workers.

A node changes its MIG layout only as ESG_Dispatch's :class:`esg.cluster.Fit` says (idle instances
destroyed, one created), and each changed instance costs ``mig_reconfig_ms``. A *worker* is bound to
(function, MIG instance or CPU): it serves any batch size on any vCPU count (a container's CPU quota
can be changed in place), one batch at a time; a batch with no
idle worker of its kind on the node pays the function's cold start, and a worker idle for longer than
its keep-alive (the policy's for that batch, else the driver's) is gone. Destroying an instance kills
its workers. A pre-warmed worker (:meth:`NodeModel.start_prewarm`) holds its instance and vCPUs while
it starts, then waits idle like a worker after a batch (:meth:`NodeModel.warmed`).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from esg import mig
from esg.events import Dispatch, Prewarm
from esg.model import Config
from esg.state import NodeState, Slice, SliceRef

WorkerKey = tuple[str, SliceRef | None]


@dataclass
class StartCost:
    """What a dispatch pays before it runs on this node (not frozen: see its ``__init__``; nothing
    changes one)."""

    reconfig_ms: float
    reconfigured: int
    cold: bool

    def __init__(self, reconfig_ms: float, reconfigured: int, cold: bool) -> None:
        # written out (the dataclass keeps it): compiled, an __init__ the dataclass generates stays
        # interpreted Python, and a frozen one cannot be written natively
        self.reconfig_ms, self.reconfigured, self.cold = reconfig_ms, reconfigured, cold


@dataclass
class NodeModel:
    name: str
    vcpus_total: int
    gpu_model: str | None
    vcpus_free: int = -1
    slices: dict[SliceRef, bool] = field(default_factory=dict)
    """Existing MIG instances -> busy."""
    idle_workers: dict[WorkerKey, list[tuple[float, float]]] = field(default_factory=dict)
    """Idle warm workers by kind -> (the time each expires, the time it became idle), in that order."""
    idle_spans: list[tuple[float, float, SliceRef]] = field(default_factory=list)
    """(from, to, MIG instance) of every idle period of a GPU warm worker that has ended: taken by a
    batch, expired, or killed with its instance (what idle warm workers cost is computed from these)."""
    busy_spans: list[tuple[float, float, SliceRef]] = field(default_factory=list)
    """(from, to, MIG instance) of every batch that ran on an instance and finished."""

    def __post_init__(self) -> None:
        if self.vcpus_free < 0:
            self.vcpus_free = self.vcpus_total
        if mig.is_whole(self.gpu_model) and not self.slices:
            # a whole GPU's slots always exist, as its agent reports them: none is ever created
            assert self.gpu_model is not None
            geo = mig.geometry(self.gpu_model)
            for prof in geo.profiles.values():
                for start in prof.starts:
                    self.slices[SliceRef(prof.name, start)] = False
        self._state: NodeState | None = None
        self._next_expiry = math.inf
        """No idle worker expires before this (exact when ``_expiry_known``)."""
        self._expiry_known = True
        self._refs: list[SliceRef] | None = None
        """The MIG instances in order (None: recomputed after a create or destroy)."""
        self._busy_since: dict[SliceRef, float] = {}
        self.evicted = 0
        """Idle workers stopped for a new worker's GPU memory (``Fit.evict``)."""

    def snapshot(self, now_ms: float) -> NodeState:
        """The node as the scheduler sees it.

        One state object is kept while it holds: :meth:`start` keeps the scheduler's own reservation on
        it when that reservation says exactly what happened (``reserved``), and the emulation applies a
        batch's end (:meth:`finish`, :meth:`warmed`) to it through its snapshot
        (``ClusterSnapshot.finish``, which keeps the snapshot's index up to date). It is built afresh
        only when that cannot be vouched for (a MIG instance destroyed with its workers, a warm worker
        taken that the reservation did not count, a pre-warm started) or when an idle worker's
        keep-alive ran out (:attr:`snapshot_stale`)."""
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
        idle = {k: n for k, ts in self.idle_workers.items() if (n := len(ts) - bisect.bisect_left(ts, (now_ms,)))}
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
            self._next_expiry = min((ts[0][0] for ts in self.idle_workers.values()), default=math.inf)
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
                self._kill_workers(victim, now_ms)
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
        if fit.slice is not None:
            self._busy_since[fit.slice] = now_ms
        for function, n in fit.evict:
            self._evict((function, fit.slice), n, now_ms)
        taken, exact = self._take_worker((d.function, fit.slice), now_ms)
        if not (reserved and exact and not fit.destroy and not fit.evict and taken == (fit.warm_worker is not None)):
            self._state = None
        return StartCost(changed * reconfig_ms, changed, not taken)

    def finish(self, d: Dispatch, now_ms: float, keep_alive_ms: float) -> None:
        """Give the batch's resources back; its worker becomes idle until the keep-alive expires."""
        self._idle(d.function, d.config, d.fit.slice, now_ms, keep_alive_ms)

    def start_prewarm(self, p: Prewarm, now_ms: float, reconfig_ms: float) -> StartCost:
        """Start a worker ahead of its first batch: claim its vCPUs and instance (created where its fit
        says; a pre-warm never destroys one) while it starts. It always pays a cold start."""
        cfg, fit = p.config, p.fit
        if cfg.vcpus > self.vcpus_free:
            raise AssertionError(f"{self.name}: {cfg.vcpus} vCPUs asked, {self.vcpus_free} free")
        if fit.destroy:
            raise AssertionError(f"{self.name}: a pre-warm destroys no MIG instance")
        self.vcpus_free -= cfg.vcpus
        changed = 0
        if fit.slice is not None:
            if fit.create:
                if fit.slice in self.slices:
                    raise AssertionError(f"{self.name}: MIG instance {fit.slice} created twice")
                self._refs = None
                changed = 1
            elif self.slices.get(fit.slice) is not False:
                raise AssertionError(f"{self.name}: MIG instance {fit.slice} is busy or absent")
            self.slices[fit.slice] = True
            self._busy_since[fit.slice] = now_ms
        self._state = None
        return StartCost(changed * reconfig_ms, changed, True)

    def warmed(self, p: Prewarm, now_ms: float, keep_alive_ms: float) -> None:
        """A pre-warmed worker finished starting: its resources are given back and it waits idle for
        ``keep_alive_ms`` (its own, else the driver's), as a worker does after a batch (its start-up is
        paid as a batch's is)."""
        self._idle(p.function, p.config, p.fit.slice, now_ms, keep_alive_ms)

    def _idle(self, function: str, config: Config, ref: SliceRef | None, now_ms: float, keep_alive_ms: float) -> None:
        self.vcpus_free += config.vcpus
        if ref is not None:
            self.slices[ref] = False
            since = self._busy_since[ref]
            del self._busy_since[ref]
            self.busy_spans.append((since, now_ms, ref))
        key = (function, ref)
        expiry = now_ms + keep_alive_ms
        bisect.insort(self.idle_workers.setdefault(key, []), (expiry, now_ms))
        self._next_expiry = min(self._next_expiry, expiry)

    def _expire(self, now_ms: float) -> None:
        """Drop workers idle past their keep-alive. Each list is in expiry order: workers join it
        with ``now + keep_alive`` as time goes forward, and leave it from the end. No list is left
        empty."""
        for key, ts in list(self.idle_workers.items()):
            gone = bisect.bisect_left(ts, (now_ms,))
            if gone:
                self._idle_ended(key, ts[:gone], None)
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
        gone = bisect.bisect_left(pool, (now_ms,))
        if gone:
            self._idle_ended(key, pool[:gone], None)
            del pool[:gone]
            self._expiry_known = False
        taken = bool(pool)
        last = (math.inf, math.inf)
        if taken:
            last = pool.pop()  # the one that would stay longest: the others keep their order
            self._idle_ended(key, [last], now_ms)
        if not pool:
            del self.idle_workers[key]
            # the first expiry stays known when the worker taken was the list's only one and expired
            # after it (some other worker expires first)
            if gone or not self._expiry_known or last[0] <= self._next_expiry:
                self._expiry_known = False
        return taken, not gone

    def _evict(self, key: WorkerKey, n: int, now_ms: float) -> None:
        """Stop ``n`` idle workers of ``key`` (those whose keep-alive ends first, as it would stop them;
        fewer when fewer wait): their GPU memory is what a new worker on the instance needs (``Fit.evict``)."""
        pool = self.idle_workers.get(key)
        if not pool:
            return
        gone = bisect.bisect_left(pool, (now_ms,))  # past their keep-alive already
        stopped = pool[gone:gone + n]  # (the list is in expiry order)
        if gone:
            self._idle_ended(key, pool[:gone], None)
        self._idle_ended(key, stopped, now_ms)
        left = pool[gone + n:]
        if left:
            self.idle_workers[key] = left
        else:
            del self.idle_workers[key]
        self._expiry_known = False
        self.evicted += len(stopped)

    def _kill_workers(self, ref: SliceRef, now_ms: float) -> None:
        for key in [k for k in self.idle_workers if k[1] == ref]:
            self._idle_ended(key, self.idle_workers[key], now_ms)
            del self.idle_workers[key]
        self._expiry_known = False

    def _idle_ended(self, key: WorkerKey, workers: list[tuple[float, float]], now_ms: float | None) -> None:
        """Record the idle periods of GPU workers leaving the pool (``now_ms`` None: they expired)."""
        ref = key[1]
        if ref is None:
            return
        for expiry, since in workers:
            end = expiry if now_ms is None else min(now_ms, expiry)
            self.idle_spans.append((since, end, ref))

    def idle_instance_ms(self, start_ms: float, end_ms: float, now_ms: float) -> dict[str, float]:
        """Per MIG profile, the time within [``start_ms``, ``end_ms``] that an instance was kept for an
        idle warm worker: the union of its workers' idle periods, less the time the instance ran a batch
        (then it is paid as execution). Periods still running count up to ``now_ms``."""
        ref: SliceRef | None
        idle: dict[SliceRef, list[tuple[float, float]]] = {}
        for a, b, ref in self.idle_spans:
            idle.setdefault(ref, []).append((a, b))
        for (_, ref), ts in self.idle_workers.items():
            if ref is not None:
                idle.setdefault(ref, []).extend((since, min(now_ms, e)) for e, since in ts)
        busy: dict[SliceRef, list[tuple[float, float]]] = {}
        for a, b, ref in self.busy_spans:
            busy.setdefault(ref, []).append((a, b))
        for ref, since in self._busy_since.items():
            busy.setdefault(ref, []).append((since, now_ms))
        out: dict[str, float] = {}
        for ref, spans in idle.items():
            kept = kept_idle_ms(spans, busy.get(ref, []), start_ms, end_ms)
            if kept > 0:
                out[ref.profile] = out.get(ref.profile, 0.0) + kept
        return out

    def layout_valid(self) -> bool:
        if self.gpu_model is None:
            return not self.slices
        return mig.place(self.gpu_model, [], [(r.profile, r.start) for r in self.slices]) is not None


def kept_idle_ms(idle: list[tuple[float, float]], busy: list[tuple[float, float]], lo: float, hi: float) -> float:
    """The time within [lo, hi] one MIG instance was kept for an idle warm worker: the union of its
    workers' ``idle`` periods less the ``busy`` ones (its batches, paid as execution). The rule the
    emulator charges idle instances by, and ``esg replay`` charges a live run's by."""
    return _subtract(_union(idle, lo, hi), _union(busy, lo, hi))


def _union(spans: list[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    """The union of ``spans`` clipped to [lo, hi], as sorted disjoint intervals."""
    out: list[tuple[float, float]] = []
    for a, b in sorted((max(a, lo), min(b, hi)) for a, b in spans):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _subtract(kept: list[tuple[float, float]], busy: list[tuple[float, float]]) -> float:
    """Total length of the disjoint sorted intervals ``kept`` outside the disjoint sorted ``busy``."""
    total = sum(b - a for a, b in kept)
    i = 0
    for a, b in kept:
        while i < len(busy) and busy[i][1] <= a:
            i += 1
        j = i
        while j < len(busy) and busy[j][0] < b:
            total -= min(b, busy[j][1]) - max(a, busy[j][0])
            j += 1
    return total
