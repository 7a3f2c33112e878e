"""Orion (OSDI'22) right-sizing adapted to (vCPU, MIG slice) configurations, per invocation.

Orion's best-first search (``docs/baselines.md``, Orion; ``DAG_Modeler/Program.cs``): start **every stage at
its cheapest configuration**; at each step try the one-step increment of every stage separately (the
next rung of the stage's ladder: configurations by cost, each faster than all cheaper ones, like one
more 64 MB of Lambda memory) and keep **the single increment that lowers the app's end-to-end P95
latency the most**; stop when the P95 meets the budget (or no stage can grow). Lambda runs one
invocation per instance, so the ladders hold **batch-1 configurations only**: a stage is sized for one
invocation, and its cost per request is what one invocation costs. The P95 of a stage is its profiled
latency times the P95 of the execution-time noise. The configurations are **fixed for the whole request
when its first stage is scheduled**; later stages use them whatever happens.

Bundling (Orion's second technique: parallel invocations of a stage co-located in one larger instance):
when several jobs of a stage wait, the planned resources run them as one bundle -- the largest profiled
batch the queue fills on the same slice and vCPUs whose P95 still keeps the app's end-to-end P95 within
the SLO the plan was sized for -- offered before the single invocation.

Pre-warming (Orion's third technique): when a stage's batch starts, each downstream stage gets a worker
of the request's planned configuration started so that it is ready when the upstream batch is planned
to end (start at max(now, planned end - the hop to its worker - start-up)), unless an idle one of that kind waits (or starts)
anywhere -- Orion's platform runs one request per instance, so a running instance is no spare. The
platform places it (every node by free capacity) and keeps it its usual time.

Scaling is the platform's in the original (one instance per concurrent invocation); here it is the
generic scale-out rule every baseline without an autoscaler of its own gets
(:class:`esg.policies.common.BacklogGate`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

from esg.cluster import ClusterSnapshot
from esg.events import Dispatch
from esg.model import App, Config
from esg.policies import register
from esg.policies.base import Choice, Policy, PolicyContext, Starting, apps_sharing, prewarm_start_ms
from esg.policies.common import BacklogGate, app_latency, ladder, p95_factor
from esg.policies.points import WarmUps
from esg.prewarm import Timed, WarmUp, idle_of_kind
from esg.queues import AfwQueue

NOISE_CV: Final = 0.05
MAX_BUNDLE: Final = 64
"""More waiting jobs than this bundle as this many would (no profile table has a larger batch)."""


class OrionProposer:
    """Orion's best-first right-sizing, fixed per request at its first stage."""

    def __init__(self, ctx: PolicyContext, noise_cv: float = NOISE_CV):
        self.ctx = ctx
        self.p95 = p95_factor(noise_cv)
        self.expanded = 0
        self.ladders = {f: ladder(p, ctx.prices, lambda c, f=f: c.batch == 1 and ctx.spec(f).allows(c))
                        for f, p in ctx.profiles.items()}
        self._plans: dict[tuple[str, int], dict[str, Config]] = {}
        self._bundles: dict[tuple[str, int, str, int], tuple[Config, ...]] = {}
        """(app, budget, function, jobs waiting) -> the priorities offered: the bundle (if any), then
        the planned single-invocation configuration."""
        self._fixed: dict[str, dict[str, Config]] = {}
        self.trace: list[tuple[str, str]] = []
        """(stage upgraded, its new config label) of the last search: the best-first path."""

    def work_units(self) -> int:
        return self.expanded

    def plan_of(self, request_id: str) -> dict[str, Config] | None:
        """The configurations fixed for a request (None: none fixed, or its last stage dispatched)."""
        return self._fixed.get(request_id)

    def on_app_added(self, ctx: PolicyContext, app: App) -> None:
        self.ctx = ctx
        self.ladders.update({f: ladder(ctx.profiles[f], ctx.prices,
                                       lambda c, f=f: c.batch == 1 and ctx.spec(f).allows(c))
                             for f in app.functions})
        changed = {a.name for a in apps_sharing(ctx, app)}
        self._plans = {k: v for k, v in self._plans.items() if k[0] not in changed}
        # a request keeps its fixed plan only while the tables still hold every configuration of it (a
        # learned table replaces its prior and may lack one): otherwise its next stage is sized again
        self._fixed = {r: p for r, p in self._fixed.items()
                       if all(f not in ctx.profiles or ctx.profiles[f].has(c) for f, c in p.items())}
        self._bundles = {k: v for k, v in self._bundles.items() if k[0] not in changed}

    def right_size(self, app: App, budget_ms: float) -> dict[str, Config]:
        rung = {f: 0 for f in app.functions}
        self.trace = []

        def p95(r):
            return app_latency(app, {f: self.ladders[f][r[f]][1] * self.p95 for f in app.functions})

        current = p95(rung)
        while current > budget_ms:
            best = None
            for f in app.functions:  # try each stage's one-step increment separately
                if rung[f] + 1 >= len(self.ladders[f]):
                    continue
                self.expanded += 1
                trial = dict(rung)
                trial[f] += 1
                lat = p95(trial)
                if best is None or lat < best[0]:
                    best = (lat, f)
            if best is None or best[0] >= current:
                break
            rung[best[1]] += 1
            current = best[0]
            self.trace.append((best[1], self.ladders[best[1]][rung[best[1]]][2].label()))
        return {f: self.ladders[f][rung[f]][2] for f in app.functions}

    def choose(self, app: App, queue: AfwQueue, now_ms: float, snapshot: ClusterSnapshot) -> Choice:
        head = queue.head
        plan = self._fixed.get(head.request_id)
        if plan is None or queue.key[1] not in plan:  # the request's first stage: fix its configurations now
            # (or its app was replaced meanwhile by one with other functions): the app's plan, right-sized
            # once against its SLO -- Orion sizes a DAG offline for its latency target, not per request
            budget = math.floor(app.slo_ms)
            key = (app.name, budget)
            plan = self._plans.get(key)
            if plan is None:
                plan = self._plans[key] = self.right_size(app, budget)
            self._fixed[head.request_id] = plan
        function = queue.key[1]
        budget = math.floor(app.slo_ms)
        waiting = min(len(queue), MAX_BUNDLE)
        key2 = (app.name, budget, function, waiting)
        current = self._plans.get((app.name, budget)) is plan
        priorities = self._bundles.get(key2) if current else None
        if priorities is None:
            priorities = self.bundled(app, plan, function, waiting, budget)
            if current:
                self._bundles[key2] = priorities
        profile = self.ctx.profiles[function]
        return Choice(priorities, latencies={c: profile.latency(c) for c in priorities})

    def bundled(self, app: App, plan: dict[str, Config], function: str, waiting: int,
                budget_ms: float) -> tuple[Config, ...]:
        """The priorities for ``waiting`` jobs of ``function`` under ``plan``: the largest bundle of them
        (a profiled batch of at most ``waiting`` on the planned slice and vCPUs) whose P95 keeps the
        app's end-to-end P95 within ``budget_ms``, then the planned single invocation."""
        c = plan[function]
        profile = self.ctx.profiles[function]
        lat = {f: self.ctx.profiles[f].latency(plan[f]) for f in app.functions}
        best: Config | None = None
        for e in profile.entries:
            b = e.config
            if (b.gpu != c.gpu or b.vcpus != c.vcpus or b.batch <= 1 or b.batch > waiting
                    or not self.ctx.spec(function).allows(b) or (best is not None and b.batch <= best.batch)):
                continue
            trial = dict(lat)
            trial[function] = e.latency_ms
            if app_latency(app, {f: v * self.p95 for f, v in trial.items()}) <= budget_ms:
                best = b
        return (c,) if best is None else (best, c)

    def on_dispatch(self, dispatch: Dispatch) -> None:
        app = self.ctx.apps[dispatch.app]
        if dispatch.function in app.sinks and len(app.sinks) == 1:
            for job in dispatch.jobs:
                self._fixed.pop(job.request_id, None)



