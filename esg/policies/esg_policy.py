"""ESG: ESG_1Q's proposer and plan cache, ESG_Dispatch's node order and scale-out gate, and its rules.

**Proposing** (:class:`EsgProposer`). For the head job of a queue the budget is what is left of its
request's SLO; ESG_1Q (A* with dual-blade pruning and dominator-based SLO distribution) searches the
job's function and every function after it, with batch sizes capped at the jobs waiting (ESG batches
what has arrived). The distinct configurations of the queue's function across the K cheapest paths are
the priority list ESG_Dispatch walks. Start-up is part of the path evaluation: the function may run on
a kind of instance (a MIG profile, or CPU) where none of its workers exists only when the head's budget
covers the start-up. Every function on a path counts the per-batch overhead
(``PolicyContext.stage_overhead_ms``); a plan that fits only on run times alone is tried next. With
``PolicyContext.slo_percentile`` every run time counts at that percentile (:mod:`esg.tail`). A late
head's queue is planned as for a request arriving now (on the existing workers first, then on any
instance), so a backlog drains in batches; only when not even a fresh request could meet the SLO is
every configuration tried, fastest first.

Plans are cached (:mod:`esg.policies.plan_cache`) per (app, function, batch cap, allowed instance kinds,
overhead counted) over the whole-millisecond budgets for which planning again gives the same paths.

**Placing.** ESG_Dispatch's locality order (:class:`LocalityOrder`: the app's home node for entry
functions, the predecessor's node for the others, then the rest by free capacity) and ESG's scale-out
gate (:class:`WorthStarting`: a new worker only when the running batches would take longer than a cold
start to work the queue off, :func:`esg.placement.worth_starting`).

**Rules** (:mod:`esg.policies.rules`), each a plugin holding its own state: JIT pre-warming along the
DAG, waiting for a busy worker that frees in time, a worker on a spare instance, pools sized by the
load. :func:`esg_policy` composes them (:data:`ESG_RULES`, all on: measured to win, ``docs/baselines.md``);
a rule left out is an ablation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from esg.cluster import ClusterSnapshot
from esg.defaults import StartupCosts
from esg.dispatch import locality_order
from esg.model import App, Config, Job
from esg.placement import worth_starting
from esg.planner import Planner
from esg.policies import register
from esg.policies.base import Choice, Policy, PolicyContext, Starting, apps_sharing
from esg.policies.plan_cache import PlanCache
from esg.policies.points import QueueKey
from esg.policies.rules.jit_prewarm import JitPrewarm
from esg.policies.rules.pool_sizing import PoolSizing
from esg.policies.rules.shared import EsgParts, InFlight, PlannedChoice, SmallestOfKind, SpareStarts
from esg.policies.rules.spare_instances import SpareInstances
from esg.policies.rules.wait_for_busy import WaitForBusy
from esg.queues import AfwQueue
from esg.slo_split import group_latency
from esg.timing import cold_start_ms

Kinds = frozenset[str | None]
"""Kinds of instance: MIG profiles, None for CPU."""


class EsgProposer:
    """ESG_1Q per AFW queue over a plan cache; what the rules ask of ESG's plans is public here."""

    def __init__(self, ctx: PolicyContext, in_flight: InFlight):
        self.ctx = ctx
        self.in_flight = in_flight
        self.planners = {name: self._planner(app) for name, app in ctx.apps.items()}
        """ESG_1Q per app, each function's latency counting the per-batch overhead."""
        self.bare = ({name: self._planner(app, 0.0) for name, app in ctx.apps.items()}
                     if ctx.stage_overhead_ms else self.planners)
        """ESG_1Q per app on the profiled latencies alone."""
        self._plans = PlanCache()
        self._before: dict[tuple[str, str, bool], float] = {}
        self._rest: dict[tuple[str, str, bool], float] = {}
        self._gpu_kinds: dict[str, tuple[str, ...]] = {}
        self._startups: dict[str, tuple[float, float]] = {}
        self._on_demand: dict[str, bool] = {}
        self._warm: dict[str, tuple[ClusterSnapshot, tuple[int, int], Kinds]] = {}
        """Per function, :meth:`warm_kinds` with the marks it was worked out at (the snapshot, its index's
        ``idle_generation`` of the function, the function's moves in flight): kept while the marks stay."""
        self._on_time: set[QueueKey] = set()
        self.searches = 0
        self.expanded = 0

    def _planner(self, app: App, overhead: float | None = None) -> Planner:
        over = self.ctx.stage_overhead_ms if overhead is None else overhead
        return Planner(app, {f: self.ctx.profiles[f] for f in app.functions}, self.ctx.prices,
                       self.ctx.max_group, stage_overhead_ms=over, percentile=self.ctx.slo_percentile)

    def on_app_added(self, ctx: PolicyContext, app: App) -> None:
        self.ctx = ctx
        changed = apps_sharing(ctx, app)
        for a in changed:
            self.planners[a.name] = self._planner(a)
            if self.bare is not self.planners:
                self.bare[a.name] = self._planner(a, 0.0)
            self._plans.drop_app(a.name)
        names = {a.name for a in changed}
        self._before = {k: v for k, v in self._before.items() if k[0] not in names}
        self._rest = {k: v for k, v in self._rest.items() if k[0] not in names}
        self._gpu_kinds, self._startups, self._warm, self._on_demand = {}, {}, {}, {}

    def work_units(self) -> int:
        return self.expanded

    def on_time(self, key: QueueKey) -> bool:
        """Whether queue ``key``'s head had an on-time plan at its last choice."""
        return key in self._on_time

    def choose(self, app: App, queue: AfwQueue, now_ms: float, snapshot: ClusterSnapshot) -> Choice:
        function = queue.key[1]
        self._on_time.discard(queue.key)
        # the jobs waiting cap every batch of the plan; beyond the app's largest batch the cap changes
        # nothing, and one cache entry serves every longer queue (a burst's queue lengths all differ)
        cap = min(len(queue), self.planners[app.name].largest_batch)
        head = queue.head
        budget = math.floor(head.deadline_ms - now_ms)
        warm = self.warm_kinds(function, snapshot)
        kinds = self._kinds_within(function, warm, budget)
        paddings = (True, False) if self.ctx.stage_overhead_ms else (False,)
        for padded in paddings:
            choice = self.plan(app, function, cap, budget, kinds, padded)
            if choice is not None:
                self._on_time.add(queue.key)
                return choice
        # late, or no path meets what is left: plan the queue's batch as for a request arriving now --
        # on the existing workers when a plan there meets a fresh budget, else on new ones
        for padded in paddings:
            fresh = math.floor(head.deadline_ms - head.arrival_ms - self.before_ms(app, function, padded))
            for allowed in ((warm, None) if warm else (None,)):
                choice = self.plan(app, function, cap, fresh, allowed, padded)
                if choice is not None:
                    return choice
        return self._fastest_choice(app, function, cap)

    def _kinds_within(self, function: str, warm: Kinds, budget: float) -> Kinds:
        """Where ``function`` may run with ``budget`` left: where a worker of it exists (``warm``), and
        where a new one's start-up (a cold start, and a MIG instance created on a GPU) fits."""
        startup = self.startup_ms(function)
        if budget < startup[0] and budget < startup[1]:
            return warm  # no start-up fits (budgets of milliseconds, start-ups of seconds)
        return frozenset(warm | {k for k in (None, *self.gpu_kinds(function)) if budget >= startup[k is not None]})

    def plan(self, app: App, function: str, cap: int, budget: int, kinds: Kinds | None, padded: bool) -> Choice | None:
        """ESG_1Q's choice for ``budget`` with ``function`` on the instance ``kinds`` given (None: any),
        with the per-batch overhead counted or not (``padded``), or None when no path meets it."""
        if budget <= 0 or kinds == frozenset():
            return None
        key = (app.name, function, cap, kinds, padded)
        choice = self._plans.get(key, budget)
        if choice is None:
            choice, valid_from = self._search(app, function, cap, budget, kinds, padded)
            self._plans.put(key, budget, choice, valid_from)
        return choice if choice.priorities else None

    def _search(self, app: App, function: str, cap: int, budget: float, kinds: Kinds | None,
                padded: bool) -> tuple[Choice, float | None]:
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
            lat = {c: planner.run_latency(function, c) for c in prios}
            downstream = {f: c for f, c in result.paths[0].configs.items() if f != function}
            return (PlannedChoice(tuple(prios), latencies=lat, downstream=downstream, app=app.name),
                    result.valid_from_ms)
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

    def before_ms(self, app: App, function: str, padded: bool) -> float:
        """The fastest the functions before ``function`` can run (what a fresh request spends first),
        each with the per-batch overhead when ``padded``."""
        key = (app.name, function, padded)
        found = self._before.get(key)
        if found is None:
            before = tuple(f for f in app.functions if f != function and function in app.descendants(f))
            fastest = {f: self._fastest_ms(f, padded) for f in before}
            found = self._before[key] = group_latency(app, before, fastest) if before else 0.0
        return found

    def rest_ms(self, app: App, function: str, padded: bool = False) -> float:
        """The fastest the functions after ``function`` can run (what the head must leave them), each with
        the per-batch overhead when ``padded``."""
        key = (app.name, function, padded)
        found = self._rest.get(key)
        if found is None:
            after = tuple(f for f in app.descendants(function) if f != function)
            fastest = {f: self._fastest_ms(f, padded) for f in after}
            found = self._rest[key] = group_latency(app, after, fastest) if after else 0.0
        return found

    def _fastest_ms(self, function: str, padded: bool) -> float:
        """``function``'s fastest allowed run time, with the per-batch overhead when ``padded``."""
        spec = self.ctx.spec(function)
        return (min(e.latency_ms for e in self.ctx.profiles[function].entries if spec.allows(e.config))
                + self.ctx.stage_overhead_ms * padded)

    def startup_ms(self, function: str) -> tuple[float, float]:
        """The least start-up of a new worker of ``function``: (on CPU, on a new MIG instance)."""
        found = self._startups.get(function)
        if found is None:
            cold = cold_start_ms(self.ctx.profiles[function], self.ctx.cold_start_scale)
            found = self._startups[function] = (cold, cold + self.ctx.mig_reconfig_ms)
        return found

    def cold_start_in_time(self, function: str) -> bool:
        """Whether a worker of ``function`` started on demand, on an instance that exists, still lets a
        fresh request of every app with it meet its SLO: the functions before it at their fastest, then
        its cold start, then it and the rest at their fastest, each batch with the per-batch overhead.
        Then a head that finds no idle worker starts one in time (:meth:`_kinds_within`), and a worker
        started ahead of the jobs saves none of them anything. (With cold starts of seconds against SLOs
        of milliseconds this is never so; with cold starts near zero it always is.)"""
        found = self._on_demand.get(function)
        if found is None:
            cold, own = self.startup_ms(function)[0], self._fastest_ms(function, True)
            found = self._on_demand[function] = all(
                self.before_ms(app, function, True) + cold + own + self.rest_ms(app, function, True) <= app.slo_ms
                for app in self.ctx.apps.values() if function in app.functions)
        return found

    def gpu_kinds(self, function: str) -> tuple[str, ...]:
        """The MIG profiles of ``function``'s table, sorted."""
        found = self._gpu_kinds.get(function)
        if found is None:
            found = self._gpu_kinds[function] = tuple(sorted(
                {e.config.gpu for e in self.ctx.profiles[function].entries if e.config.gpu is not None}))
        return found

    def warm_kinds(self, function: str, snapshot: ClusterSnapshot) -> Kinds:
        """The kinds of instance where a worker of ``function`` exists: idle on a node, or running one of
        this policy's batches (asked for every queue's head at every step, so kept while its marks stay)."""
        marks = (snapshot.index.idle_generation(function), self.in_flight.moves(function))
        seen = self._warm.get(function)
        if seen is not None and seen[0] is snapshot and seen[1] == marks:
            return seen[2]
        busy = self.in_flight.by_kind(function)
        kinds = {k for k, n in busy.items() if n > 0}
        kinds.update(snapshot.idle_totals(function))
        found = frozenset(kinds)
        self._warm[function] = (snapshot, marks, found)
        return found


