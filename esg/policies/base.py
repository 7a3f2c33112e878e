"""The composition the scheduler calls: one proposer and the plugins of :mod:`esg.policies.points`.

:class:`Policy` is the framework of a policy: it sorts its plugins by the points they implement once,
when built, and at each call runs those of the point asked -- the proposer's :meth:`~Policy.choose`
then every :class:`~esg.policies.points.OnChoice`; a head's placement by the shared placer
(:mod:`esg.policies.placer`) with the plugins' node order and scale-out gate; the pre-warm plugins in
order over one :class:`~esg.policies.points.WarmUps`. A policy is a function that builds one
(``esg.policies.register``); ``docs/adding-a-policy.md`` shows how.

The start-up arithmetic the pre-warming plugins share (what a worker's start takes, when a pre-warm must
be placed to be ready in time) and :class:`Starting` (the workers a policy's pre-warms are starting) are
here too, with the types every policy uses (:class:`PolicyContext`, :class:`FunctionSpec`,
:class:`Choice`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import cast

from mypy_extensions import mypyc_attr

from esg.cluster import ClusterSnapshot
from esg.defaults import StartupCosts
from esg.dispatch import Placement, Wait
from esg.events import Dispatch, Prewarm, Request
from esg.model import App, Config, Job
from esg.policies.context import Choice, FunctionSpec, PolicyContext
from esg.policies.placer import Placer
from esg.policies.points import (
    AlsoRunning,
    KeepAlive,
    NodeOrder,
    OnAppAdded,
    OnArrival,
    OnChoice,
    OnDispatch,
    OnDone,
    OnPrewarm,
    OnWait,
    PreWarm,
    Proposer,
    ScaleOutGate,
    WarmUps,
)
from esg.prewarm import Warming, WarmUp
from esg.profiles import Profile
from esg.queues import AfwQueue
from esg.timing import cold_start_ms

__all__ = ["Choice", "FunctionSpec", "Policy", "PolicyContext", "Starting"]


class _GatedPlacer(Placer):
    """The shared placer with a plugin's scale-out gate."""

    def __init__(self, ctx: PolicyContext, gate: ScaleOutGate):
        super().__init__(ctx)
        self._gate = gate

    def may_scale_out(self, running: int, queued: int, priorities: Sequence[Config],
                      latency_of: Callable[[Config], float], startup: StartupCosts) -> bool:
        return self._gate.may_scale_out(running, queued, priorities, latency_of, startup)


def _one(plugins: Sequence[object], point: type, name: str) -> object | None:
    found = [p for p in plugins if isinstance(p, point)]
    if len(found) > 1:
        raise ValueError(f"a policy takes at most one {name} plugin, got {len(found)}")
    return found[0] if found else None


