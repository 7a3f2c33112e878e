"""Pre-warming and keep-alive: workers started ahead of their first batch, and how long idle ones stay.

A policy says *what* it wants warm (:class:`WarmUp`: a function, the configuration whose kind of
instance -- a MIG profile, or CPU -- the worker is for, the nodes to try, how long it may wait idle);
:func:`place_warmup` says *where*, the same for every policy, on the step's snapshot:

* a worker is started only where the configuration fits **without destroying** a MIG instance (a
  speculative start never takes down another function's instance, idle or not) -- a new instance is
  created where the node has room;
* never on a node whose fitting instance already holds an idle worker of the function (a second one
  there could never run: an instance runs one batch at a time);
* the capacity it uses (the instance, the configuration's vCPUs) is reserved on the snapshot while it
  starts, so a step never over-commits a node; once started it is an idle warm worker that the shared
  warm-first routing (:mod:`esg.placement`) gives the next batch of its function and kind.

A pre-warmed worker is then a worker like any other: it waits idle for at most its keep-alive and is
charged as an idle warm worker for that time (the drivers' accounting does not tell them apart).

:class:`Warming` is what a policy uses to count the workers it asked for that are still starting (the
snapshot shows their instance busy, not whose it is), so it does not ask for the same worker twice.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from esg.cluster import ClusterSnapshot, Fit, NodeState, SliceRef
from esg.events import Prewarm
from esg.model import Config
from esg.profiles import Profile


@dataclass(frozen=True)
class WarmUp:
    """A worker a policy wants started before a batch needs it."""

    app: str
    function: str
    config: Config
    """Its kind of instance (``config.gpu``, None for CPU) and the vCPUs it holds while it starts."""
    keep_alive_ms: float | None = None
    """How long it may wait idle for its first batch once started (None: the driver's default)."""
    preferred: tuple[str, ...] = ()
    """Nodes to try first (the rest follow by free capacity)."""
    only_preferred: bool = False
    """Start it on one of ``preferred`` or not at all (e.g. beside its predecessor's batch)."""
    ready_by_ms: float | None = None
    """When the policy expects its first batch (None: not known)."""
    instance: SliceRef | None = None
    """Start it on this existing MIG instance of ``preferred[0]`` (idle, not holding an idle worker of
    the function), or not at all: no instance is created (None: wherever the configuration fits)."""


def place_warmup(snapshot: ClusterSnapshot, want: WarmUp) -> Fit | None:
    """Where ``want`` starts (reserved on ``snapshot``), or None when it fits nowhere it may."""
    gpu = want.config.gpu is not None
    if want.instance is not None:
        return _on_instance(snapshot, want)
    for node in snapshot.route(want.preferred, gpu):
        if want.only_preferred and node not in want.preferred:
            break  # the route lists the preferred nodes first
        fit = snapshot.fit(node, want.config, want.function)
        if fit is None or fit.destroy or fit.evict or fit.warm_worker is not None:
            continue  # (a pre-warm never takes down an instance or another function's idle worker)
        if not gpu and snapshot.nodes[node].idle_workers.get((want.function, None), 0) > 0:
            continue  # CPU workers of the function wait idle here already
        snapshot.reserve(want.config, fit)
        return fit
    return None


def _on_instance(snapshot: ClusterSnapshot, want: WarmUp) -> Fit | None:
    """``want`` on its named instance, when that is idle on its node and the vCPUs are free there."""
    ref = want.instance
    node = snapshot.nodes.get(want.preferred[0]) if want.preferred else None
    if (node is None or ref is None or ref.profile != want.config.gpu or node.vcpus_free < want.config.vcpus
            or node.idle_workers.get((want.function, ref), 0) > 0
            or not any(s.ref == ref and not s.busy for s in node.slices)):
        return None
    fit = Fit(node.name, ref)
    if snapshot.index.stops_for(node.name, ref, want.function) != ():
        return None  # no room for its GPU memory there
    snapshot.reserve(want.config, fit)
    return fit


def spare_instance(node: NodeState, function: str, profile: str,
                   idle_elsewhere: Mapping[str, int] | None = None) -> SliceRef | None:
    """An idle MIG instance of ``profile`` on ``node`` that ``function`` could have a worker added to
    without costing another function its last idle worker of that profile: it holds no worker of
    ``function``, holds idle workers of other functions, and each of those has another idle worker on
    another idle instance of the profile on the node -- or, where ``idle_elsewhere`` is given (per
    function, its idle workers on idle instances of the profile on the other nodes), anywhere on the
    cluster."""
    free = [s.ref for s in node.slices if not s.busy and s.ref.profile == profile]
    holders: dict[SliceRef, list[str]] = {ref: [] for ref in free}
    per_function: dict[str, int] = {}
    for (f, r), n in node.idle_workers.items():
        if n > 0 and r in holders:
            holders[r].append(f)
            per_function[f] = per_function.get(f, 0) + 1
    more = idle_elsewhere or {}
    for ref in free:
        here = holders[ref]
        if here and function not in here and all(per_function[f] + more.get(f, 0) > 1 for f in here):
            return ref
    return None


def smallest_of_kind(profile: Profile, config: Config) -> Config:
    """The profiled configuration of ``config``'s kind of instance holding the fewest vCPUs (then the
    smallest batch): what a pre-warmed worker reserves while it starts. A worker serves any batch and
    vCPU count of its kind (``docs/emulator.md``), so the kind is all that matters for its batches."""
    same = [e.config for e in profile.entries if e.config.gpu == config.gpu]
    return min(same, key=lambda c: (c.vcpus, c.batch)) if same else config


@dataclass(frozen=True)
class _Starting:
    function: str
    kind: str | None
    node: str
    ready_ms: float


class Warming:
    """Pre-warmed workers a policy asked for, counted as warm from the step that placed them until
    their expected end of start-up (then the snapshot shows them: idle, or taken by a batch)."""

    def __init__(self) -> None:
        self._starting: list[_Starting] = []

    def add(self, prewarm: Prewarm, ready_ms: float) -> None:
        self._starting.append(_Starting(prewarm.function, prewarm.config.gpu, prewarm.node, ready_ms))

    def count(self, function: str, now_ms: float, kind: str | None | object = ...,
              nodes: Sequence[str] | None = None) -> int:
        """Workers of ``function`` still starting at ``now_ms`` (of ``kind`` when given; on ``nodes``
        when given)."""
        if any(s.ready_ms < now_ms for s in self._starting):
            self._starting = [s for s in self._starting if s.ready_ms >= now_ms]
        return sum(1 for s in self._starting
                   if s.function == function and (kind is ... or s.kind == kind)
                   and (nodes is None or s.node in nodes))


def idle_of_kind(snapshot: ClusterSnapshot, function: str, kind: str | None,
                 nodes: Sequence[str] | None = None) -> int:
    """Idle warm workers of ``function`` on instances of ``kind`` (None: CPU), on ``nodes`` or any (the
    snapshot's totals, :meth:`ClusterSnapshot.idle_totals`)."""
    if nodes is None:
        return snapshot.idle_totals(function).get(kind, 0)
    total = 0
    for name in snapshot.nodes_with_warm(function):
        if name not in nodes:
            continue
        counts = snapshot.index.idle_by_kind(name).get(function)
        if counts is not None:
            total += counts.get(kind, 0)
    return total


def prewarm_of(want: WarmUp, fit: Fit, prewarm_id: str) -> Prewarm:
    return Prewarm(prewarm_id, want.app, want.function, want.config, fit, want.keep_alive_ms, want.ready_by_ms)


class Gaps:
    """The last ``size`` gaps between a stream's events (an app's request arrivals), with their
    quantiles (recomputed every ``every`` new gaps: a policy asks at every dispatch)."""

    def __init__(self, size: int = 256, every: int = 16):
        self._gaps: deque[float] = deque(maxlen=size)
        self._last: float | None = None
        self._every = every
        self._new = 0
        self._sorted: list[float] = []

    def add(self, t_ms: float) -> None:
        if self._last is not None and t_ms >= self._last:
            self._gaps.append(t_ms - self._last)
            self._new += 1
        self._last = t_ms

    def __len__(self) -> int:
        return len(self._gaps)

    def recent_mean(self, n: int) -> float:
        """The mean of the last ``n`` gaps (of all of them when fewer were seen; 0 when none)."""
        if not self._gaps:
            return 0.0
        k = min(n, len(self._gaps))
        return sum(self._gaps[-i] for i in range(1, k + 1)) / k

    def quantile(self, q: float) -> float:
        if self._new >= self._every or len(self._sorted) != len(self._gaps):
            self._sorted = sorted(self._gaps)
            self._new = 0
        if not self._sorted:
            return 0.0
        return self._sorted[min(len(self._sorted) - 1, int(q * len(self._sorted)))]


class Timed:
    """Pre-warms a policy timed for later (a worker should be ready at a planned time, and starting it
    now would leave it idle before): kept until their start time comes (a heap: a policy asks at
    every step)."""

    def __init__(self) -> None:
        self._items: list[tuple[float, int, WarmUp]] = []
        self._added = itertools.count()

    def add(self, start_ms: float, want: WarmUp) -> None:
        heapq.heappush(self._items, (start_ms, next(self._added), want))

    def due(self, now_ms: float) -> list[WarmUp]:
        """The pre-warms whose start time came, in the order they were added (and forgets them)."""
        items = self._items
        if not items or items[0][0] > now_ms:
            return []
        out = []
        while items and items[0][0] <= now_ms:
            out.append(heapq.heappop(items))
        out.sort(key=lambda item: item[1])
        return [w for _, _, w in out]

    def next_ms(self) -> float | None:
        return self._items[0][0] if self._items else None
