"""ESG rule: pools grown onto the MIG instances ESG holds, while the load seen leaves them room.

Each GPU function's load is its jobs over the last re-warm's time (:meth:`PoolSizing.window_ms`: the
horizon a worker started now is ready for) times its run time per job. While that load keeps at most
``fill_busy`` of the cluster's MIG instances busy, a GPU function with load gets one more worker on a
spare instance (:func:`esg.prewarm.spare_instance` with ``idle_elsewhere``) of a profile ESG_1Q's plan
for a fresh request would use for it (:meth:`PoolSizing.pool_profiles`), the most loaded per worker
first, until every instance of that profile holds one. The held instances then serve ESG's functions as
one pool: a burst finds a worker of each function on every idle instance. An idle instance costs the
same with one warm worker or several: a pool costs cold starts, no MIG change and no instance more.
A function whose cold start fits in its apps' SLOs
(:meth:`~esg.policies.esg_policy.EsgProposer.cold_start_in_time`) gets no pool: a worker started on
demand is in time, and a pool would only take GPU memory other functions' starts need.

One start per node per step, shared with the spare-instance rule; while the load keeps at most
``burst_busy`` of the instances busy, up to ``burst_starts`` may be starting per node at once (the
pools fill before a burst), above it one.

Contract: the checks run cheapest first (a node free to start one, an instance at all, the load, a pool
short of workers, a spare instance possible); each leaves nothing to place when it fails. A function's
pool profiles are planned at the step the rule first meets it past the load gate (planning fills the
shared plan cache, so planning at another step could change later choices).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from typing import Final

from esg.cluster import ClusterSnapshot
from esg.events import Dispatch, Request
from esg.model import App
from esg.policies.base import PolicyContext, rewarm_ms
from esg.policies.points import WarmUps
from esg.policies.rules.shared import EsgParts
from esg.prewarm import WarmUp, spare_instance

FILL_BUSY: Final = 0.3
"""Pools grow only while the load seen keeps at most this share of the MIG instances busy."""
BURST_BUSY: Final = 0.15
"""While the load keeps at most this share busy, up to ``BURST_STARTS`` starts per node at once."""
BURST_STARTS: Final = 3
SERVICE_WEIGHT: Final = 0.2
"""The weight of a batch in the running mean of its function's run time per job."""

Pool = tuple[int, list[str]]
"""A function's workers on its pool profiles, and the profiles where it is thin."""