@mypyc_attr(allow_interpreted_subclasses=True)
class Policy:
    """A proposer composed with plugins; the scheduler calls only this."""

    def __init__(self, name: str, ctx: PolicyContext, proposer: Proposer, plugins: Iterable[object] = ()):
        self.name = name
        self.ctx = ctx
        self.proposer = proposer
        self.plugins = (proposer, *plugins)
        every = self.plugins
        gate = cast("ScaleOutGate | None", _one(every, ScaleOutGate, "scale-out gate"))
        self.placer = Placer(ctx) if gate is None else _GatedPlacer(ctx, gate)
        order = cast("NodeOrder | None", _one(every, NodeOrder, "node order"))
        self._order = self.placer.preferred_nodes if order is None else order.preferred_nodes
        keep = cast("KeepAlive | None", _one(every, KeepAlive, "keep-alive"))
        self._keep = None if keep is None else keep.keep_alive_ms
        self._also = tuple(p.also_running for p in every if isinstance(p, AlsoRunning))
        self._prewarms = tuple(p for p in every if isinstance(p, PreWarm))
        self._arrival = tuple(p.on_arrival for p in every if isinstance(p, OnArrival))
        self._choice = tuple(p.on_choice for p in every if isinstance(p, OnChoice))
        self._dispatch = tuple(p.on_dispatch for p in every if isinstance(p, OnDispatch))
        self._done = tuple(p.on_done for p in every if isinstance(p, OnDone))
        self._wait = tuple(p.on_wait for p in every if isinstance(p, OnWait))
        self._prewarmed = tuple(p.on_prewarm for p in every if isinstance(p, OnPrewarm))
        self._added = tuple(p.on_app_added for p in every if isinstance(p, OnAppAdded))
        self.running: Counter[tuple[str, str]] = Counter()
        self.busy: Counter[str] = Counter()
        """Batches in flight per function, over all its queues."""
        """Batches in flight per AFW queue (what the scale-out gate weighs)."""

    def rule(self, kind: type) -> object:
        """This policy's plugin of type ``kind`` (for tests and tools that look into one)."""
        return next(p for p in self.plugins if isinstance(p, kind))

    # -- what the scheduler calls ------------------------------------------------------------------
    def add_app(self, app: App, profiles: Mapping[str, Profile], specs: Mapping[str, FunctionSpec]) -> None:
        """Learn (or replace) an app at run time."""
        self.ctx = replace(self.ctx, apps={**self.ctx.apps, app.name: app},
                           profiles={**self.ctx.profiles, **profiles}, specs={**self.ctx.specs, **specs})
        self._context_changed(app)

    def use_startup_costs(self, mig_reconfig_ms: float) -> None:
        """Plan with ``mig_reconfig_ms`` per MIG instance created or destroyed from now on (the driver
        learnt what the cluster's MIG changes take: :mod:`esg.startup_costs`). What any part worked out
        from the old figure -- the placer's start-up costs, a proposer's start-ups, a rule's windows -- is
        forgotten along the path a new app takes: the placer and every
        :class:`~esg.policies.points.OnAppAdded` plugin get the new context, for every app (each app's
        state derived from the context is stale)."""
        if not math.isfinite(mig_reconfig_ms) or mig_reconfig_ms < 0:
            raise ValueError(f"a MIG change time must be a finite number of ms >= 0, got {mig_reconfig_ms}")
        if mig_reconfig_ms == self.ctx.mig_reconfig_ms:
            return
        self.ctx = replace(self.ctx, mig_reconfig_ms=float(mig_reconfig_ms))
        for name in sorted(self.ctx.apps):
            self._context_changed(self.ctx.apps[name])

    def _context_changed(self, app: App) -> None:
        """``self.ctx`` is new, for ``app`` (learnt, replaced, or planned with new figures): the placer and
        the plugins take it and forget what they worked out for it and the apps sharing its functions."""
        self.placer.add_app(self.ctx, app)
        for hook in self._added:
            hook(self.ctx, app)

    def choose(self, app: App, queue: AfwQueue, now_ms: float, snapshot: ClusterSnapshot) -> Choice:
        choice = self.proposer.choose(app, queue, now_ms, snapshot)
        for hook in self._choice:
            hook(app, queue, choice, now_ms, snapshot)
        return choice

    def preferred_nodes(self, app: App, head: Job, snapshot: ClusterSnapshot) -> list[str]:
        return self._order(app, head, snapshot)

    def place(self, app: App, queue: AfwQueue, choice: Choice, snapshot: ClusterSnapshot,
              preferred: Sequence[str], now_ms: float, no_fit: set[Config]) -> Placement | Wait:
        """Where the head batch runs, or why it waits and what can end the wait (:meth:`Placer.place
        <esg.policies.placer.Placer.place>`, given :meth:`running_for` the queue)."""
        return self.placer.place(app, queue, choice, snapshot, preferred, now_ms, no_fit, self.running_for(queue.key),
                                 self.busy.get(queue.key[1], 0))

    def running_for(self, key: tuple[str, str]) -> int:
        """What the scale-out gate counts as running for queue ``key``: its batches in flight and what
        the :class:`~esg.policies.points.AlsoRunning` plugins add."""
        n = self.running.get(key, 0)
        for also in self._also:
            n += also(key)
        return n

    def rest_ms(self, app: App, function: str) -> float:
        """The fastest the functions after ``function`` can run (what the head must leave them)."""
        return self.placer.rest_ms(app, function)

    def work_units(self) -> int:
        return self.proposer.work_units()

    def on_arrival(self, request: Request, app: App, now_ms: float) -> None:
        for hook in self._arrival:
            hook(request, app, now_ms)

    def on_dispatch(self, dispatch: Dispatch) -> None:
        self.running[(dispatch.app, dispatch.function)] += 1
        self.busy[dispatch.function] += 1
        for hook in self._dispatch:
            hook(dispatch)

    def on_done(self, dispatch: Dispatch) -> None:
        self.running[(dispatch.app, dispatch.function)] -= 1
        self.busy[dispatch.function] -= 1
        for hook in self._done:
            hook(dispatch)

    def on_wait(self, app: App, queue: AfwQueue, choice: Choice, wait: Wait) -> None:
        for hook in self._wait:
            hook(app, queue, choice, wait)

    def prewarm(self, now_ms: float, snapshot: ClusterSnapshot, dispatched: Sequence[Dispatch]) -> list[WarmUp]:
        """Workers to start ahead of their first batch, asked after the step placed ``dispatched``."""
        if not self._prewarms:
            return []
        asked = WarmUps()
        for plugin in self._prewarms:
            plugin.prewarm(now_ms, snapshot, dispatched, asked)
        return asked.asked

    def on_prewarm(self, prewarm: Prewarm, now_ms: float) -> None:
        for hook in self._prewarmed:
            hook(prewarm, now_ms)

    def prewarm_wake_ms(self) -> float | None:
        """The earliest time a pre-warm plugin wants to be asked again (None: none)."""
        wake: float | None = None
        for plugin in self._prewarms:
            t = plugin.wake_ms()
            if t is not None and (wake is None or t < wake):
                wake = t
        return wake

    def keep_alive_ms(self, app: str, function: str, now_ms: float) -> float | None:
        return None if self._keep is None else self._keep(app, function, now_ms)


