"""The scheduler step function: AFW queues in, dispatch decisions out.

Both drivers -- the live service (wall clock, Kafka) and the emulator (virtual clock) -- call
``Scheduler.step(now_ms, snapshot, events)`` with what happened since the last step (requests that
arrived, batches that finished) and the cluster as they know it. The scheduler folds the events in
(entry jobs enqueued, successors enqueued once all their predecessors are done, finished requests
reported), then walks the non-empty AFW queues, earliest head deadline first: the policy proposes a
configuration priority list for the head of a queue and its placer places a batch, or answers why the
head waits (a :class:`~esg.dispatch.Wait`, naming the events that can end the wait: :mod:`esg.waits`;
a waiting queue's head is placed again only after one of them). It reserves on the snapshot it is given, so one step never
over-commits a node. After the dispatches, the policy may ask for workers to be started ahead of their
first batch (:mod:`esg.prewarm`; ``StepResult.prewarms``, reserved on the same snapshot), and each
dispatch carries the policy's keep-alive for its worker.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, cast

from esg import admission
from esg.cluster import ClusterSnapshot
from esg.defaults import default_choice, is_default
from esg.dispatch import Placement, Wait, candidate_fits, dispatch, locality_order
from esg.errors import AppError
from esg.events import (
    Arrival,
    BatchDone,
    BatchLost,
    Dispatch,
    Event,
    FunctionDone,
    Prewarm,
    Request,
    RequestOutcome,
    Resume,
)
from esg.explore import Explorer
from esg.model import App, Config, Job
from esg.policies.base import FunctionSpec, Policy
from esg.prewarm import place_warmup, prewarm_of
from esg.profiles import Profile
from esg.queues import AfwQueue, AfwQueues, QueueKey
from esg.slo_split import group_latency
from esg.waits import NO_STARTUP, Until


@dataclass
class StepResult:
    dispatches: list[Dispatch] = field(default_factory=list)
    prewarms: list[Prewarm] = field(default_factory=list)
    """Workers to start ahead of their first batch (capacity reserved on the step's snapshot)."""
    outcomes: list[RequestOutcome] = field(default_factory=list)
    completed: list[FunctionDone] = field(default_factory=list)
    waiting: dict[QueueKey, str] = field(default_factory=dict)
    """Why each queue whose head was not placed waits (the :class:`~esg.dispatch.Wait`'s reason)."""
    wake_at_ms: float | None = None
    """The earliest time a held queue asked to be looked at again (drivers set a timer)."""

    def __init__(self, dispatches: list[Dispatch] | None = None, prewarms: list[Prewarm] | None = None,
                 outcomes: list[RequestOutcome] | None = None, completed: list[FunctionDone] | None = None,
                 waiting: dict[QueueKey, str] | None = None, wake_at_ms: float | None = None) -> None:
        # written out (the dataclass keeps it): compiled, an __init__ the dataclass generates stays
        # interpreted Python, and one of these is made every step
        self.dispatches = [] if dispatches is None else dispatches
        self.prewarms = [] if prewarms is None else prewarms
        self.outcomes = [] if outcomes is None else outcomes
        self.completed = [] if completed is None else completed
        self.waiting = {} if waiting is None else waiting
        self.wake_at_ms = wake_at_ms


REJECTED_KEPT: Final = 100_000
"""How many rejected request ids the scheduler remembers against redelivery."""
_NO_VCPUS: Final = Wait("nothing fits: no free vCPUs on any node")
_POLICY_WAITS: Final = Wait("the policy holds the queue")


@dataclass(slots=True)
class _Waiting:
    """A queue whose head waits, with what its wait was worked out from: the queue's side of the events
    that end it (its head, length, proposal, running batches) and the snapshot whose changes since
    :attr:`seen` its :class:`~esg.waits.Until` weighs."""

    wait: Wait
    head: Job
    queued: int
    running: int
    choice: Any  # not 'object': a compiled (mypyc) dataclass cannot name it
    snapshot: ClusterSnapshot
    nodes: int
    seen: int
    """The snapshot's :attr:`ClusterSnapshot.version` when the nodes were last checked."""
    busy: int
    """The function's batches in flight over all its queues (whether a start may stop other functions'
    idle workers: :func:`esg.placement.place`)."""

    def __init__(self, wait: Wait, head: Job, queued: int, running: int, choice: Any, snapshot: ClusterSnapshot,
                 nodes: int, seen: int, busy: int) -> None:
        self.wait, self.head, self.queued, self.running = wait, head, queued, running  # (see StepResult)
        self.choice, self.snapshot, self.nodes, self.seen, self.busy = choice, snapshot, nodes, seen, busy


@dataclass
class _RequestState:
    request: Request
    slo_ms: float
    done: dict[str, str] = field(default_factory=dict)
    """function -> node it ran on."""
    failed: str | None = None

    def __init__(self, request: Request, slo_ms: float, done: dict[str, str] | None = None,
                 failed: str | None = None) -> None:
        self.request, self.slo_ms = request, slo_ms  # (see StepResult)
        self.done = {} if done is None else done
        self.failed = failed


class Scheduler:
    """AFW queues, the policy (what to run, and its placer: where), and per-request progress through the
    DAG."""

    def __init__(self, apps: Mapping[str, App], policy: Policy, batch_ids: Iterable[str] | None = None,
                 explorer: Explorer | None = None, reuse_waits: bool = True, admission_control: bool = False,
                 prewarm: bool = True, prewarm_ids: Iterable[str] | None = None):
        self.apps = dict(apps)
        self.admission_control = admission_control
        """Answer a request no plan can meet at once, with an error, instead of running it late
        (:mod:`esg.admission`; off by default)."""
        self._fastest_app: dict[str, float] = {}
        self._rejected: dict[str, None] = {}
        """Ids of requests admission control answered (the latest :data:`REJECTED_KEPT`, oldest first): a
        redelivered one is not answered again."""
        self.policy = policy
        self.explorer = explorer
        """Tries configurations the tables lack (online profiles); None: never."""
        self._rest: dict[tuple[str, str], float] = {}
        self._defaults: dict[str, tuple[Profile | None, bool]] = {}
        self.queues = AfwQueues()
        self._requests: dict[str, _RequestState] = {}
        self._in_flight: dict[str, Dispatch] = {}
        self._dead_jobs = False
        self._wake: float | None = None
        self._ids: Iterator[str] | None = iter(batch_ids) if batch_ids is not None else None
        self._next_id = 0
        """The next batch id's number when the caller gives none (``b0``, ``b1``, ...: counted here rather
        than drawn from ``map(str.format, count())``, whose every id is a call through the interpreter)."""
        self.reuse_waits = reuse_waits
        """Keep a waiting head's wait and place the head again only after an event that can end it
        (False: place every waiting head at every step; the outputs are the same -- what the tests of
        the waits compare against)."""
        self._waiting: dict[QueueKey, _Waiting] = {}
        self.prewarm = prewarm
        """Ask the policy for pre-warms and its keep-alive (False: no worker is started ahead of a batch,
        and every worker keeps the driver's default keep-alive)."""
        self._prewarm_ids = iter(prewarm_ids) if prewarm_ids is not None else map("w{}".format, itertools.count())
        self._memory: dict[str, dict[str, int]] = {}
        """Per function and MIG profile, the GPU memory one worker holds there (its table's figures,
        ``Profile.worker_memory``; :mod:`esg.memory`)."""
        self._memory_of: object = None
        """The profiles :attr:`_memory` was read from."""

    # -- folding events in ------------------------------------------------------------------------
    def step(self, now_ms: float, snapshot: ClusterSnapshot, events: Sequence[Event] = ()) -> StepResult:
        out = StepResult()
        for event in events:
            if isinstance(event, Arrival):
                self._arrive(event.request, now_ms, out)
            elif isinstance(event, BatchDone):
                self._finish(event, now_ms, out)
            elif isinstance(event, BatchLost):
                self._requeue(event.batch_id)
            elif isinstance(event, Resume):
                self._resume(event, now_ms, out)
            elif self._requests.pop(event.request_id, None) is not None:
                self._dead_jobs = True
        self._wake = cast("float | None", None)  # not narrowed to None: the calls below set it
        snapshot.use_memory(self._worker_memory())
        self._decide(now_ms, snapshot, out)
        if self.prewarm:
            self._prewarms(now_ms, snapshot, out)
        out.wake_at_ms = self._wake
        return out

    def _worker_memory(self) -> dict[str, dict[str, int]]:
        """Per function, the GPU memory its workers hold, from the policy's tables (the same dict while
        they stay: the snapshot's fits are kept while it is)."""
        profiles = self.policy.ctx.profiles
        if profiles is not self._memory_of:
            self._memory_of = profiles
            memory = {f: per for f, p in profiles.items() if (per := p.worker_memory())}
            if memory != self._memory:
                self._memory = memory
        return self._memory

    def _prewarms(self, now_ms: float, snapshot: ClusterSnapshot, out: StepResult) -> None:
        """The policy's pre-warms after this step's dispatches, each placed and reserved on the snapshot
        (:func:`esg.prewarm.place_warmup`); one that fits nowhere it may is dropped."""
        for want in self.policy.prewarm(now_ms, snapshot, out.dispatches):
            fit = place_warmup(snapshot, want)
            if fit is not None:
                p = prewarm_of(want, fit, next(self._prewarm_ids))
                out.prewarms.append(p)
                self.policy.on_prewarm(p, now_ms)
        wake = self.policy.prewarm_wake_ms()
        if wake is not None and wake > now_ms:
            self._wake = wake if self._wake is None else min(self._wake, wake)

    def _arrive(self, request: Request, now_ms: float, out: StepResult) -> None:
        app = self.apps.get(request.app)
        if app is None:
            raise AppError(f"unknown app {request.app!r}")
        if request.request_id in self._requests or request.request_id in self._rejected:
            return  # a redelivered request: already known, never enqueued (or answered) twice
        slo = app.slo_ms
        if self.admission_control:
            reason = admission.verdict(app, self._fastest_ms(app), request.arrival_ms + slo, now_ms)
            if reason is not None:
                out.outcomes.append(RequestOutcome(request.request_id, app.name, request.arrival_ms, now_ms, slo,
                                                   False, reason, rejected=True))
                self._rejected[request.request_id] = None
                if len(self._rejected) > REJECTED_KEPT:
                    del self._rejected[next(iter(self._rejected))]
                return
        self._requests[request.request_id] = _RequestState(request, slo)
        self.policy.on_arrival(request, app, now_ms)
        for f in app.entries:
            self.queues.push(self._job(request, f, now_ms, slo, None))

    def _resume(self, event: Resume, now_ms: float, out: StepResult) -> None:
        """Take over a request where another scheduler left it (:class:`~esg.events.Resume`)."""
        request = event.request
        app = self.apps.get(request.app)
        if app is None:
            raise AppError(f"unknown app {request.app!r}")
        rid = request.request_id
        if rid in self._requests:
            return
        state = _RequestState(request, app.slo_ms, dict(event.done))
        self._requests[rid] = state
        self.policy.on_arrival(request, app, now_ms)
        running: set[str] = set()
        for d in event.running:
            if d.batch_id not in self._in_flight:
                self._in_flight[d.batch_id] = d
                self.policy.on_dispatch(d)
            for job in d.jobs:
                if job.request_id == rid:
                    running.add(d.function)
        if all(s in state.done for s in app.sinks):
            out.outcomes.append(self._outcome(state, now_ms))
            del self._requests[rid]
            return
        for f in app.functions:
            if f in state.done or f in running:
                continue
            preds = app.predecessors(f)
            if all(p in state.done for p in preds):
                self.queues.push(self._job(request, f, now_ms, state.slo_ms, state.done[preds[-1]] if preds else None))

    def _fastest_ms(self, app: App) -> float:
        """The least time ``app`` can take (:func:`esg.admission.fastest_path_ms`), per app."""
        found = self._fastest_app.get(app.name)
        if found is None:
            ctx = self.policy.ctx
            found = self._fastest_app[app.name] = admission.fastest_path_ms(
                app, ctx.profiles, lambda f, c: ctx.spec(f).allows(c), ctx.stage_overhead_ms)
        return found

    def _job(self, request: Request, function: str, now_ms: float, slo: float, pred_node: str | None) -> Job:
        if self.explorer is not None:
            self.explorer.credit(function)
        return Job(job_id=f"{request.request_id}/{function}", request_id=request.request_id,
                   app=request.app, function=function, arrival_ms=request.arrival_ms,
                   deadline_ms=request.arrival_ms + slo, enqueued_ms=now_ms, pred_node=pred_node)

    def _finish(self, event: BatchDone, now_ms: float, out: StepResult) -> None:
        d = self._in_flight.get(event.batch_id)
        if d is None:
            return  # unknown or already folded: a duplicate result is ignored
        del self._in_flight[event.batch_id]  # (not pop with a default: compiled, that is a generic call)
        self.policy.on_done(d)
        app = self.apps[d.app]
        for job in d.jobs:
            state = self._requests.get(job.request_id)
            if state is None or state.failed:
                continue
            if not event.ok:
                state.failed = event.error or f"{d.function} failed"
                self._dead_jobs = True
                out.outcomes.append(self._outcome(state, now_ms))
                del self._requests[job.request_id]
                continue
            state.done[d.function] = d.node
            out.completed.append(FunctionDone(job.request_id, d.app, d.function, d.node))
            for succ in app.successors(d.function):
                if all(p in state.done for p in app.predecessors(succ)):
                    self.queues.push(self._job(state.request, succ, now_ms, state.slo_ms, d.node))
            if all(s in state.done for s in app.sinks):
                out.outcomes.append(self._outcome(state, now_ms))
                del self._requests[job.request_id]

    def _requeue(self, batch_id: str) -> None:
        d = self._in_flight.pop(batch_id, None)
        if d is None:
            return
        self.policy.on_done(d)
        for job in reversed(d.jobs):
            if job.request_id in self._requests:  # a request answered meanwhile is not run again
                self.queues.push_front(job)

    @staticmethod
    def _outcome(state: _RequestState, now_ms: float) -> RequestOutcome:
        r = state.request
        return RequestOutcome(r.request_id, r.app, r.arrival_ms, now_ms, state.slo_ms,
                              state.failed is None, state.failed)

    # -- deciding -----------------------------------------------------------------------------------
    def _decide(self, now_ms: float, snapshot: ClusterSnapshot, out: StepResult) -> None:
        self._no_fit: set[Config] = set()
        if snapshot.max_free_vcpus() <= 0:
            for queue in self.queues.non_empty():  # every configuration needs a vCPU: nothing can fit
                out.waiting[queue.key] = _NO_VCPUS.reason
            return
        self._drop_dead()
        for queue in self.queues.non_empty():
            while queue.jobs:
                placed = self._place_head(queue, now_ms, snapshot)
                if isinstance(placed, Wait):
                    out.waiting[queue.key] = placed.reason
                    break
                out.dispatches.append(placed)

    def _drop_dead(self) -> None:
        """Jobs of requests that already failed (another branch's error) or were cancelled are not run."""
        if self._dead_jobs:
            for queue in self.queues:
                queue.keep(lambda j: j.request_id in self._requests)
            self._dead_jobs = False

    def _place_head(self, queue: AfwQueue, now_ms: float, snapshot: ClusterSnapshot) -> Dispatch | Wait:
        app = self.apps[queue.key[0]]
        probe = self._explore(app, queue, now_ms, snapshot)
        if probe is not None:
            return probe
        choice = self._choose(app, queue, now_ms, snapshot)
        if not choice.priorities:
            # the policy's own wait: it is asked again at every step, and at its retry time at the latest
            if choice.retry_at_ms is not None:
                self._wake = choice.retry_at_ms if self._wake is None else min(self._wake, choice.retry_at_ms)
            return Wait(choice.reason) if choice.reason else _POLICY_WAITS
        key = queue.key
        waiting = self._waiting.get(key)
        if waiting is not None:
            del self._waiting[key]
            if self._goes_on(waiting, queue, choice, snapshot, now_ms):
                self._waiting[key] = waiting
                self.policy.on_wait(app, queue, choice, waiting.wait)
                return waiting.wait
        preferred = self.policy.preferred_nodes(app, queue.head, snapshot)
        if self._is_default(key[1]):
            # the default rule places too: its configurations in order, the first that fits
            placed = dispatch(snapshot, choice.priorities, preferred, self._no_fit)
            if isinstance(placed, Wait) and snapshot.nodes:
                placed = placed.ending(Until.placed(key[1], 0.0, 0.0, NO_STARTUP, [(choice.priorities, None, False)],
                                                    snapshot))
        else:
            placed = self.policy.place(app, queue, choice, snapshot, preferred, now_ms, self._no_fit)
        if isinstance(placed, Wait):
            if placed.until is not None and self.reuse_waits:
                self._waiting[key] = _Waiting(placed, queue.head, len(queue), self.policy.running_for(key), choice,
                                              snapshot, len(snapshot.nodes), snapshot.version,
                                              self.policy.busy.get(key[1], 0))
            self.policy.on_wait(app, queue, choice, placed)
            return placed
        return self._commit(app, queue, placed, choice.latency_of(placed.config), now_ms)

    def _goes_on(self, waiting: _Waiting, queue: AfwQueue, choice, snapshot: ClusterSnapshot, now_ms: float) -> bool:
        """Whether no event that ends ``waiting`` happened: the same head job, a queue length that changes
        nothing (the same, or both at least the wait's ``deep``), the same proposal, snapshot and
        scale-out answers, the function still with (or still without) a batch in flight, and no node that changed since ended it
        (:meth:`Until.ended_on <esg.waits.Until.ended_on>`)."""
        until = waiting.wait.until
        if until is None:
            return False
        queued, running = len(queue), self.policy.running_for(queue.key)
        # a wait's node events are changes of the snapshot it was worked out on: on another snapshot
        # object (a driver that built its view anew) the head is placed again
        if (queue.head is not waiting.head or waiting.snapshot is not snapshot or len(snapshot.nodes) != waiting.nodes
                or (queued != waiting.queued and min(queued, waiting.queued) < until.deep)
                or (waiting.choice is not choice and waiting.choice != choice)
                or (self.policy.busy.get(queue.key[1], 0) == 0) != (waiting.busy == 0)):
            return False
        if (queued != waiting.queued or running != waiting.running) and not until.same_scale_out(running, queued):
            return False
        for node in snapshot.changed_since(waiting.seen):
            if until.ended_on(snapshot, node, now_ms):
                return False
        waiting.seen = snapshot.version
        waiting.queued, waiting.running = queued, running
        return True

    def _explore(self, app: App, queue: AfwQueue, now_ms: float, snapshot: ClusterSnapshot) -> Dispatch | None:
        """A batch in a configuration the function's table lacks, when the explorer has budget, the
        configuration's latency bound keeps the head job on time, and it fits now (idle capacity)."""
        if self.explorer is None:
            return None
        function = queue.key[1]
        ctx = self.policy.ctx
        profile = ctx.profiles.get(function)
        if profile is None:
            return None
        budget = queue.head.deadline_ms - now_ms - self._rest_ms(app, function)
        probes = self.explorer.probes(function, profile, ctx.spec(function), len(queue), budget, ctx.prices,
                                      ctx.top_k)
        if not probes:
            return None
        preferred = locality_order(app.name, queue.head, snapshot.nodes)
        for probe in probes:
            for config, fit in candidate_fits(snapshot, (probe.config,), preferred, self._no_fit):
                if fit.destroy:
                    continue  # idle capacity only: never take down another function's MIG instance
                snapshot.reserve(config, fit)
                self.explorer.spent(function, config)
                return self._commit(app, queue, Placement(config, fit), probe.bound_ms, now_ms)
        return None

    def _rest_ms(self, app: App, function: str) -> float:
        """The fastest the functions after ``function`` can run, by their tables."""
        key = (app.name, function)
        if key not in self._rest:
            after = tuple(f for f in app.descendants(function) if f != function)
            fastest = {f: min(e.latency_ms for e in self.policy.ctx.profiles[f].entries) for f in after}
            self._rest[key] = group_latency(app, after, fastest) if after else 0.0
        return self._rest[key]

    def _choose(self, app: App, queue: AfwQueue, now_ms: float, snapshot: ClusterSnapshot):
        """The policy's choice; for a function with no profile table, the default rule (esg.defaults),
        whichever policy runs."""
        function = queue.key[1]
        if self._is_default(function):
            return default_choice(self.policy.ctx.profiles[function], self.policy.ctx.spec(function), len(queue))
        return self.policy.choose(app, queue, now_ms, snapshot)

    def _is_default(self, function: str) -> bool:
        """Whether ``function``'s profile is the default rule's (:func:`esg.defaults.is_default`),
        remembered per function while its profile stays (asked twice for every head placed)."""
        profile = self.policy.ctx.profiles.get(function)
        hit = self._defaults.get(function)
        if hit is None or hit[0] is not profile:
            hit = self._defaults[function] = (profile, is_default(profile))
        return hit[1]

    def _commit(self, app: App, queue: AfwQueue, placed: Placement, latency: float | None,
                now_ms: float) -> Dispatch:
        jobs = queue.take(placed.config.batch)
        keep = self.policy.keep_alive_ms(app.name, queue.key[1], now_ms) if self.prewarm else None
        d = Dispatch(self._batch_id(), app.name, queue.key[1], jobs, placed.config, placed.fit, latency, keep)
        self._in_flight[d.batch_id] = d
        self.policy.on_dispatch(d)
        return d

    def _batch_id(self) -> str:
        if self._ids is not None:
            return next(self._ids)
        n = self._next_id
        self._next_id = n + 1
        return "b" + str(n)

    def add_app(self, app: App, profiles: Mapping[str, Profile],
                specs: Mapping[str, FunctionSpec] | None = None) -> None:
        """Register (or replace) an app at run time; the live service learns apps from action metadata."""
        self.apps[app.name] = app
        self.policy.add_app(app, profiles, specs or {})
        self._waiting.clear()
        functions = set(app.functions)  # its profiles replace those of its functions, for every app
        changed = {a.name for a in self.apps.values() if functions & set(a.functions)}
        self._rest = {k: v for k, v in self._rest.items() if k[0] not in changed}
        self._fastest_app = {k: v for k, v in self._fastest_app.items() if k not in changed}

    def use_startup_costs(self, mig_reconfig_ms: float) -> None:
        """Plan with ``mig_reconfig_ms`` per MIG instance created or destroyed from now on (the live
        service's learned figure, :mod:`esg.startup_costs`): the policy forgets what it worked out from
        the old one (:meth:`Policy.use_startup_costs <esg.policies.base.Policy.use_startup_costs>`), and
        every kept wait is placed again (what can end it was worked out with the old start-up)."""
        if mig_reconfig_ms == self.policy.ctx.mig_reconfig_ms:
            return
        self.policy.use_startup_costs(mig_reconfig_ms)
        self._waiting.clear()

    # -- introspection for drivers and metrics ------------------------------------------------------
    def in_flight(self) -> list[Dispatch]:
        return list(self._in_flight.values())

    def pending_requests(self) -> int:
        return len(self._requests)

    def queue_lengths(self) -> dict[QueueKey, int]:
        return self.queues.lengths()
