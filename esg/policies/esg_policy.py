"""ESG: ESG_1Q (A* with dual-blade pruning and dominator-based SLO distribution) per AFW queue.

For the head job of a queue the budget is what is left of its request's SLO; the search covers the
job's function and every function after it in the app, with batch sizes capped at the jobs waiting in
the queue (ESG batches what has arrived, it does not hold jobs back to fill a batch). The distinct
configurations of the queue's function across the K cheapest paths form the priority list that
ESG_Dispatch walks.

Start-up is part of the path evaluation: the queue's function may run on a kind of instance (a MIG
profile, or CPU) where none of its workers exists only when the head's budget covers a cold start
(and, on a GPU, a MIG instance created) -- with SLOs of tens of milliseconds and start-ups of seconds,
that keeps ESG on the instances it has, the cheapest of which the search then picks.

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

Plans are cached (:mod:`esg.policies.plan_cache`) per (app, function, batch cap, allowed instance
kinds) over the budgets, floored to 1 ms (which keeps the plan on the safe side), for which planning
again would give the same paths: from the planned budget down to the slowest returned path's latency
when the search covered the whole (sub-)app at once, and for exactly the planned budget when the
budget was split into group shares. A plain action's queue is then planned once, not once per
millisecond of its budget.

ESG_Dispatch walks that priority list with locality: the app's home node for entry functions, the
predecessor's node for the others, then the rest by free capacity. Warm workers, start-up against the
budget and the fallback are the machinery every policy shares (:mod:`esg.placement`); what is ESG's
own is the priority list, the locality order and the scale-out rule above.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence

from esg.cluster import ClusterSnapshot
from esg.events import Dispatch
from esg.model import App, Config
from esg.placement import StartupCosts, worth_starting
from esg.planner import Planner
from esg.policies import register
from esg.policies.base import Choice, Policy, PolicyContext
from esg.policies.plan_cache import PlanCache
from esg.queues import AfwQueue
from esg.slo_split import group_latency
from esg.timing import cold_start_ms


@register("esg")
class EsgPolicy(Policy):
    name = "esg"

    def __init__(self, ctx: PolicyContext, exact: bool = False):
        super().__init__(ctx)
        self.exact = exact
        self.planners = {name: self._planner(app) for name, app in ctx.apps.items()}
        self._plans = PlanCache()
        self._before: dict[tuple[str, str], float] = {}
        self._busy: Counter[tuple[str, str | None]] = Counter()
        """This policy's batches in flight per (function, MIG profile or None for CPU)."""
        self._kinds: dict[str, tuple[str, ...]] = {}
        self.searches = 0
        self.expanded = 0

    def _planner(self, app: App) -> Planner:
        return Planner(app, {f: self.ctx.profiles[f] for f in app.functions}, self.ctx.prices,
                       self.ctx.max_group, self.exact)

    def on_app_added(self, app: App) -> None:
        self.planners[app.name] = self._planner(app)
        self._plans.drop_app(app.name)
        self._before = {k: v for k, v in self._before.items() if k[0] != app.name}
        self._kinds = {}

    def node_preference(self, app: App, function: str, snapshot: ClusterSnapshot) -> None:
        """ESG_Dispatch's locality order: the app's home node for entry functions, the predecessor's
        node for the others."""
        return None

    def choose(self, app: App, queue: AfwQueue, now_ms: float, snapshot: ClusterSnapshot) -> Choice:
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
        startup = self._startup_ms(function)
        kinds = warm | {k for k in (None, *self._gpu_kinds(function)) if budget >= startup[k is not None]}
        choice = self._cached(app, function, cap, budget, frozenset(kinds))
        if choice is not None:
            return choice
        # the head is late, or no path meets what it has left: plan the queue's batch as for a request
        # arriving now, so the backlog drains in batches -- on the existing workers when a plan there
        # meets a fresh budget, else on new ones (the shared scale-out rule then decides)
        fresh = math.floor(head.deadline_ms - head.arrival_ms - self._before_ms(app, function))
        for allowed in ((frozenset(warm), None) if warm else (None,)):
            choice = self._cached(app, function, cap, fresh, allowed)
            if choice is not None:
                return choice
        return self._fastest_choice(app, function, cap)

    def _cached(self, app: App, function: str, cap: int, budget: int,
                kinds: frozenset[str | None] | None) -> Choice | None:
        """ESG_1Q's choice for ``budget`` with ``function`` on the instance ``kinds`` given (None: any),
        or None when no path meets it."""
        if budget <= 0 or kinds == frozenset():
            return None
        key = (app.name, function, cap, kinds)
        choice = self._plans.get(key, budget)
        if choice is None:
            choice, valid_from = self._plan(app, function, cap, budget, kinds)
            self._plans.put(key, budget, choice, valid_from)
        return choice if choice.priorities else None

    def may_scale_out(self, running: int, queued: int, priorities: Sequence[Config],
                      latency_of: Callable[[Config], float], startup: StartupCosts) -> bool:
        """ESG weighs a start-up against the backlog: a new worker only when the running batches would
        take longer than a cold start to work the queue off (:func:`esg.placement.worth_starting`)."""
        return worth_starting(running, queued, priorities, latency_of, startup)

    def on_dispatch(self, dispatch: Dispatch) -> None:
        super().on_dispatch(dispatch)
        self._busy[(dispatch.function, dispatch.config.gpu)] += 1

    def on_done(self, dispatch: Dispatch) -> None:
        super().on_done(dispatch)
        self._busy[(dispatch.function, dispatch.config.gpu)] -= 1

    def _warm_kinds(self, function: str, snapshot: ClusterSnapshot) -> set[str | None]:
        """The kinds of instance (MIG profile, None for CPU) where a worker of ``function`` exists:
        idle on a node, or running one of this policy's batches."""
        kinds = {k[1] for k, n in self._busy.items() if n > 0 and k[0] == function}
        for name in snapshot.nodes_with_warm(function):
            for (f, ref), n in snapshot.nodes[name].idle_workers.items():
                if f == function and n > 0:
                    kinds.add(None if ref is None else ref.profile)
        return kinds

    def _startup_ms(self, function: str) -> tuple[float, float]:
        """The least start-up of a new worker of ``function``: (on CPU, on a new MIG instance)."""
        cold = cold_start_ms(self.ctx.profiles[function], self.ctx.cold_start_scale)
        return cold, cold + self.ctx.mig_reconfig_ms

    def _gpu_kinds(self, function: str) -> tuple[str, ...]:
        found = self._kinds.get(function)
        if found is None:
            found = self._kinds[function] = tuple(sorted(
                {e.config.gpu for e in self.ctx.profiles[function].entries if e.config.gpu is not None}))
        return found

    def _before_ms(self, app: App, function: str) -> float:
        """The fastest the functions before ``function`` can run (what a fresh request spends first)."""
        key = (app.name, function)
        found = self._before.get(key)
        if found is None:
            before = tuple(f for f in app.functions if f != function and function in app.descendants(f))
            fastest = {f: min(e.latency_ms for e in self.ctx.profiles[f].entries
                              if self.ctx.spec(f).allows(e.config)) for f in before}
            found = self._before[key] = group_latency(app, before, fastest) if before else 0.0
        return found

    def _plan(self, app: App, function: str, cap: int, budget: float,
              kinds: frozenset[str | None] | None) -> tuple[Choice, float | None]:
        """The choice for a budget, and the lowest budget for which it is the same (None: unknown)."""
        planner = self.planners[app.name]

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
            return Choice(tuple(prios), latencies=lat), result.valid_from_ms
        return Choice(), 0.0  # no path meets it, nor any lower budget

    def _fastest_choice(self, app: App, function: str, cap: int) -> Choice:
        """Not even a fresh request could meet the SLO: every configuration, fastest first."""
        planner = self.planners[app.name]

        def allow(f: str, c: Config) -> bool:
            return c.batch <= cap and self.ctx.spec(f).allows(c)

        fastest = sorted(planner.options(function, allow, cap), key=lambda o: (o.latency_ms, o.cost))
        prios = tuple(o.config for o in fastest)
        return Choice(prios, reason=None if prios else "no allowed configuration",
                      latencies={o.config: o.latency_ms for o in fastest})