# -- start-up arithmetic and the workers starting ------------------------------------------------------
def apps_sharing(ctx: PolicyContext, app: App) -> list[App]:
    """``app`` and every other known app with a function of ``app`` (what a replaced profile changes),
    in name order."""
    functions = set(app.functions)
    return [a for _, a in sorted(ctx.apps.items()) if a.name == app.name or functions & set(a.functions)]


def startup_ms(ctx: PolicyContext, function: str, creates_instance: bool) -> float:
    """What starting a worker of ``function`` takes, by the driver's figures: the cold start, plus one MIG
    instance created where ``creates_instance``."""
    cold = cold_start_ms(ctx.profiles[function], ctx.cold_start_scale)
    return cold + (ctx.mig_reconfig_ms if creates_instance else 0.0)


def prewarm_takes_ms(ctx: PolicyContext, function: str, creates_instance: bool) -> float:
    """How long a pre-warm of ``function`` takes from the step that places it until its worker is ready,
    as the drivers time it: the hop to the worker (``stage_overhead_ms``), then the start-up."""
    return ctx.stage_overhead_ms + startup_ms(ctx, function, creates_instance)


def prewarm_start_ms(ctx: PolicyContext, function: str, creates_instance: bool, ready_by_ms: float) -> float:
    """When a pre-warm of ``function`` must be placed for its worker to be ready at ``ready_by_ms``."""
    return ready_by_ms - prewarm_takes_ms(ctx, function, creates_instance)


def may_use_gpu(ctx: PolicyContext, function: str) -> bool:
    """Whether any allowed configuration of ``function`` runs on a MIG instance."""
    spec = ctx.spec(function)
    return any(e.config.gpu is not None and spec.allows(e.config) for e in ctx.profiles[function].entries)


def rewarm_ms(ctx: PolicyContext, function: str) -> float:
    """What starting ``function``'s worker again takes at most: a MIG instance created only when the
    function may run on one (a CPU-only function never waits for a MIG reconfiguration)."""
    return startup_ms(ctx, function, creates_instance=may_use_gpu(ctx, function))


class Starting:
    """Plugin: the workers this policy's pre-warms are starting (:class:`esg.prewarm.Warming`), each
    counted from the step that placed it until its start-up is over (:func:`prewarm_takes_ms`: without
    the hop, the next step could ask for it again)."""

    def __init__(self, ctx: PolicyContext):
        self.ctx = ctx
        self.warming = Warming()

    def on_app_added(self, ctx: PolicyContext, app: App) -> None:
        self.ctx = ctx

    def on_prewarm(self, prewarm: Prewarm, now_ms: float) -> None:
        self.warming.add(prewarm, now_ms + prewarm_takes_ms(self.ctx, prewarm.function, prewarm.fit.create))