class LocalityOrder:
    """ESG_Dispatch's node order: the app's home node for entry functions, the predecessor's node for
    the others (:func:`esg.dispatch.locality_order`)."""

    def preferred_nodes(self, app: App, head: Job, snapshot: ClusterSnapshot) -> list[str]:
        return locality_order(app.name, head, snapshot.nodes)


class WorthStarting:
    """ESG's scale-out gate: a new worker only when the running batches would take longer than its
    start-up (cold start and MIG changes) to work the queue off (:func:`esg.placement.worth_starting`)."""

    def may_scale_out(self, running: int, queued: int, priorities: Sequence[Config],
                      latency_of: Callable[[Config], float], startup: StartupCosts) -> bool:
        return worth_starting(running, queued, priorities, latency_of, startup)


RuleFactory = Callable[[EsgParts], object]
RULE_NAMES: dict[str, RuleFactory] = {
    "jit-prewarm": JitPrewarm, "wait-for-busy": WaitForBusy, "spare-instances": SpareInstances,
    "pool-sizing": PoolSizing,
}
"""ESG's added rules by the name an ablation uses (policy ``esg-without-<name>`` is ``esg`` with that
one rule left out), in the order their hooks run."""
ESG_RULES: tuple[RuleFactory, ...] = tuple(RULE_NAMES.values())
"""ESG's rules (each takes the parts they share, :class:`EsgParts`)."""


