"""ESG: ESG_1Q (A* with dual-blade pruning and dominator-based SLO distribution) per AFW queue.

For the head job of a queue the budget is what is left of its request's SLO; the search covers the
job's function and every function after it in the app, with batch sizes capped at the jobs waiting in
the queue (by default ESG batches what has arrived: it holds no jobs back to fill a batch). The distinct
configurations of the queue's function across the K cheapest paths form the priority list that
ESG_Dispatch walks.

Start-up is part of the path evaluation: the queue's function may run on a kind of instance (a MIG
profile, or CPU) where none of its workers exists only when the head's budget covers a cold start
(and, on a GPU, a MIG instance created) -- with SLOs of tens of milliseconds and start-ups of seconds,
that keeps ESG on the instances it has, the cheapest of which the search then picks.

Every function on a path counts the per-batch overhead the system adds beyond its profiled run time
(``PolicyContext.stage_overhead_ms``: the dispatch's way to its worker and the result's way back), which
the emulator charges and the live path pays; a plan that fits the budget only on run times alone is
tried next (the fastest chance a head near its deadline still has) before the queue is planned as late.

When no path meets the head's budget (the head is late), the queue's batch is planned as for a
request arriving now (its SLO less the fastest its predecessors can run), on the existing workers
first, then on any instance: the backlog drains in batches sized to the queue on the planned
configurations. (Planning late jobs as "every configuration, fastest first" put DNN stages on CPU
workers of 1.3-1.9 s, which then held every vCPU: at normal and heavy load on the trace nothing ran on
a GPU any more.) Only when not even a fresh request could meet the SLO is every configuration tried,
fastest first.

ESG weighs a scale-out against the backlog (:func:`esg.placement.worth_starting`): a new worker is
started when none of the queue's batches runs, or when the running ones would take longer than a cold
start to work the queue off. (With the shared rule -- scale out whenever more jobs wait than the running
batches take next -- ESG started 40-60 workers per measured half-minute on the trace, each taking an
instance from another function for seconds.)

A head with an on-time plan that waits for a busy worker of its function gets the function one more
worker on a spare instance (``spare_instances``, on by default; :meth:`EsgPolicy._spare`): an idle MIG
instance of the planned profile, already held for other functions that each keep another idle worker on
the node. The instance is paid for already, so the worker costs its cold start only: no MIG change, no
function's last idle worker taken; one such start at a time per node. (At light and normal load on the
trace ESG's misses were jobs waiting for the one busy worker of densenet121 or inceptionv3.)

Pools grown onto the instances ESG holds (``pool_sizing``, on by default; :meth:`EsgPolicy._size_pools`):
while the load seen (each GPU function's jobs over a re-warm's time, times its run time per job) keeps at
most ``POOL_FILL_BUSY`` of the MIG instances busy, a GPU function with load gets one more worker on a
spare instance of a profile ESG_1Q's plan for a fresh request would use for it, the most loaded per worker
first, until every instance of that profile holds one -- before any of its heads waits. Held instances
then serve ESG's functions as one pool: a burst finds a worker of each function on every idle instance,
where before it queued behind the one or two instances holding its function's workers. The instances are
paid already (an idle instance costs the same with one warm worker or several): the pool costs cold
starts, no MIG change and no instance more. While the load keeps at most ``POOL_BURST_BUSY`` of the
instances busy, up to ``POOL_BURST_STARTS`` such starts may be starting per node at once (one asked a step),
so the pools fill before a burst; above it, one at a time.

A head with an on-time plan waits for a worker of its function that frees within its budget
(``wait_for_busy``, on by default; :meth:`EsgPolicy._frees_in_time`): one running a batch of the function
for another app's queue, or idle on an instance busy with another function's batch, by that batch's
planned end. The scale-out rule counts such workers with the queue's own batches, so it starts none
unless the backlog would outlast a cold start: the head waits milliseconds instead of binding to a cold
start of seconds on an instance another function's next burst then lacks.

Three rules are built and off by default (measured on the trace to lose overall, docs/baselines.md):
holding a queue for a larger batch when that is cheaper per request within every held job's budget
(``hold_batches``, :meth:`EsgPolicy._hold`: a :class:`Choice` with ``retry_at_ms``, so the scheduler
step wakes then in both drivers), pre-warming one more worker of a function whose head waits for a busy
one (``widen_pools``), and weighing every batch of the function in flight in the scale-out rule while
the head is on time (``function_scale_out``).

Plans are cached (:mod:`esg.policies.plan_cache`) per (app, function, batch cap, allowed instance
kinds) over the budgets, floored to 1 ms (which keeps the plan on the safe side), for which planning
again would give the same paths: from the planned budget down to the slowest returned path's latency
when the search covered the whole (sub-)app at once, and for exactly the planned budget when the
budget was split into group shares. A plain action's queue is then planned once, not once per
millisecond of its budget.

ESG_Dispatch walks that priority list with locality: the app's home node for entry functions, the
predecessor's node for the others, then the rest by free capacity. ESG's placer (:class:`EsgPlacer`) is
the shared placer (:class:`esg.policies.placer.Placer`: warm workers, start-up against the budget, the
fallback) with that locality order and the scale-out rule above; what is ESG's own is the priority list
(:class:`EsgPolicy`, the proposing part), the locality order and the scale-out rule.

JIT pre-warming along the DAG (after Xanadu): when a batch of f is dispatched, each successor g whose
configuration on the planned cheapest path is of a kind of instance with no worker of g near f's batch
(idle, running or starting, on f's node -- where ESG_Dispatch looks first for g's batch) gets one
started there, timed to be ready when f's batch ends: it starts at max(now, f's planned end - the hop
to g's worker - g's start-up). With start-ups of seconds against batches of milliseconds that is at once: the worker serves
g's later batches, not this one's. A bound on idle cost is available (``bounded_keep_alive=True``, off
by default: on the trace it cost hit rate in most cells): a worker is kept as long as the app's next
request is likely to come (twice the 99th percentile of its last 256 request gaps), never shorter than a
re-warm takes (until then, keeping it costs no more than starting it again) and never longer than the
platform's 10 minutes; with fewer than 16 gaps seen, the platform's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from mypy_extensions import mypyc_attr

from esg.cluster import ClusterSnapshot, SliceRef
from esg.defaults import KEEP_ALIVE_MS
from esg.dispatch import Wait, locality_order
from esg.events import Dispatch, Prewarm
from esg.model import App, Config, Job
from esg.placement import WAITING_FOR_A_WORKER, StartupCosts, worth_starting
from esg.planner import Planner
from esg.policies import register
from esg.policies.base import Choice, Policy, PolicyContext
from esg.policies.placer import Placer
from esg.policies.plan_cache import PlanCache
from esg.prewarm import (
    Gaps,
    Timed,
    Warming,
    WarmUp,
    idle_by_function,
    idle_of_kind,
    instances_by_profile,
    smallest_of_kind,
    spare_instance,
    stocked_profiles,
)
from esg.queues import AfwQueue
from esg.slo_split import group_latency
from esg.timing import cold_start_ms

PLATFORM_KEEP_ALIVE_MS: Final = KEEP_ALIVE_MS
"""The longest ESG keeps an idle worker (OpenWhisk's idle container timeout)."""
GAP_QUANTILE: Final = 0.99
GAP_HEADROOM: Final = 2.0
MIN_GAPS: Final = 16
"""ESG's keep-alive: ``GAP_HEADROOM`` times the ``GAP_QUANTILE`` of the app's request gaps, once
``MIN_GAPS`` were seen."""
HOLD_GAPS: Final = 16
"""Holding for a batch: the next arrival is expected one mean of the app's last ``HOLD_GAPS`` request
gaps from now (and no hold before that many gaps were seen)."""
HOLD_SLACK_SHARE: Final = 0.5
"""Holding for a batch spends at most this share of the head's slack (its budget less the on-time plan's
latency); the rest is left for the queueing of its later stages."""
HOLD_SAVING: Final = 0.25
"""Holding for a batch must save at least this share of the on-time plan's cost per request."""
HOLDING: Final = "holding for a larger batch"
_NO_FUNCTIONS: Final[frozenset[str]] = frozenset()
POOL_FILL_BUSY: Final = 0.3
"""Pools grow onto held instances only while the load seen keeps at most this share of them busy
(:meth:`EsgPolicy._size_pools`)."""
POOL_BURST_BUSY: Final = 0.15
"""While the load seen keeps at most this share of the instances busy, a pool may start up to
``POOL_BURST_STARTS`` workers at a time per node (:meth:`EsgPolicy._size_pools`); above it, one."""
POOL_BURST_STARTS: Final = 3
"""Spare-instance starts at a time per node for the pool rule while the instances are this idle."""
_NO_ENDS: Final[list[float]] = []
WAIT_SLACK_MS: Final = 10.0
"""Waiting for a busy worker (:meth:`EsgPolicy._frees_in_time`): a worker counts as freeing in time only
when the head's batch would still end this much before its budget runs out (room for the queueing of
other heads that wait for the same worker)."""
_NO_BATCHES: Final[dict[str, tuple[tuple[str, str], str | None, float]]] = {}
SERVICE_WEIGHT: Final = 0.2
"""Pool sizing: the weight of a batch in the running mean of its function's run time per job."""


@dataclass(frozen=True)
class _PlannedChoice(Choice):
    """ESG_1Q's choice, with the configuration of every later function on the cheapest path (what JIT
    pre-warming starts for the successors)."""

    downstream: Mapping[str, Config] = field(default_factory=dict)
    app: str = ""
    cost: float = 0.0
    """The cheapest path's cost per request (what holding for a larger batch is weighed against)."""
    latency_ms: float = 0.0
    """The cheapest path's latency."""


class _Recent:
    """Times in the order they came, those before a moving cut forgotten (:meth:`forget_before`): a list
    and the place of the first one kept, where compiled a deque's indexing and ``popleft`` are calls
    through the interpreter (the pool rule counts each function's recent jobs at every step)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.first = 0

    def add(self, t: float) -> None:
        self.times.append(t)

    def forget_before(self, cut: float) -> int:
        """Forget the times before ``cut``; how many are kept."""
        times = self.times
        i = self.first
        n = len(times)
        while i < n and times[i] < cut:
            i += 1
        if i >= 256 and 2 * i >= n:  # the forgotten ones are most of the list: drop them
            del times[:i]
            n -= i
            i = 0
        self.first = i
        return n - i


@dataclass(slots=True)
class _WorkersSeen:
    """What this policy worked out from one function's workers -- idle on the snapshot's nodes, or running
    its batches --, with the marks it was worked out at: the snapshot, its idle-worker counters for the
    function (:attr:`ClusterSnapshot.idle_epoch`, :attr:`ClusterSnapshot.idle_moves`) and the policy's
    count of moves of the function's batches in flight. While the marks stay, so do the workers, and what
    was worked out from them is used again (each is worked out when first asked for after the marks
    moved)."""

    snapshot: ClusterSnapshot
    epoch: int
    idle_moves: int
    busy_moves: int
    pool: tuple[int, list[str]] | None
    """:meth:`EsgPolicy._pool_of` (None: not asked since the marks moved)."""
    kinds: frozenset[str | None] | None
    """:meth:`EsgPolicy._warm_kinds` (None: not asked since the marks moved)."""

    def __init__(self, snapshot: ClusterSnapshot, epoch: int, idle_moves: int, busy_moves: int) -> None:
        # written out: compiled, an __init__ the dataclass generates stays interpreted Python
        self.snapshot, self.epoch, self.idle_moves, self.busy_moves = snapshot, epoch, idle_moves, busy_moves
        self.pool = None
        self.kinds = None


class EsgPlacer(Placer):
    """ESG_Dispatch: the shared placer with ESG's locality order and ESG's scale-out rule."""

    def preferred_nodes(self, app: App, head: Job, snapshot: ClusterSnapshot) -> list[str]:
        """ESG_Dispatch's locality order: the app's home node for entry functions, the predecessor's
        node for the others."""
        return locality_order(app.name, head, snapshot.nodes)

    def may_scale_out(self, running: int, queued: int, priorities: Sequence[Config],
                      latency_of: Callable[[Config], float], startup: StartupCosts) -> bool:
        """ESG weighs a start-up against the backlog: a new worker only when the running batches would
        take longer than a cold start to work the queue off (:func:`esg.placement.worth_starting`)."""
        return worth_starting(running, queued, priorities, latency_of, startup)


@mypyc_attr(allow_interpreted_subclasses=True)
class EsgPolicy(Policy):
    """ESG_1Q proposes (the priority list from the K cheapest paths); :class:`EsgPlacer` places."""

    name = "esg"

    def __init__(self, ctx: PolicyContext, exact: bool = False, bounded_keep_alive: bool = False,
                 hold_batches: bool = False, widen_pools: bool = False, function_scale_out: bool = False,
                 spare_instances: bool = True, pool_sizing: bool = True, wait_for_busy: bool = True):
        super().__init__(ctx, EsgPlacer(ctx))
        self.exact = exact
        self.hold_batches = hold_batches
        """Hold a queue's jobs back for a larger batch when that is cheaper per request and every held
        job still meets its budget (:meth:`_hold`; off by default: measured on the trace it did not help
        at light load and lost overall, docs/baselines.md); False: dispatch what has arrived at once."""
        self.widen_pools = widen_pools
        """Pre-warm one more worker of a function whose head waited for a busy worker of it, on room a
        pre-warm may take (:meth:`_widen`; off by default, measured as above); False: the pool grows only
        by the scale-out rule."""
        self.function_scale_out = function_scale_out
        """While a head is on time, the scale-out rule weighs every batch of its function in flight,
        whichever app's queue it serves (:meth:`running_for`; off by default, measured as above); False:
        only the queue's own."""
        self.spare_instances = spare_instances
        """Add a worker of a function whose head waited for a busy worker of it to a spare instance
        (:meth:`_spare`): an idle MIG instance of the planned profile, already held for other
        functions that each keep an idle worker on another idle instance of it on the node (measured on
        the trace to win, docs/baselines.md); False: no such start."""
        self.pool_sizing = pool_sizing
        """Grow each GPU function's pool onto the MIG instances ESG holds while the load seen leaves them
        room (:meth:`_size_pools`: one more worker on a spare instance at a time per node, no MIG change;
        measured on the trace to win, docs/baselines.md); False: pools grow only when a head waits."""
        self.wait_for_busy = wait_for_busy
        """A head with an on-time plan waits for a worker of its function that frees within its budget
        -- busy with another queue's batch of the function, or idle on an instance busy with another
        function's batch -- instead of starting a new one (:meth:`_frees_in_time`, weighed by the
        scale-out rule through :meth:`running_for`; measured on the trace to win, docs/baselines.md);
        False: only the queue's own batches count."""
        self.wait_slack_ms = WAIT_SLACK_MS
        """How long before the head's budget runs out a worker it waits for must let its batch end
        (``WAIT_SLACK_MS``)."""
        self._now = 0.0
        """The current step's time (set by :meth:`choose` and :meth:`prewarm`): when a batch placed in
        it started."""
        self._ends: dict[str, dict[str, tuple[tuple[str, str], str | None, float]]] = {}
        """Per function, its batches in flight by id: (their queue, MIG profile or None, planned end)."""
        self._slice_end: dict[tuple[str, SliceRef], float] = {}
        """Per (node, MIG instance) running a batch of this policy, the batch's planned end."""
        self._soon: dict[tuple[str, str], int] = {}
        """Per AFW queue whose head is on time, the workers of its function that free within the head's
        budget (:meth:`_frees_in_time`, worked out at its last choice)."""
        self.pool_fill_busy = POOL_FILL_BUSY
        """The busy share of the instances up to which pools grow (``POOL_FILL_BUSY``)."""
        self.pool_burst_busy = POOL_BURST_BUSY
        """The busy share up to which the pool rule starts ``pool_burst_starts`` workers at a time per
        node (``POOL_BURST_BUSY``)."""
        self.pool_burst_starts = POOL_BURST_STARTS
        """Spare-instance starts at a time per node while the instances are that idle (1: one at a time
        at any load, the rule as first built)."""
        self._pool_kinds: dict[str, tuple[str, ...]] = {}
        """Per function, the MIG profiles its pool grows on (:meth:`_pool_profiles`)."""
        self._windows: dict[str, float] = {}
        """Per function, :meth:`_window_ms` (forgotten when an app is added)."""
        self._jobs_seen: dict[str, _Recent] = {}
        """Per function, the arrival times of its jobs within the last :meth:`_window_ms` (every request of
        an app brings each of its functions one job)."""
        self._service: dict[str, float] = {}
        """Per function run on a MIG instance, the run time per job of its batches there: a running mean
        over the last few (``SERVICE_WEIGHT``), hop included."""
        self._served: tuple[str, ...] = ()
        """The keys of :attr:`_service` in order (:meth:`_served_functions`)."""
        self._smallest: dict[tuple[str, str | None], tuple[object, Config]] = {}
        """(function, kind of instance) -> (its profile, :meth:`_smallest_of_kind`)."""
        self._waited: dict[str, tuple[str, Job, Config]] = {}
        """Functions whose on-time head waited for a busy worker this step: (app, the head, the planned
        configuration)."""
        self._spare_asked: dict[str, str] = {}
        """Node -> function of the spare-instance start asked for this step (one a node)."""
        self._spare_until: dict[str, float] = {}
        """Per node, until when the last spare-instance start placed there is starting."""
        self._spare_ends: dict[str, list[float]] = {}
        """Per node, until when each spare-instance start placed there is starting (those still starting
        at the last one placed, and it)."""
        self._on_time: set[tuple[str, str]] = set()
        """The AFW queues whose head had an on-time plan at its last choice."""
        self._short: dict[str, tuple[str, Config]] = {}
        """Functions whose head waited for a busy worker this step: (app, the planned configuration)."""
        self.bounded_keep_alive = bounded_keep_alive
        """Bound idle cost by the gap-based keep-alive (off by default: measured on the trace it cost hit
        rate in most cells, docs/baselines.md; False: the platform's keep-alive, JIT pre-warming only)."""
        self.planners = {name: self._planner(app) for name, app in ctx.apps.items()}
        """ESG_1Q per app, each function's latency counting the per-batch overhead."""
        self.bare = ({name: self._planner(app, 0.0) for name, app in ctx.apps.items()}
                     if ctx.stage_overhead_ms else self.planners)
        """ESG_1Q per app on the profiled latencies alone."""
        self._plans = PlanCache()
        self._before: dict[tuple[str, str, bool], float] = {}
        self._busy: dict[str, dict[str | None, int]] = {}
        """This policy's batches in flight per function, per MIG profile (None for CPU). (Plain dicts, read
        with ``get``: compiled, a ``Counter``'s look-up of a missing key calls its interpreted
        ``__missing__``.)"""
        self._kinds: dict[str, tuple[str, ...]] = {}
        self._startups: dict[str, tuple[float, float]] = {}
        """Per function, :meth:`_startup_ms` (forgotten when an app is added)."""
        self._batches: dict[str, tuple[int, ...]] = {}
        self._held_head: dict[tuple[str, str], str] = {}
        """The job each AFW queue was last held for (its head then): a head is held once."""
        self.searches = 0
        self.expanded = 0
        self._chosen: dict[tuple[str, str], Choice] = {}
        """The last choice per AFW queue not yet dispatched from (the one its next dispatch is placed from)."""
        self._batch_choice: dict[str, _PlannedChoice] = {}
        """The choice each batch in flight was placed from, by batch id (kept until its pre-warms are
        asked for, or it ends): several batches of one queue dispatched in one step each pre-warm their
        own plan's successors."""
        self._busy_on: dict[tuple[str, str | None, str], int] = {}
        """This policy's batches in flight per (function, MIG profile or None, node)."""
        self._busy_moves: dict[str, int] = {}
        """Per function, how many times its count of batches in flight (:attr:`_busy`) moved."""
        self._workers_seen: dict[str, _WorkersSeen] = {}
        """Per function, what was last worked out from its workers (:meth:`_seen`)."""
        self._instances_summed: tuple[ClusterSnapshot | None, int, dict[str, int]] = (None, -1, {})
        """The snapshot and its ``instances_epoch`` when the nodes' instance counts (:meth:`_instances`) were
        last summed, and their sum."""
        self._pools_instances: dict[str, int] = {}
        """The cluster's instances per profile that the pools in :attr:`_workers_seen` were found on."""
        self._warming = Warming()
        self._pending = Timed()
        self._gaps: dict[str, Gaps] = {}

    def _planner(self, app: App, overhead: float | None = None) -> Planner:
        over = self.ctx.stage_overhead_ms if overhead is None else overhead
        return Planner(app, {f: self.ctx.profiles[f] for f in app.functions}, self.ctx.prices,
                       self.ctx.max_group, self.exact, stage_overhead_ms=over)

    def on_app_added(self, app: App) -> None:
        changed = {a.name for a in self.apps_sharing(app)}
        for a in self.apps_sharing(app):
            self.planners[a.name] = self._planner(a)
            if self.bare is not self.planners:
                self.bare[a.name] = self._planner(a, 0.0)
            self._plans.drop_app(a.name)
        self._before = {k: v for k, v in self._before.items() if k[0] not in changed}
        self._kinds = {}
        self._startups = {}
        self._batches = {}
        self._pool_kinds = {}
        self._workers_seen = {}
        self._windows = {}
        self._chosen = {k: v for k, v in self._chosen.items() if k[0] not in changed}
        self._batch_choice = {b: c for b, c in self._batch_choice.items() if c.app not in changed}

    def choose(self, app: App, queue: AfwQueue, now_ms: float, snapshot: ClusterSnapshot) -> Choice:
        self._now = now_ms
        self._on_time.discard(queue.key)
        choice = self._choose(app, queue, now_ms, snapshot)
        self._chosen[queue.key] = choice
        if self.wait_for_busy:
            if queue.key in self._soon:  # (del, not pop with a default: compiled, that is a generic call)
                del self._soon[queue.key]
            if queue.key in self._on_time and choice.priorities:
                soon = self._frees_in_time(app, queue, choice, now_ms, snapshot)
                if soon:
                    self._soon[queue.key] = soon
        return choice

    def _frees_in_time(self, app: App, queue: AfwQueue, choice: Choice, now_ms: float,
                       snapshot: ClusterSnapshot) -> int:
        """The workers of the head's function, on a MIG profile of ``choice``, that free early enough
        for the head's batch to run on them within its budget (less the per-batch overhead and
        :attr:`wait_slack_ms`): those running a batch of the function for another queue (a worker belongs to
        its function, not to a queue), and idle ones on an instance busy with another function's batch
        (the pool and spare-instance rules put several functions' workers on one instance), each by its
        batch's planned end. A batch of the function takes milliseconds; a new worker, a cold start of
        seconds and an instance another function's next burst then misses."""
        function = queue.key[1]
        budget = queue.head.deadline_ms - now_ms - self.rest_ms(app, function)
        profile = self.ctx.profiles[function]
        until: dict[str, float] = {}
        for c in choice.priorities:
            if c.gpu is not None:
                latency = choice.latencies.get(c)
                run = profile.latency(c) if latency is None else latency
                t = now_ms + budget - run - self.ctx.stage_overhead_ms - self.wait_slack_ms
                if t > until.get(c.gpu, -math.inf):
                    until[c.gpu] = t
        if not until:
            return 0
        soon = 0
        for key, gpu, end in self._ends.get(function, _NO_BATCHES).values():
            if key != queue.key and gpu is not None and end <= until.get(gpu, -math.inf):
                soon += 1
        idle = snapshot.idle_totals(function)
        for kind in until:
            if kind in idle:
                break
        else:
            return soon  # no idle worker of the function on any of the profiles
        for name in snapshot.nodes_with_warm(function):
            state = snapshot.nodes[name]
            for s in state.slices:
                if s.busy and s.ref.profile in until and state.idle_workers.get((function, s.ref), 0) > 0:
                    frees = self._slice_end.get((name, s.ref))
                    if frees is not None and frees <= until[s.ref.profile]:
                        soon += 1
        return soon

    def _choose(self, app: App, queue: AfwQueue, now_ms: float, snapshot: ClusterSnapshot) -> Choice:
        function = queue.key[1]
        # the jobs waiting cap every batch of the plan; beyond the app's largest batch the cap changes
        # nothing, and one cache entry serves every longer queue (a burst's queue lengths all differ)
        cap = min(len(queue), self.planners[app.name].largest_batch)
        head = queue.head
        budget = math.floor(head.deadline_ms - now_ms)
        warm = self._warm_kinds(function, snapshot)
        # start-up inside the path evaluation: a configuration on a kind of instance (a MIG profile, or
        # CPU) where no worker of the function exists pays a cold start, and a MIG instance created,
        # before it runs -- allowed only when the head's budget covers that
        kinds = self._kinds_within(function, warm, budget)
        # with the per-batch overhead counted first; when no such path meets the budget, on the profiled
        # latencies alone (the fastest chance the head still has) before the queue is planned as late
        paddings = (True, False) if self.ctx.stage_overhead_ms else (False,)
        for padded in paddings:
            choice = self._cached(app, function, cap, budget, kinds, padded)
            if choice is not None:
                self._on_time.add(queue.key)
                if self.hold_batches and padded == paddings[0] and isinstance(choice, _PlannedChoice):
                    held = self._hold(app, queue, now_ms, warm, choice, padded)
                    if held is not None:
                        return held
                return choice
        # the head is late, or no path meets what it has left: plan the queue's batch as for a request
        # arriving now, so the backlog drains in batches -- on the existing workers when a plan there
        # meets a fresh budget, else on new ones (the shared scale-out rule then decides)
        for padded in paddings:
            fresh = math.floor(head.deadline_ms - head.arrival_ms - self._before_ms(app, function, padded))
            for allowed in ((warm, None) if warm else (None,)):
                choice = self._cached(app, function, cap, fresh, allowed, padded)
                if choice is not None:
                    return choice
        return self._fastest_choice(app, function, cap)

    def _kinds_within(self, function: str, warm: frozenset[str | None], budget: float) -> frozenset[str | None]:
        """The kinds of instance ``function`` may run on with ``budget`` left: where a worker of it exists
        (``warm``), and where a new one's start-up (a cold start, and a MIG instance created on a GPU)
        fits the budget."""
        startup = self._startup_ms(function)
        if budget < startup[0] and budget < startup[1]:
            return warm  # no start-up fits (budgets of milliseconds, start-ups of seconds)
        return frozenset(warm | {k for k in (None, *self._gpu_kinds(function)) if budget >= startup[k is not None]})

    # -- holding a queue for a larger batch ----------------------------------------------------------
    def _hold(self, app: App, queue: AfwQueue, now_ms: float, warm: frozenset[str | None], now: _PlannedChoice,
              padded: bool) -> Choice | None:
        """A choice that holds the queue until more jobs are expected, or None to dispatch ``now`` (the
        on-time plan for the jobs waiting).

        With ``n`` jobs waiting and ``b`` the function's next profiled batch above ``n`` (none: the queue
        fills the largest batch already, dispatch at once), the missing ``b - n`` jobs are expected in
        ``b - n`` mean recent request gaps of the app (every request brings each function one job). The
        queue waits until then when ESG_1Q, planned for the budget the earliest deadline of the waiting
        jobs leaves at that time, finds a path with batches up to ``b`` cheaper per request than ``now``'s
        -- and a path with the batch of ``n`` still meets that budget, so that if the jobs do not come the
        queue is dispatched then, within every held job's budget. The scheduler wakes at that time
        (``Choice.retry_at_ms``); a job that arrives before looks at the queue again."""
        function = queue.key[1]
        n = len(queue)
        if self._held_head.get(queue.key) == queue.head.job_id:
            return None  # held once already: no job came in time
        target = next((b for b in self._allowed_batches(function) if b > n), None)
        gaps = self._gaps.get(app.name)
        if target is None or gaps is None or len(gaps) < HOLD_GAPS:
            return None
        wait = (target - n) * gaps.recent_mean(HOLD_GAPS)
        deadline = min(j.deadline_ms for j in queue.jobs)
        if wait <= 0 or wait > HOLD_SLACK_SHARE * (deadline - now_ms - now.latency_ms):
            return None
        wake = now_ms + wait
        budget = math.floor(deadline - wake)
        kinds = self._kinds_within(function, warm, budget)
        larger = self._cached(app, function, min(target, self.planners[app.name].largest_batch), budget, kinds,
                              padded)
        if not isinstance(larger, _PlannedChoice) or larger.cost >= (1.0 - HOLD_SAVING) * now.cost:
            return None
        if self._cached(app, function, min(n, self.planners[app.name].largest_batch), budget, kinds, padded) is None:
            return None  # if no job came, the jobs waiting could not be dispatched on time then
        self._held_head[queue.key] = queue.head.job_id
        return Choice((), reason=HOLDING, retry_at_ms=wake)

    def _allowed_batches(self, function: str) -> tuple[int, ...]:
        """The batch sizes of ``function``'s allowed configurations, ascending."""
        found = self._batches.get(function)
        if found is None:
            spec = self.ctx.spec(function)
            found = self._batches[function] = tuple(sorted(
                {e.config.batch for e in self.ctx.profiles[function].entries if spec.allows(e.config)}))
        return found

    def _cached(self, app: App, function: str, cap: int, budget: int,
                kinds: frozenset[str | None] | None, padded: bool) -> Choice | None:
        """ESG_1Q's choice for ``budget`` with ``function`` on the instance ``kinds`` given (None: any),
        with the per-batch overhead counted or not (``padded``), or None when no path meets it."""
        if budget <= 0 or kinds == frozenset():
            return None
        key = (app.name, function, cap, kinds, padded)
        choice = self._plans.get(key, budget)
        if choice is None:
            choice, valid_from = self._plan(app, function, cap, budget, kinds, padded)
            self._plans.put(key, budget, choice, valid_from)
        return choice if choice.priorities else None

    def on_dispatch(self, dispatch: Dispatch) -> None:
        super().on_dispatch(dispatch)
        key = (dispatch.app, dispatch.function)
        choice = self._chosen.get(key)
        if choice is not None:
            del self._chosen[key]
        if isinstance(choice, _PlannedChoice):  # (an explorer's probe is placed from no choice of this policy)
            self._batch_choice[dispatch.batch_id] = choice
        self._count_busy(dispatch, 1)
        if self.wait_for_busy:
            fit = dispatch.fit
            start = 0.0
            if fit.warm_worker is None:
                start = self._startup_ms(dispatch.function)[0] + fit.changed_instances * self.ctx.mig_reconfig_ms
            end = self._now + start + (dispatch.planned_latency_ms or 0.0) + self.ctx.stage_overhead_ms
            ends = self._ends.get(dispatch.function)
            if ends is None:
                ends = self._ends[dispatch.function] = {}
            ends[dispatch.batch_id] = ((dispatch.app, dispatch.function), dispatch.config.gpu, end)
            if fit.slice is not None:
                self._slice_end[(dispatch.node, fit.slice)] = end
        if dispatch.config.gpu is not None and dispatch.planned_latency_ms is not None:
            per_job = (dispatch.planned_latency_ms + self.ctx.stage_overhead_ms) / len(dispatch.jobs)
            seen = self._service.get(dispatch.function)
            self._service[dispatch.function] = per_job if seen is None else seen + SERVICE_WEIGHT * (per_job - seen)

    def on_done(self, dispatch: Dispatch) -> None:
        super().on_done(dispatch)
        if dispatch.batch_id in self._batch_choice:
            del self._batch_choice[dispatch.batch_id]
        self._count_busy(dispatch, -1)
        ends = self._ends.get(dispatch.function)
        if ends is not None and dispatch.batch_id in ends:
            del ends[dispatch.batch_id]
        if dispatch.fit.slice is not None:
            key = (dispatch.node, dispatch.fit.slice)
            if key in self._slice_end:
                del self._slice_end[key]

    def _count_busy(self, dispatch: Dispatch, moved: int) -> None:
        """Move ``dispatch``'s function's count of batches in flight, per MIG profile and per node."""
        busy = self._busy.get(dispatch.function)
        if busy is None:
            busy = self._busy[dispatch.function] = {}
        gpu = dispatch.config.gpu
        busy[gpu] = busy.get(gpu, 0) + moved
        self._busy_moves[dispatch.function] = self._busy_moves.get(dispatch.function, 0) + 1
        on = (dispatch.function, gpu, dispatch.node)
        self._busy_on[on] = self._busy_on.get(on, 0) + moved

    def running_for(self, key: tuple[str, str]) -> int:
        """Workers belong to functions, not to queues: a worker of f busy with another app's batch frees
        up for this queue's head in milliseconds, where a new one takes seconds to start. So while the
        head has an on-time plan, ESG's scale-out rule weighs every batch of the function in flight (with
        only the queue's own, a queue whose app had no batch running started a worker -- a cold start of
        seconds for a head with milliseconds of slack, and an instance taken -- while the function's
        workers were milliseconds from free); a late head weighs its queue's own, so that a backlog
        still grows the pool."""
        if self.function_scale_out and key in self._on_time:
            busy = self._busy.get(key[1])
            return sum(busy.values()) if busy else 0
        return self.running.get(key, 0) + self._soon.get(key, 0)

    def on_prewarm(self, prewarm: Prewarm, now_ms: float) -> None:
        """Also times a spare-instance start on its node (one at a time per node)."""
        super().on_prewarm(prewarm, now_ms)
        if self._spare_asked.get(prewarm.node) == prewarm.function:
            end = now_ms + self.prewarm_takes_ms(prewarm.function, False)
            ends = [t for t in self._spare_ends.get(prewarm.node, _NO_ENDS) if t >= now_ms]
            ends.append(end)
            self._spare_ends[prewarm.node] = ends
            self._spare_until[prewarm.node] = end

    def on_wait(self, app: App, queue: AfwQueue, choice: Choice, wait: Wait) -> None:
        """A head left waiting for a busy worker of its function marks the function short of workers:
        :meth:`_widen` (``widen_pools``) and, for an on-time head, :meth:`_spare` add one."""
        if not (wait.reason.startswith(WAITING_FOR_A_WORKER) and choice.priorities):
            return
        if self.widen_pools:
            self._short.setdefault(queue.key[1], (app.name, choice.priorities[0]))
        if self.spare_instances and queue.key in self._on_time:
            self._waited.setdefault(queue.key[1], (app.name, queue.head, choice.priorities[0]))

    # -- JIT pre-warming along the DAG, bounded keep-alive -------------------------------------------
    def on_arrival(self, request, app: App, now_ms: float) -> None:
        gaps = self._gaps.get(app.name)
        if gaps is None:
            gaps = self._gaps[app.name] = Gaps()
        gaps.add(request.arrival_ms)
        if self.pool_sizing:
            for f in app.functions:
                if not self._gpu_kinds(f):
                    continue  # a CPU-only function has no pool on MIG instances
                seen = self._jobs_seen.get(f)
                if seen is None:
                    seen = self._jobs_seen[f] = _Recent()
                seen.add(now_ms)
                self._rate(f, now_ms)  # forgets the jobs older than the window: the list stays short

    def keep_alive_ms(self, app: str, function: str, now_ms: float) -> float | None:
        gaps = self._gaps.get(app)
        if not self.bounded_keep_alive or gaps is None or len(gaps) < MIN_GAPS:
            return None
        rewarm = self.rewarm_ms(function)
        return min(PLATFORM_KEEP_ALIVE_MS, max(rewarm, GAP_HEADROOM * gaps.quantile(GAP_QUANTILE)))

    def prewarm(self, now_ms: float, snapshot: ClusterSnapshot, dispatched: Sequence[Dispatch]) -> list[WarmUp]:
        """For each dispatched batch of f, each successor g whose planned kind of instance has no worker
        on f's node: one started there, ready when f's batch is planned to end."""
        self._now = now_ms
        wants: dict[tuple[str, str | None, str], WarmUp] = {}
        due = self._pending.due(now_ms)
        for want in due:
            key = (want.function, want.config.gpu, want.preferred[0])
            if key not in wants and not self._warm_near(want.function, want.config.gpu, want.preferred[0], snapshot,
                                                        now_ms):
                wants[key] = want
        self._chosen.clear()  # the step is over: a choice none of its batches was placed from is stale
        for d in dispatched:
            choice = self._batch_choice.get(d.batch_id)
            if choice is None:
                continue  # the fastest-first rule: no plan for the successors
            del self._batch_choice[d.batch_id]
            end = now_ms + (d.planned_latency_ms or 0.0)
            for g in self.ctx.apps[d.app].successors(d.function):
                planned = choice.downstream.get(g)
                if planned is None:
                    continue
                key = (g, planned.gpu, d.node)
                if key in wants or self._warm_near(g, planned.gpu, d.node, snapshot, now_ms):
                    continue
                want = WarmUp(d.app, g, self._smallest_of_kind(g, planned),
                              self.keep_alive_ms(d.app, g, now_ms), preferred=(d.node,), only_preferred=True,
                              ready_by_ms=end)
                start = self.prewarm_start_ms(g, planned.gpu is not None, end)
                if start > now_ms:
                    self._pending.add(start, want)
                else:
                    wants[key] = want
        self._widen(now_ms, wants)
        self._spare(now_ms, snapshot, wants)
        if self.pool_sizing:
            self._size_pools(now_ms, snapshot, wants)
        return list(wants.values())

    def _spare(self, now_ms: float, snapshot: ClusterSnapshot,
               wants: dict[tuple[str, str | None, str], WarmUp]) -> None:
        """A worker for each function whose on-time head waited for a busy worker of it this step, on a
        spare instance (:func:`esg.prewarm.spare_instance`) of the planned profile, on the first node
        that has one in ESG_Dispatch's order (the locality node, then the rest by free capacity), one
        such start per node at a time. Such an instance is paid for already (a MIG instance costs the
        same idle with one warm worker or two): the new worker costs its cold start, takes no MIG
        change and leaves every function on the node an idle worker. No spare instance, no start (so at
        high load, when instances are busy, the rule does nothing)."""
        waited, self._waited = self._waited, {}
        self._spare_asked = {}
        for function, (app, head, config) in waited.items():
            if config.gpu is None or any(k[0] == function for k in wants):
                continue
            if self._warming.count(function, now_ms, config.gpu) > 0:
                continue  # one is starting already
            for node in snapshot.route(tuple(locality_order(app, head, snapshot.nodes)), True):
                if (self._spare_until.get(node, -math.inf) >= now_ms
                        or node in self._spare_asked):
                    continue  # one start on a spare instance at a time per node
                ref = spare_instance(snapshot.nodes[node], function, config.gpu)
                if ref is not None:
                    wants[(function, config.gpu, node)] = WarmUp(
                        app, function, self._smallest_of_kind(function, config),
                        self.keep_alive_ms(app, function, now_ms), preferred=(node,), only_preferred=True,
                        instance=ref)
                    self._spare_asked[node] = function
                    break

    # -- pools sized by the load seen -------------------------------------------------------------------
    def _window_ms(self, function: str) -> float:
        """How far back a function's load is counted: as long as starting one of its workers takes (a
        cold start and a MIG instance), the horizon a worker started now is ready for. Remembered per
        function: it depends on the context's profiles and specs only, which change only with
        :meth:`on_app_added` (which forgets them)."""
        found = self._windows.get(function)
        if found is None:
            found = self._windows[function] = self.rewarm_ms(function)
        return found

    def _rate(self, function: str, now_ms: float) -> float:
        """Jobs of ``function`` per ms over the last :meth:`_window_ms`."""
        seen = self._jobs_seen.get(function)
        if seen is None:
            return 0.0
        window = self._window_ms(function)
        return seen.forget_before(now_ms - window) / window if window > 0 else 0.0

    def _size_pools(self, now_ms: float, snapshot: ClusterSnapshot,
                    wants: dict[tuple[str, str | None, str], WarmUp]) -> None:
        """Grow the pools of the GPU functions onto the MIG instances ESG holds already, while the
        instances have room: one more worker, on a spare instance (:func:`esg.prewarm.spare_instance`:
        idle, held for other functions that each keep another idle worker on another idle instance of
        the profile, on this node or another), for each GPU function with load in its
        :meth:`_window_ms` and a worker on fewer instances of one of its :meth:`_pool_profiles` than the
        cluster has of it, the most loaded per worker first -- only while the instances' busy share
        (every GPU function's jobs per ms times its run time per job, over every MIG instance) is at
        most ``pool_fill_busy``. An idle instance costs the
        same with one warm worker or several, so a pool grown this way costs cold starts only: no MIG
        change, no instance more; the instances ESG holds then serve its functions as one pool, and a
        burst finds a worker of each function on every idle instance. One spare-instance start at a time
        per node (shared with :meth:`_spare`), or up to ``pool_burst_starts`` while the busy share is at
        most ``pool_burst_busy`` (the pools then fill before a burst; a start holds its instance for a
        cold start, so not while the instances are busier).

        Asked at every step, it looks first at what is cheapest to rule a start out: a node free to
        start one, then an instance at all, then the load, then a pool short of workers, then a spare
        instance possible of its profile on a node free to start one
        (:func:`esg.prewarm.stocked_profiles`). Each of these leaves nothing to place when it fails, so
        returning early changes no decision -- except that a function's pool profiles are planned
        (:meth:`_pool_profiles`) at the step the rule first meets the function past its load gate, as
        when it looked at every function at every step (planning at another step could leave the plan
        cache, and so later choices, otherwise)."""
        most = max(self.pool_burst_starts, 1)
        if len(self._pool_kinds) == len(self._service):  # (pool profiles are asked of its keys only)
            for node in snapshot.route((), True):
                if not self._full(node, now_ms, most):
                    break
            else:
                return  # as many spare-instance starts per node as may be at a time: none may start now
        per_profile = self._instances(snapshot)
        instances = 0
        for n in per_profile.values():
            instances += n
        if not instances:
            return
        service = self._service
        load: dict[str, float] = {}
        total = 0.0
        for f in self._served_functions():
            load[f] = found = self._rate(f, now_ms) * service[f]
            total += found
        if total > self.pool_fill_busy * instances:
            return  # the instances are busy: a start now takes one from the jobs for seconds
        slots = most if total <= self.pool_burst_busy * instances else 1
        pools = self._thin_pools(snapshot, wants, load, per_profile)
        if not pools:
            return
        stocked = self._stocked(now_ms, snapshot, slots)
        short = sorted([(-load[function] / max(workers, 1), function, profile) for function, workers, thin in pools
                        for profile in thin if profile in stocked and not self._warming.count(function, now_ms, profile)])
        if short:
            self._grow_pools(now_ms, snapshot, wants, short, slots)

    def _full(self, node: str, now_ms: float, slots: int) -> bool:
        """Whether the pool rule may start no more workers on ``node`` now: ``slots`` spare-instance
        starts are still starting there, or one was asked for there this step."""
        if node in self._spare_asked:
            return True
        starting = 0
        for end in self._spare_ends.get(node, _NO_ENDS):
            if end >= now_ms:
                starting += 1
        return starting >= slots

    def _stocked(self, now_ms: float, snapshot: ClusterSnapshot, slots: int = 1) -> set[str]:
        """The MIG profiles a spare instance may be found of this step: those of the idle instances
        holding an idle worker (:func:`esg.prewarm.stocked_profiles`) on the nodes free to start one
        (fewer than ``slots`` spare-instance starts starting there, none asked this step)."""
        stocked: set[str] = set()
        for node in snapshot.route((), True):
            if not self._full(node, now_ms, slots):
                stocked.update(stocked_profiles(snapshot.nodes[node]))
        return stocked

    def _instances(self, snapshot: ClusterSnapshot) -> dict[str, int]:
        """The cluster's MIG instances counted by profile (each node's count remembered on its state; the
        sum kept while the snapshot's ``instances_epoch`` stays: a count is kept over a change that only
        makes an instance busy or idle, and the rule asks at every step -- on 16 nodes, looking at each
        node's count at each step was 4 % of the replay). The caller must not change it."""
        summed = self._instances_summed
        if summed[0] is snapshot and summed[1] == snapshot.instances_epoch:
            return summed[2]
        per_profile: dict[str, int] = {}
        for node in snapshot.nodes.values():
            for profile, n in instances_by_profile(node).items():
                per_profile[profile] = per_profile.get(profile, 0) + n
        self._instances_summed = (snapshot, snapshot.instances_epoch, per_profile)
        return per_profile

    def _thin_pools(self, snapshot: ClusterSnapshot, wants: dict[tuple[str, str | None, str], WarmUp],
                    load: dict[str, float], per_profile: dict[str, int]) -> list[tuple[str, int, list[str]]]:
        """Per GPU function with load and no pre-warm asked this step (by name): its workers on its
        :meth:`_pool_profiles` (idle, or running one of this policy's batches) and those of its pool
        profiles where they are on fewer instances than the cluster has; functions with none left out.

        Asked at every step, for every function with load, while a function's workers move at few of
        them: each function's finding is kept (:meth:`_seen`) and used again while its workers and the
        cluster's instances per profile have not moved since."""
        if per_profile is not self._pools_instances:
            if per_profile != self._pools_instances:
                for seen in self._workers_seen.values():
                    seen.pool = None
            self._pools_instances = per_profile
        wanted: set[str] | frozenset[str] = {k[0] for k in wants} if wants else _NO_FUNCTIONS
        pools = []
        for function in self._served_functions():
            if load[function] <= 0.0 or function in wanted:
                continue
            profiles = self._pool_profiles(function)
            if not profiles:
                continue
            seen = self._seen(function, snapshot)
            pool = seen.pool
            if pool is None:
                pool = seen.pool = self._pool_of(snapshot, function, profiles, per_profile)
            if pool[1]:
                pools.append((function, pool[0], pool[1]))
        return pools

    def _seen(self, function: str, snapshot: ClusterSnapshot) -> _WorkersSeen:
        """What was worked out from ``function``'s workers, kept while its marks stay (else a fresh
        record, with nothing worked out yet)."""
        seen = self._workers_seen.get(function)
        epoch = snapshot.idle_epoch
        idle_moves = snapshot.idle_moves.get(function, 0)
        busy_moves = self._busy_moves.get(function, 0)
        if (seen is None or seen.snapshot is not snapshot or seen.epoch != epoch
                or seen.idle_moves != idle_moves or seen.busy_moves != busy_moves):
            seen = self._workers_seen[function] = _WorkersSeen(snapshot, epoch, idle_moves, busy_moves)
        return seen

    def _pool_of(self, snapshot: ClusterSnapshot, function: str, profiles: tuple[str, ...],
                 per_profile: dict[str, int]) -> tuple[int, list[str]]:
        """``function``'s workers on ``profiles`` (0 when it is thin on none of them) and the profiles
        where it has a worker on fewer instances than the cluster has."""
        busy = self._busy.get(function)
        idle: dict[str | None, int] | None = None
        thin: list[str] = []
        for q in profiles:
            have = per_profile.get(q, 0)
            held = busy.get(q, 0) if busy else 0
            if held >= have:
                continue  # its running batches alone hold a worker on every instance of q
            if idle is None:
                idle = snapshot.idle_totals(function)
            if held + idle.get(q, 0) < have:
                thin.append(q)
        if not thin:
            return 0, thin
        assert idle is not None
        workers = 0
        for q in profiles:
            workers += (busy.get(q, 0) if busy else 0) + idle.get(q, 0)
        return workers, thin

    def _served_functions(self) -> tuple[str, ...]:
        """The functions :attr:`_service` has, in name order (its keys are only ever added: sorted
        again only when one was)."""
        if len(self._served) != len(self._service):
            self._served = tuple(sorted(self._service))
        return self._served

    def _grow_pools(self, now_ms: float, snapshot: ClusterSnapshot,
                    wants: dict[tuple[str, str | None, str], WarmUp], short: list[tuple[float, str, str]],
                    slots: int = 1) -> None:
        """For each pool in ``short`` in its order, one worker on a spare instance of its profile on the
        first node (by free capacity) free to start one (:meth:`_full` with ``slots``) that has such an
        instance, one function a step and one start a node a step. A node with no idle instance of the
        profile holding a worker (:func:`esg.prewarm.stocked_profiles`) has no spare one, and the idle
        workers on the other nodes are the cluster's (summed once a call) less the node's own: on many
        nodes, summing the others for each node tried was most of the rule's work."""
        placed: set[str] = set()
        totals: dict[str, dict[str, int]] = {}
        for _, function, profile in short:
            if function in placed:
                continue
            for node in snapshot.route((), True):
                if self._full(node, now_ms, slots):
                    continue
                state = snapshot.nodes[node]
                if profile not in stocked_profiles(state):
                    continue  # (spare_instance finds none there)
                total = totals.get(profile)
                if total is None:
                    total = totals[profile] = self._idle_by_function(snapshot, profile)
                here = idle_by_function(state, profile)
                elsewhere = {f: n - here.get(f, 0) for f, n in total.items()}
                ref = spare_instance(state, function, profile, elsewhere)
                if ref is None:
                    continue
                app = self._app_of(function)
                config = next(e.config for e in self.ctx.profiles[function].entries if e.config.gpu == profile)
                wants[(function, profile, node)] = WarmUp(
                    app, function, self._smallest_of_kind(function, config),
                    self.keep_alive_ms(app, function, now_ms), preferred=(node,), only_preferred=True,
                    instance=ref)
                self._spare_asked[node] = function
                placed.add(function)
                break

    @staticmethod
    def _idle_by_function(snapshot: ClusterSnapshot, profile: str) -> dict[str, int]:
        """Per function, its idle workers on idle instances of ``profile`` on every node
        (:func:`esg.prewarm.idle_by_function`, remembered per node)."""
        total: dict[str, int] = {}
        for state in snapshot.nodes.values():
            for f, n in idle_by_function(state, profile).items():
                total[f] = total.get(f, 0) + n
        return total

    def _pool_profiles(self, function: str) -> tuple[str, ...]:
        """The MIG profiles a pool of ``function`` grows on: those of its configurations on the K cheapest
        paths ESG_1Q finds for a fresh request of each app with it (batches of one, any instance, the
        per-batch overhead counted) -- the kinds of instance its plans would use were a worker there."""
        found = self._pool_kinds.get(function)
        if found is None:
            kinds: set[str] = set()
            for _, app in sorted(self.ctx.apps.items()):
                if function not in app.functions:
                    continue
                fresh = math.floor(app.slo_ms - self._before_ms(app, function, True))
                choice = self._cached(app, function, 1, fresh, None, True)
                if choice is not None:
                    kinds.update(c.gpu for c in choice.priorities if c.gpu is not None)
            found = self._pool_kinds[function] = tuple(sorted(kinds))
        return found

    def _app_of(self, function: str) -> str:
        """The first app (by name) with ``function``: whose name a pool's pre-warm carries."""
        return next(name for name, a in sorted(self.ctx.apps.items()) if function in a.functions)

    def _widen(self, now_ms: float, wants: dict[tuple[str, str | None, str], WarmUp]) -> None:
        """One more worker for each function a head waited for this step, of the kind its plan wanted,
        unless one of that kind is starting already: placed as every pre-warm is, on room no instance is
        destroyed for (a worker started by taking another function's instance would leave that
        function's next jobs to a start-up)."""
        short, self._short = self._short, {}
        for function, (app, config) in short.items():
            key = (function, config.gpu, "")
            if key in wants or any(k[:2] == key[:2] for k in wants) or self._warming.count(
                    function, now_ms, config.gpu) > 0:
                continue
            wants[key] = WarmUp(app, function, self._smallest_of_kind(function, config),
                                self.keep_alive_ms(app, function, now_ms))

    def _smallest_of_kind(self, function: str, config: Config) -> Config:
        """:func:`esg.prewarm.smallest_of_kind` of ``function``'s profile, remembered per kind of instance
        while the profile stays (asked for the successors of every batch dispatched)."""
        profile = self.ctx.profiles[function]
        key = (function, config.gpu)
        hit = self._smallest.get(key)
        if hit is not None and hit[0] is profile:
            return hit[1]
        found = smallest_of_kind(profile, config)
        if any(e.config.gpu == config.gpu for e in profile.entries):  # (else ``config`` itself: not kept)
            self._smallest[key] = (profile, found)
        return found

    def _warm_near(self, function: str, kind: str | None, node: str, snapshot: ClusterSnapshot, now_ms: float) -> bool:
        """Whether a worker of ``function`` on ``kind`` is on ``node``: running, idle or starting."""
        return (self._busy_on.get((function, kind, node), 0) > 0 or idle_of_kind(snapshot, function, kind, (node,)) > 0
                or self._warming.count(function, now_ms, kind, (node,)) > 0)

    def _warm_kinds(self, function: str, snapshot: ClusterSnapshot) -> frozenset[str | None]:
        """The kinds of instance (MIG profile, None for CPU) where a worker of ``function`` exists:
        idle on a node, or running one of this policy's batches (kept while its workers stay,
        :meth:`_seen`: asked for every queue's head at every step)."""
        seen = self._seen(function, snapshot)
        found = seen.kinds
        if found is None:
            busy = self._busy.get(function)
            kinds = {k for k, n in busy.items() if n > 0} if busy else set()
            kinds.update(snapshot.idle_totals(function))
            found = seen.kinds = frozenset(kinds)
        return found

    def _startup_ms(self, function: str) -> tuple[float, float]:
        """The least start-up of a new worker of ``function``: (on CPU, on a new MIG instance);
        remembered per function until an app is added (asked for every queue at every step)."""
        found = self._startups.get(function)
        if found is None:
            cold = cold_start_ms(self.ctx.profiles[function], self.ctx.cold_start_scale)
            found = self._startups[function] = (cold, cold + self.ctx.mig_reconfig_ms)
        return found

    def _gpu_kinds(self, function: str) -> tuple[str, ...]:
        found = self._kinds.get(function)
        if found is None:
            found = self._kinds[function] = tuple(sorted(
                {e.config.gpu for e in self.ctx.profiles[function].entries if e.config.gpu is not None}))
        return found

    def _before_ms(self, app: App, function: str, padded: bool) -> float:
        """The fastest the functions before ``function`` can run (what a fresh request spends first),
        each with the per-batch overhead when ``padded``."""
        key = (app.name, function, padded)
        found = self._before.get(key)
        if found is None:
            before = tuple(f for f in app.functions if f != function and function in app.descendants(f))
            fastest = {f: min(e.latency_ms for e in self.ctx.profiles[f].entries
                              if self.ctx.spec(f).allows(e.config)) + self.ctx.stage_overhead_ms * padded
                       for f in before}
            found = self._before[key] = group_latency(app, before, fastest) if before else 0.0
        return found

    def _plan(self, app: App, function: str, cap: int, budget: float,
              kinds: frozenset[str | None] | None, padded: bool) -> tuple[Choice, float | None]:
        """The choice for a budget, and the lowest budget for which it is the same (None: unknown)."""
        planner = (self.planners if padded else self.bare)[app.name]

        def allow(f: str, c: Config) -> bool:
            if kinds is not None and f == function and c.gpu not in kinds:
                return False
            return c.batch <= cap and self.ctx.spec(f).allows(c)

        result = planner.plan(budget, self.ctx.top_k, start=function, allow=allow, allow_key=(cap, kinds))
        self.searches += 1
        self.expanded += result.stats.expanded
        if result.feasible:
            prios = result.priority_list(function)
            lat = {c: planner.profiles[function].latency(c) for c in prios}
            downstream = {f: c for f, c in result.paths[0].configs.items() if f != function}
            return _PlannedChoice(tuple(prios), latencies=lat, downstream=downstream,
                                  app=app.name, cost=result.paths[0].cost,
                                  latency_ms=result.paths[0].latency_ms), result.valid_from_ms
        return Choice(), 0.0  # no path meets it, nor any lower budget

    def _fastest_choice(self, app: App, function: str, cap: int) -> Choice:
        """Not even a fresh request could meet the SLO: every configuration, fastest first."""
        planner = self.bare[app.name]

        def allow(f: str, c: Config) -> bool:
            return c.batch <= cap and self.ctx.spec(f).allows(c)

        fastest = sorted(planner.options(function, allow, cap), key=lambda o: (o.latency_ms, o.cost))
        prios = tuple(o.config for o in fastest)
        return Choice(prios, reason=None if prios else "no allowed configuration",
                      latencies={o.config: o.latency_ms for o in fastest})


register("esg")(EsgPolicy)  # a statement, not a decorator: mypyc keeps a decorated class out of native code
