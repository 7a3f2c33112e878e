"""The extension points of a policy: one small interface per decision, implemented only where needed.

A policy is one :class:`Proposer` composed with *plugins* (:class:`esg.policies.base.Policy` is the
composition the scheduler calls). Each plugin implements the points it needs and no others -- after
Kubernetes' scheduler framework, where a plugin is a Filter, a Score or a PostBind only when it says so,
and vLLM v1, whose queue policy is swapped without touching the scheduler loop:

=================  ====================================================  ==========================
point              what it decides or hears                              how many
=================  ====================================================  ==========================
:class:`Proposer`  configurations to try for a queue's head, best first  exactly one
:class:`NodeOrder` the nodes to try first for the head's batch           at most one (none: by free
                                                                         capacity)
:class:`ScaleOutGate`  whether the head may start a new worker           at most one (none: the
                                                                         shared rule)
:class:`AlsoRunning`   workers the gate counts as busy for a queue       any (summed)
:class:`PreWarm`   workers to start after a step's placements            any, in order
:class:`KeepAlive` how long a batch's worker stays warm after it         at most one (none: the
                                                                         driver's default)
``On*``            what happened: an arrival, a choice, a dispatch, a    any, in order
                   batch done, a head left waiting, a pre-warm placed,
                   an app added
=================  ====================================================  ==========================

Contracts: a plugin's hooks are called in the order the plugins were given; a :class:`PreWarm` plugin
sees what the plugins before it asked for this step (:class:`WarmUps`, the step's shared state) and
must not ask twice for what is asked; a plugin that keeps the context (or anything derived from it)
implements :class:`OnAppAdded` and takes the new context there. Plugins are plain objects: the
composition finds a point by the method's presence (these are ``typing.Protocol`` classes), so a
plugin must not inherit no-op hook methods.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from esg.cluster import ClusterSnapshot
from esg.defaults import StartupCosts
from esg.dispatch import Wait
from esg.events import Dispatch, Prewarm, Request
from esg.model import App, Config, Job
from esg.policies.context import Choice, PolicyContext
from esg.prewarm import WarmUp
from esg.queues import AfwQueue

QueueKey = tuple[str, str]
"""An AFW queue: (app, function)."""


@runtime_checkable
class Proposer(Protocol):
    """Proposes configurations for the head batch of a queue (at most ``len(queue)`` jobs per batch)."""

    def choose(self, app: App, queue: AfwQueue, now_ms: float, snapshot: ClusterSnapshot) -> Choice: ...

    def work_units(self) -> int:
        """Search work done so far (e.g. A* nodes expanded); drivers model decision time from it."""
        ...


@runtime_checkable
class NodeOrder(Protocol):
    def preferred_nodes(self, app: App, head: Job, snapshot: ClusterSnapshot) -> list[str]:
        """Nodes to try first for ``head``'s batch (the rest follow by free capacity)."""
        ...


@runtime_checkable
class ScaleOutGate(Protocol):
    def may_scale_out(self, running: int, queued: int, priorities: Sequence[Config],
                      latency_of: Callable[[Config], float], startup: StartupCosts) -> bool:
        """Whether the head batch may start a new worker when no idle one takes it, given the ``running``
        batches the queue counts (its own, plus :class:`AlsoRunning`)."""
        ...


@runtime_checkable
class AlsoRunning(Protocol):
    def also_running(self, key: QueueKey) -> int:
        """Workers the scale-out gate counts as running for queue ``key`` beyond its own batches in flight
        (e.g. busy ones that free in time for its head)."""
        ...


@runtime_checkable
class PreWarm(Protocol):
    def prewarm(self, now_ms: float, snapshot: ClusterSnapshot, dispatched: Sequence[Dispatch],
                asked: WarmUps) -> None:
        """Add to ``asked`` the workers to start now, after the step placed ``dispatched`` (``snapshot``
        shows those placements)."""
        ...

    def wake_ms(self) -> float | None:
        """When to be asked again though nothing happens (None: at the steps that happen anyway)."""
        ...


@runtime_checkable
class KeepAlive(Protocol):
    def keep_alive_ms(self, app: str, function: str, now_ms: float) -> float | None:
        """How long the worker of a batch of ``function`` dispatched at ``now_ms`` stays warm after it
        (None: the driver's default)."""
        ...


@runtime_checkable
class OnArrival(Protocol):
    def on_arrival(self, request: Request, app: App, now_ms: float) -> None: ...


@runtime_checkable
class OnChoice(Protocol):
    def on_choice(self, app: App, queue: AfwQueue, choice: Choice, now_ms: float, snapshot: ClusterSnapshot) -> None:
        """The proposer chose ``choice`` for ``queue``'s head (before it is placed)."""
        ...


@runtime_checkable
class OnDispatch(Protocol):
    def on_dispatch(self, dispatch: Dispatch) -> None: ...


@runtime_checkable
class OnDone(Protocol):
    def on_done(self, dispatch: Dispatch) -> None:
        """A placed batch finished or was lost."""
        ...


@runtime_checkable
class OnWait(Protocol):
    def on_wait(self, app: App, queue: AfwQueue, choice: Choice, wait: Wait) -> None:
        """The head of ``queue`` was not placed from ``choice``, for ``wait``'s reason (at every step it
        waits)."""
        ...


@runtime_checkable
class OnPrewarm(Protocol):
    def on_prewarm(self, prewarm: Prewarm, now_ms: float) -> None:
        """A :class:`~esg.prewarm.WarmUp` asked for was placed (reserved on the step's snapshot)."""
        ...


@runtime_checkable
class OnAppAdded(Protocol):
    def on_app_added(self, ctx: PolicyContext, app: App) -> None:
        """``app`` was learnt or replaced: ``ctx`` is the context now (its profiles replace those of its
        functions, so state of every app sharing one of them is stale)."""
        ...


class WarmUps:
    """The pre-warms asked for in one step, in the order asked: what the :class:`PreWarm` plugins share
    within a step. A want is known by (function, kind of instance, node) -- ``""`` when it names no
    node -- so a plugin can see what another asked for already."""

    def __init__(self) -> None:
        self.asked: list[WarmUp] = []
        self._keys: set[tuple[str, str | None, str]] = set()
        self._functions: set[str] = set()

    @staticmethod
    def key_of(want: WarmUp) -> tuple[str, str | None, str]:
        return want.function, want.config.gpu, want.preferred[0] if want.preferred else ""

    def add(self, want: WarmUp) -> None:
        self.asked.append(want)
        self._keys.add(self.key_of(want))
        self._functions.add(want.function)

    def has(self, function: str, kind: str | None, node: str) -> bool:
        return (function, kind, node) in self._keys

    def has_function(self, function: str) -> bool:
        return function in self._functions

    def functions(self) -> set[str]:
        return self._functions