def esg_policy(ctx: PolicyContext, rules: Sequence[RuleFactory] = ESG_RULES, name: str = "esg") -> Policy:
    """ESG: :class:`EsgProposer`, :class:`LocalityOrder`, :class:`WorthStarting` and ``rules``."""
    in_flight = InFlight()
    proposer = EsgProposer(ctx, in_flight)
    parts = EsgParts(ctx, proposer, in_flight, Starting(ctx), SpareStarts(ctx), SmallestOfKind())
    made = [rule(parts) for rule in rules]
    return Policy(name, ctx, proposer, [LocalityOrder(), WorthStarting(), in_flight, parts.starting,
                                         parts.spare_starts, *made])


register("esg")(esg_policy)  # registered undecorated: a decorator's type would hide the keyword arguments


@register("esg-paper")
def esg_paper_policy(ctx: PolicyContext) -> Policy:
    """ESG as published: ESG_1Q's proposer with its dominator split, ESG_Dispatch's node order, and none
    of the rules this project added. Its scale-out gate is the generic one every policy without an
    autoscaler of its own uses (:class:`WorthStarting`), so the difference from ``esg`` is the rules."""
    return esg_policy(ctx, rules=(), name="esg-paper")


def _without(left_out: str) -> None:
    rules = tuple(r for r in ESG_RULES if r is not RULE_NAMES[left_out])
    name = f"esg-without-{left_out}"
    register(name)(lambda ctx: esg_policy(ctx, rules=rules, name=name))


for _rule in RULE_NAMES:
    _without(_rule)