class DownstreamPrewarm:
    """Orion's pre-warming: each downstream stage's worker, of the request's planned configuration,
    ready when the upstream batch is planned to end."""

    def __init__(self, ctx: PolicyContext, proposer: OrionProposer, starting: Starting):
        self.ctx = ctx
        self.proposer = proposer
        self.starting = starting
        self._pending = Timed()

    def on_app_added(self, ctx: PolicyContext, app: App) -> None:
        self.ctx = ctx

    def wake_ms(self) -> float | None:
        return self._pending.next_ms()

    def prewarm(self, now_ms: float, snapshot: ClusterSnapshot, dispatched: Sequence[Dispatch],
                asked: WarmUps) -> None:
        for d in dispatched:
            plan = self.proposer.plan_of(d.jobs[0].request_id) if d.jobs else None
            if plan is None:
                continue
            end = now_ms + (d.planned_latency_ms or 0.0)
            for g in self.ctx.apps[d.app].successors(d.function):
                config = plan[g]
                start = max(now_ms, prewarm_start_ms(self.ctx, g, config.gpu is not None, end))
                self._pending.add(start, WarmUp(d.app, g, config, None, ready_by_ms=end))
        out: list[WarmUp] = []
        for want in self._pending.due(now_ms):
            kind = want.config.gpu
            if (idle_of_kind(snapshot, want.function, kind) + self.starting.warming.count(want.function, now_ms, kind)
                    + sum(1 for w in out if w.function == want.function and w.config.gpu == kind)) > 0:
                continue
            out.append(want)
        for want in out:
            asked.add(want)


@register("orion")
def orion_policy(ctx: PolicyContext) -> Policy:
    """Orion: right-sizing fixed per request, placed by free capacity, downstream pre-warming."""
    proposer = OrionProposer(ctx)
    starting = Starting(ctx)
    return Policy("orion", ctx, proposer, [BacklogGate(), starting, DownstreamPrewarm(ctx, proposer, starting)])
