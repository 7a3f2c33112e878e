"""The policy interface every scheduler policy implements (ESG and the baselines).

A :class:`Policy` is what the scheduler calls, a facade over two composed halves: its proposing part --
:meth:`Policy.choose`, with the hooks that feed it (:meth:`~Policy.on_arrival`, :meth:`~Policy.on_dispatch`,
:meth:`~Policy.on_done`, :meth:`~Policy.add_app`) -- says which configurations to try for the head of a
queue, and its placer (:class:`~esg.policies.placer.Placer`, ``Policy.placer``) binds them to a node or
says why the head waits (:mod:`esg.policies.placer` tells the split). A policy writes its own
:meth:`~Policy.choose` and picks a placer: the shared one, or a subclass of it with its own node order or
scale-out rule.

The types both halves use (:class:`PolicyContext`, :class:`FunctionSpec`, :class:`Choice`) are defined in
:mod:`esg.policies.context` and exported here with the interface.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from mypy_extensions import mypyc_attr

from esg import placement
from esg.cluster import ClusterSnapshot
from esg.dispatch import Placement, Wait
from esg.events import Dispatch, Prewarm, Request
from esg.model import App, Config, Job
from esg.policies.context import Choice, FunctionSpec, PolicyContext
from esg.policies.placer import Placer
from esg.prewarm import WarmUp
from esg.profiles import Profile
from esg.queues import AfwQueue
from esg.timing import cold_start_ms

__all__ = ["Choice", "FunctionSpec", "Policy", "PolicyContext"]


@mypyc_attr(allow_interpreted_subclasses=True)
class Policy(ABC):
    """A policy: its proposing part (:meth:`choose` and the hooks) composed with a placer
    (:attr:`placer`); the scheduler calls only this facade."""

    name: str = "policy"

    def __init__(self, ctx: PolicyContext, placer: Placer | None = None):
        self.ctx = ctx
        self.placer = placer if placer is not None else Placer(ctx)
        """Binds this policy's choices to nodes (the shared placer unless the policy brings its own)."""
        self.running: Counter[tuple[str, str]] = Counter()
        """Batches in flight per AFW queue (the placer's scale-out rule looks at them)."""
        # typed Any, not 'Warming | None' / 'Timed | None': the policies that set them use them as set, and
        # compiled (esg_build) a subclass could not narrow the type of an attribute of this class
        self._warming: Any = None
        """Workers this policy's pre-warms are starting (a :class:`Warming`; a pre-warming policy sets
        one)."""
        self._pending: Any = None
        """Pre-warms this policy timed for later (a :class:`Timed`; a policy that times them sets one)."""

    def add_app(self, app: App, profiles: Mapping[str, Profile], specs: Mapping[str, FunctionSpec]) -> None:
        """Learn (or replace) an app at run time; subclasses with per-app state override
        :meth:`on_app_added`."""
        self.ctx = replace(self.ctx, apps={**self.ctx.apps, app.name: app},
                           profiles={**self.ctx.profiles, **profiles}, specs={**self.ctx.specs, **specs})
        self.placer.add_app(self.ctx, app)
        self.on_app_added(app)

    def on_app_added(self, app: App) -> None:
        """Per-app state for ``app`` must be (re)built -- and, since its profiles replace those of its
        functions, per-function state, and per-app state of every app sharing a function with it
        (:meth:`apps_sharing`)."""
        return None

    def apps_sharing(self, app: App) -> list[App]:
        """``app`` and every other known app with a function of ``app`` (what a replaced profile
        changes), in name order."""
        functions = set(app.functions)
        return [a for _, a in sorted(self.ctx.apps.items()) if a.name == app.name or functions & set(a.functions)]

    def on_arrival(self, request: Request, app: App, now_ms: float) -> None:
        """A request arrived (pre-planning policies fix its configurations here)."""
        return None

    def on_dispatch(self, dispatch: Dispatch) -> None:
        """A batch was placed (subclasses that override this call it)."""
        self.running[(dispatch.app, dispatch.function)] += 1

    def on_done(self, dispatch: Dispatch) -> None:
        """A placed batch finished or was lost (subclasses that override this call it)."""
        self.running[(dispatch.app, dispatch.function)] -= 1

    def place(self, app: App, queue: AfwQueue, choice: Choice, snapshot: ClusterSnapshot,
              preferred: Sequence[str], now_ms: float, no_fit: set[Config],
              holds: list[placement.Hold] | None = None) -> Placement | Wait:
        """Where the head batch runs, or why it waits: this policy's placer (:meth:`Placer.place
        <esg.policies.placer.Placer.place>`), given the queue's running batches."""
        return self.placer.place(app, queue, choice, snapshot, preferred, now_ms, no_fit, self.running_for(queue.key),
                                 holds)

    def on_wait(self, app: App, queue: AfwQueue, choice: Choice, wait: Wait) -> None:
        """The head of ``queue`` was not placed from ``choice``, for ``wait``'s reason (told at every step
        it waits, whether its placement was worked out again or a kept hold answered)."""
        return None

    def running_for(self, key: tuple[str, str]) -> int:
        """The batches in flight the placer's scale-out rule weighs for the head of queue ``key``: the
        queue's own (:attr:`running`) unless the policy says otherwise."""
        return self.running.get(key, 0)

    def preferred_nodes(self, app: App, head: Job, snapshot: ClusterSnapshot) -> list[str]:
        """Nodes to try first for ``head``'s batch: this policy's placer's order."""
        return self.placer.preferred_nodes(app, head, snapshot)

    def rest_ms(self, app: App, function: str) -> float:
        """The fastest the functions after ``function`` can run (what the head must leave them)."""
        return self.placer.rest_ms(app, function)

    def work_units(self) -> int:
        """Search work done so far (e.g. A* nodes expanded); drivers model decision time from it."""
        return int(getattr(self, "expanded", 0))

    @abstractmethod
    def choose(self, app: App, queue: AfwQueue, now_ms: float, snapshot: ClusterSnapshot) -> Choice:
        """Configurations to try for the head of ``queue`` (at most ``len(queue)`` jobs per batch)."""

    # -- pre-warming and keep-alive (esg.prewarm); the scheduler asks only when pre-warming is on ------
    def prewarm(self, now_ms: float, snapshot: ClusterSnapshot, dispatched: Sequence[Dispatch]) -> Sequence[WarmUp]:
        """Workers to start ahead of their first batch, asked after the step placed ``dispatched``
        (on ``snapshot``, which shows those placements). Default: none."""
        return ()

    def on_prewarm(self, prewarm: Prewarm, now_ms: float) -> None:
        """A :class:`WarmUp` of this policy was placed (reserved on the step's snapshot): counted as starting
        until its start-up is over -- timed as the drivers time a batch's start: the hop to the worker
        (``PolicyContext.stage_overhead_ms``), then the MIG instance created where its fit needs one and
        the cold start. (Without the hop the worker counted as neither starting nor idle for that long,
        and the next step could ask for it again.)"""
        if self._warming is not None:
            self._warming.add(prewarm, now_ms + self.prewarm_takes_ms(prewarm.function, prewarm.fit.create))

    def prewarm_takes_ms(self, function: str, creates_instance: bool) -> float:
        """How long a pre-warm of ``function`` takes from the step that places it until its worker is
        ready, as the drivers time it: the hop to the worker (``PolicyContext.stage_overhead_ms``), then
        the MIG instance created where ``creates_instance``, then the cold start."""
        return self.ctx.stage_overhead_ms + self.startup_ms(function, creates_instance)

    def prewarm_start_ms(self, function: str, creates_instance: bool, ready_by_ms: float) -> float:
        """When a pre-warm of ``function`` must be placed for its worker to be ready at ``ready_by_ms``:
        that time less all of :meth:`prewarm_takes_ms` -- the hop included, as its end counts it (a start
        that left the hop out made the worker ready one hop late, after the batch it was timed for)."""
        return ready_by_ms - self.prewarm_takes_ms(function, creates_instance)

    def prewarm_wake_ms(self) -> float | None:
        """When this policy next wants to be asked for pre-warms though nothing happens (a window or
        interval it waits for); None: only at the steps that happen anyway."""
        return None if self._pending is None else self._pending.next_ms()

    def keep_alive_ms(self, app: str, function: str, now_ms: float) -> float | None:
        """How long the worker of a batch of ``function`` dispatched at ``now_ms`` stays warm after it;
        None: the driver's default (its ``keep_alive_ms``)."""
        return None

    def startup_ms(self, function: str, creates_instance: bool) -> float:
        """What starting a worker of ``function`` takes, by the driver's figures: the cold start, plus
        one MIG instance created where ``creates_instance``."""
        cold = cold_start_ms(self.ctx.profiles[function], self.ctx.cold_start_scale)
        return cold + (self.ctx.mig_reconfig_ms if creates_instance else 0.0)

    def rewarm_ms(self, function: str) -> float:
        """What starting ``function``'s worker again takes at most: the cold start, plus a MIG instance
        created only when the function may run on one (a CPU-only function -- no GPU configuration in
        its table, or ``esg-gpu`` off -- never waits for a MIG reconfiguration)."""
        return self.startup_ms(function, creates_instance=self.may_use_gpu(function))

    def may_use_gpu(self, function: str) -> bool:
        """Whether any allowed configuration of ``function`` runs on a MIG instance."""
        spec = self.ctx.spec(function)
        return any(e.config.gpu is not None and spec.allows(e.config) for e in self.ctx.profiles[function].entries)