class PoolSizing:
    def __init__(self, parts: EsgParts, fill_busy: float = FILL_BUSY, burst_busy: float = BURST_BUSY,
                 burst_starts: int = BURST_STARTS):
        self.ctx = parts.ctx
        self.parts = parts
        self.fill_busy, self.burst_busy, self.burst_starts = fill_busy, burst_busy, burst_starts
        self._jobs: dict[str, deque[float]] = {}
        """Per GPU function, the arrival times of its jobs within the last :meth:`window_ms`."""
        self._service: dict[str, float] = {}
        """Per function run on a MIG instance, its run time per job there (hop included), a running mean."""
        self._served: tuple[str, ...] = ()
        """The keys of :attr:`_service`, sorted (they are only ever added)."""
        self._windows: dict[str, float] = {}
        self._profiles: dict[str, tuple[str, ...]] = {}
        self._pools: dict[str, tuple[ClusterSnapshot, tuple[int, int], Pool]] = {}
        """Per function, :meth:`_pool_of` with the marks it was worked out at (the snapshot, its index's
        ``idle_generation`` of the function, its moves in flight), for :attr:`_pools_instances`."""
        self._pools_instances: dict[str, int] = {}

    def on_app_added(self, ctx: PolicyContext, app: App) -> None:
        self.ctx = ctx
        self._windows, self._profiles, self._pools = {}, {}, {}

    def window_ms(self, function: str) -> float:
        """How far back a function's load is counted: what starting one of its workers takes."""
        found = self._windows.get(function)
        if found is None:
            found = self._windows[function] = rewarm_ms(self.ctx, function)
        return found

    def rate(self, function: str, now_ms: float) -> float:
        """Jobs of ``function`` per ms over the last :meth:`window_ms` (the older ones forgotten)."""
        seen = self._jobs.get(function)
        if seen is None:
            return 0.0
        window = self.window_ms(function)
        cut = now_ms - window
        while seen and seen[0] < cut:
            seen.popleft()
        return len(seen) / window if window > 0 else 0.0

    def on_arrival(self, request: Request, app: App, now_ms: float) -> None:
        for f in app.functions:
            if self.parts.proposer.gpu_kinds(f):  # a CPU-only function has no pool on MIG instances
                self._jobs.setdefault(f, deque()).append(now_ms)
                self.rate(f, now_ms)

    def on_dispatch(self, dispatch: Dispatch) -> None:
        if dispatch.config.gpu is not None and dispatch.planned_latency_ms is not None:
            per_job = (dispatch.planned_latency_ms + self.ctx.stage_overhead_ms) / len(dispatch.jobs)
            seen = self._service.get(dispatch.function)
            self._service[dispatch.function] = per_job if seen is None else seen + SERVICE_WEIGHT * (per_job - seen)
            if len(self._served) != len(self._service):
                self._served = tuple(sorted(self._service))

    def wake_ms(self) -> float | None:
        return None

    def prewarm(self, now_ms: float, snapshot: ClusterSnapshot, dispatched: Sequence[Dispatch],
                asked: WarmUps) -> None:
        starts = self.parts.spare_starts
        most = max(self.burst_starts, 1)
        if len(self._profiles) == len(self._service) and all(
                starts.full(node, now_ms, most) for node in snapshot.route((), True)):
            return  # as many starts per node as may be at a time: none may start now
        per_profile = self.instances(snapshot)
        instances = sum(per_profile.values())
        if not instances:
            return
        load = {f: self.rate(f, now_ms) * self._service[f] for f in self._served}
        total = sum(load.values())
        if total > self.fill_busy * instances:
            return  # the instances are busy: a start now takes one from the jobs for seconds
        slots = most if total <= self.burst_busy * instances else 1
        pools = self.thin_pools(snapshot, asked.functions(), load, per_profile)
        if not pools:
            return
        stocked: set[str] = set()
        for node in snapshot.route((), True):
            if not starts.full(node, now_ms, slots):
                stocked.update(snapshot.index.stocked_profiles(node))
        warming = self.parts.starting.warming
        short = sorted((-load[function] / max(workers, 1), function, profile) for function, workers, thin in pools
                       for profile in thin if profile in stocked and not warming.count(function, now_ms, profile))
        if short:
            self._grow(now_ms, snapshot, asked, short, slots)

    @staticmethod
    def instances(snapshot: ClusterSnapshot) -> dict[str, int]:
        """The cluster's MIG instances by profile (:meth:`esg.index.ClusterIndex.instances_total`, summed
        again only when the index's ``instances_generation`` moved; the caller must not change it)."""
        return snapshot.index.instances_total()

    def thin_pools(self, snapshot: ClusterSnapshot, wanted: set[str], load: dict[str, float],
                   per_profile: dict[str, int]) -> list[tuple[str, int, list[str]]]:
        """Per GPU function with load and no pre-warm asked this step (by name): its workers on its pool
        profiles and those profiles where they are on fewer instances than the cluster has; each
        function's finding kept while its workers and the instances per profile stay."""
        if per_profile is not self._pools_instances:
            if per_profile != self._pools_instances:
                self._pools = {}
            self._pools_instances = per_profile
        in_flight = self.parts.in_flight
        pools = []
        for function in self._served:
            if load[function] <= 0.0 or function in wanted or self.parts.proposer.cold_start_in_time(function):
                continue
            profiles = self.pool_profiles(function)
            if not profiles:
                continue
            marks = (snapshot.index.idle_generation(function), in_flight.moves(function))
            seen = self._pools.get(function)
            if seen is not None and seen[0] is snapshot and seen[1] == marks:
                pool = seen[2]
            else:
                pool = self._pool_of(snapshot, function, profiles, per_profile)
                self._pools[function] = (snapshot, marks, pool)
            if pool[1]:
                pools.append((function, pool[0], pool[1]))
        return pools

    def _pool_of(self, snapshot: ClusterSnapshot, function: str, profiles: tuple[str, ...],
                 per_profile: dict[str, int]) -> Pool:
        """``function``'s workers on ``profiles`` (0 when thin on none) and the profiles where it has a
        worker on fewer instances than the cluster has."""
        busy = self.parts.in_flight.by_kind(function)
        idle: dict[str | None, int] | None = None
        thin: list[str] = []
        for q in profiles:
            have, held = per_profile.get(q, 0), busy.get(q, 0)
            if held >= have:
                continue  # its running batches alone hold a worker on every instance of q
            if idle is None:
                idle = snapshot.idle_totals(function)
            if held + idle.get(q, 0) < have:
                thin.append(q)
        if idle is None or not thin:
            return 0, thin
        return sum(busy.get(q, 0) + idle.get(q, 0) for q in profiles), thin

    def pool_profiles(self, function: str) -> tuple[str, ...]:
        """The MIG profiles of ``function``'s configurations on the K cheapest paths ESG_1Q finds for a
        fresh request of each app with it (batches of one, any instance, the per-batch overhead counted)."""
        found = self._profiles.get(function)
        if found is None:
            kinds: set[str] = set()
            proposer = self.parts.proposer
            for _, app in sorted(self.ctx.apps.items()):
                if function in app.functions:
                    fresh = math.floor(app.slo_ms - proposer.before_ms(app, function, True))
                    choice = proposer.plan(app, function, 1, fresh, None, True)
                    if choice is not None:
                        kinds.update(c.gpu for c in choice.priorities if c.gpu is not None)
            found = self._profiles[function] = tuple(sorted(kinds))
        return found

    def _grow(self, now_ms: float, snapshot: ClusterSnapshot, asked: WarmUps,
              short: list[tuple[float, str, str]], slots: int) -> None:
        """For each short pool in order, one worker on a spare instance of its profile on the first node
        (by free capacity) free to start one that has such an instance: one function a step, one start a
        node a step. The idle workers elsewhere are the cluster's (summed once a call) less the node's."""
        starts = self.parts.spare_starts
        placed: set[str] = set()
        totals: dict[str, dict[str, int]] = {}
        for _, function, profile in short:
            if function in placed:
                continue
            for node in snapshot.route((), True):
                if starts.full(node, now_ms, slots) or profile not in snapshot.index.stocked_profiles(node):
                    continue
                state = snapshot.nodes[node]
                total = totals.get(profile)
                if total is None:
                    total = totals[profile] = snapshot.index.idle_by_function_total(profile)
                here = snapshot.index.idle_by_function(node, profile)
                ref = spare_instance(state, function, profile, {f: n - here.get(f, 0) for f, n in total.items()})
                if ref is None:
                    continue
                app = next(name for name, a in sorted(self.ctx.apps.items()) if function in a.functions)
                config = next(e.config for e in self.ctx.profiles[function].entries if e.config.gpu == profile)
                asked.add(WarmUp(app, function, self.parts.smallest.of(function, self.ctx.profiles[function], config),
                                 None, preferred=(node,), only_preferred=True, instance=ref))
                starts.asked[node] = function
                placed.add(function)
                break
